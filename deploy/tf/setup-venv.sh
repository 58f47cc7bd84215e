#!/usr/bin/env bash
# Create a Python venv for deploy/tf/train.py (TensorFlow CPU, numpy,
# scikit-learn), e.g. in CI where /work/tfvenv does not exist.
#
#   deploy/tf/setup-venv.sh [DIR]     (default ./.venv-tf)
#
# Idempotent: does nothing if DIR/bin/python already imports tensorflow.
# The interpreter used to create the venv is $PYTHON (default python3; TF
# 2.21 wants Python 3.10-3.13). Use the venv with run_local.sh through
# TLC_PYTHON=DIR/bin/python, or leave it at ./.venv-tf where run_local.sh
# looks for it.
set -euo pipefail

dir=${1:-./.venv-tf}
python=${PYTHON:-python3}

# The versions train.py was tested with (tensorflow-cpu 2.21.0 on Python 3.11).
packages=(tensorflow-cpu==2.21.0 numpy==2.4.6 scikit-learn==1.9.1)

if [[ -x $dir/bin/python ]] && "$dir/bin/python" -c 'import tensorflow' >/dev/null 2>&1; then
    echo "setup-venv: $dir already has tensorflow, nothing to do"
    exit 0
fi

[[ -x $dir/bin/python ]] || "$python" -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
# No wheel cache: TensorFlow's wheel would take its size twice on disk.
"$dir/bin/python" -m pip install --quiet --no-cache-dir "${packages[@]}"
# Prove it works the way train.py uses it.
TF_CPP_MIN_LOG_LEVEL=2 "$dir/bin/python" -c '
import sklearn.datasets, tensorflow as tf
tf.compat.v1.disable_v2_behavior()
sklearn.datasets.load_digits()
print("setup-venv: tensorflow", tf.__version__, "ready")'
