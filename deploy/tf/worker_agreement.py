#!/usr/bin/env python3
"""How much two workers' gradients agree, step by step: a candidate signal
for when error feedback's lag matters.

A synchronous step averages the gradients of the workers' batches. Where
they agree (a consistent direction: a model leaving a plateau, or early
fast descent), a push that is held back delays the step that matters;
where they barely agree (noise dominates: a plateau, or convergence), it
delays noise. The parameter task's sidecar decodes every worker's push of
a step, so it could measure this; this script measures it offline, on the
true gradients, without tlcd or compression: two workers' batches from
their own shards, the mean applied with the model's optimizer, as a
synchronous job would.

    worker_agreement.py MODEL SEED STEPS [--window N] [--threshold C]

MODEL is `mlp` (train.py's harness MLP) or a zoo member with dense
gradients (densesgd, conv2, mlpadam, denseadam). Prints per window: the
mean cosine between the two workers' whole gradients; `own`, worker 0's
whole gradient against its own last one, and `sampled`, the same for the
largest tensor on a strided sample of 4096 values (what one worker's
sidecar could measure alone: it does not separate the models); the median
noise-to-signal ratio |g0 - g1|^2 / |g0 + g1|^2, the mean training loss,
and the test accuracy every 50 steps; then the share of windows whose
mean cosine is above the threshold.
"""

import argparse
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def whole(grads):
    return np.concatenate([g.ravel() for g in grads]).astype(np.float64)


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def graph(tf, model, seed):
    """The model's loss, accuracy, per-worker training batches as feeds,
    the test feeds and its optimizer."""
    if model == "mlp":
        import train

        def args(task):
            return types.SimpleNamespace(seed=seed, hidden=1024, job="worker", task=task)

        x, y, loss, accuracy = train.build_model(tf, args(0))
        shards = [train.load_data(args(t), 2) for t in (0, 1)]
        feeds = [({x: bx, y: by} for bx, by in train.batches(d[0], d[1], 64, seed * 1000 + t))
                 for t, d in enumerate(shards)]
        tests = [({x: shards[0][2], y: shards[0][3]}, len(shards[0][3]))]
        return loss, accuracy, feeds, tests, tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
    import zoo

    m = zoo.BY_NAME[model]

    def args(task):
        return types.SimpleNamespace(task=task, model=model, seed=seed, job="worker", **m.defaults)

    shards = [zoo.load(args(t), 2) for t in (0, 1)]
    built = zoo.build(tf, args(0), shards[0], 1)
    x = tf.compat.v1.get_default_graph().get_tensor_by_name("x:0")
    y = tf.compat.v1.get_default_graph().get_tensor_by_name("y:0")
    other = shards[1]
    feeds = [built["train_feeds"],
             ({x: other[0][i], y: other[1][i]}
              for i in zoo.shuffled(len(other[1]), m.defaults["batch"], seed * 1000 + 1))]
    d = m.defaults
    if d["optimizer"] == "adam":
        optimizer = tf.compat.v1.train.AdamOptimizer(d["lr"])
    else:
        optimizer = tf.compat.v1.train.MomentumOptimizer(d["lr"], d["momentum"])
    return built["loss"], built["accuracy"], feeds, built["test_feeds"], optimizer


def run(model, seed, steps):
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    rows = []
    with tf.Graph().as_default():
        loss, accuracy, feeds, tests, optimizer = graph(tf, model, seed)
        variables = tf.compat.v1.trainable_variables()
        grads = tf.gradients(loss, variables)
        given = [tf.compat.v1.placeholder(tf.float32, v.shape) for v in variables]
        apply = optimizer.apply_gradients(list(zip(given, variables)))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            before = None
            largest = int(np.argmax([int(np.prod(v.shape)) for v in variables]))
            for step in range(steps):
                g0, l0 = sess.run([grads, loss], next(feeds[0]))
                g1 = sess.run(grads, next(feeds[1]))
                a, b = whole(g0), whole(g1)
                cos = cosine(a, b)
                # What one worker's sidecar can see alone: this gradient
                # against the same worker's last, whole and for the
                # largest tensor on a strided sample of 4096 coordinates.
                big = g0[largest].ravel().astype(np.float64)
                stride = max(1, big.size // 4096)
                own = (cosine(a, before[0]), cosine(big[::stride], before[1])) if before else (0.0, 0.0)
                before = (a, big[::stride])
                nsr = np.sum((a - b) ** 2) / (np.sum((a + b) ** 2) + 1e-30)
                sess.run(apply, {p: (u + v) / 2 for p, u, v in zip(given, g0, g1)})
                acc = None
                if (step + 1) % 50 == 0:
                    acc = sum(sess.run(accuracy, f) * n for f, n in tests) / sum(n for _, n in tests)
                rows.append((cos, nsr, l0, acc, own[0], own[1]))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("seed", type=int)
    p.add_argument("steps", type=int)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--threshold", type=float, default=0.3)
    a = p.parse_args()
    rows = run(a.model, a.seed, a.steps)
    above = 0
    windows = 0
    for start in range(0, a.steps, a.window):
        w = rows[start:start + a.window]
        cos = float(np.mean([r[0] for r in w]))
        accs = [r[3] for r in w if r[3] is not None]
        above += cos > a.threshold
        windows += 1
        print(f"{a.model} seed {a.seed} steps {start:4d}-{start + len(w) - 1:4d}: cos {cos:+.3f} "
              f"own {np.mean([r[4] for r in w]):+.3f} sampled {np.mean([r[5] for r in w]):+.3f} "
              f"nsr {np.median([r[1] for r in w]):5.2f} loss {np.mean([r[2] for r in w]):.3f}"
              + (f" acc {accs[-1]:.3f}" if accs else ""))
    print(f"{a.model} seed {a.seed}: {above} of {windows} windows of {a.window} steps above cos {a.threshold}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
