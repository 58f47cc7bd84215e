#!/usr/bin/env python3
"""Dump real gradients for trying codecs on: an MLP trained with plain SGD
on scikit-learn's digits (which ships inside the package), numpy only.

Writes the gradient of the largest weight matrix at every step as raw
little-endian f32, one tensor after another, ready for
`tlcctl codec encode --chunk N`. Prints N.

    python3 scripts/mlp_gradients.py --steps 200 --out /tmp/grads.f32
"""

import argparse
import sys

import numpy as np
from sklearn.datasets import load_digits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target
    h = args.hidden
    # 64 -> h -> h/2 -> 10, ReLU; the h x h/2 matrix is the largest tensor.
    sizes = [x.shape[1], h, h // 2, 10]
    weights = [
        (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
        for a, b in zip(sizes, sizes[1:])
    ]
    biases = [np.zeros(b, np.float32) for b in sizes[1:]]
    largest = max(range(len(weights)), key=lambda i: weights[i].size)

    with open(args.out, "wb") as out:
        for step in range(args.steps):
            idx = rng.integers(0, len(x), args.batch)
            acts = [x[idx]]
            for i, (w, b) in enumerate(zip(weights, biases)):
                z = acts[-1] @ w + b
                acts.append(np.maximum(z, 0) if i < len(weights) - 1 else z)
            logits = acts[-1]
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            loss = -np.log(p[np.arange(len(idx)), y[idx]] + 1e-12).mean()
            delta = p
            delta[np.arange(len(idx)), y[idx]] -= 1
            delta /= len(idx)
            for i in reversed(range(len(weights))):
                grad_w = acts[i].T @ delta
                grad_b = delta.sum(axis=0)
                if i > 0:
                    delta = (delta @ weights[i].T) * (acts[i] > 0)
                if i == largest:
                    out.write(grad_w.astype("<f4").tobytes())
                weights[i] -= args.lr * grad_w
                biases[i] -= args.lr * grad_b
            if step % 50 == 0:
                print(f"step {step} loss {loss:.4f}", file=sys.stderr)
    print(weights[largest].size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
