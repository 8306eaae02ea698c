#!/usr/bin/env python3
"""Check tf.recompute_grad with ckpt-harness compare: control first, then the verdict.

    pip install "tensorflow-cpu>=2.16,<2.22"     # Keras 3; tested: TF 2.21.0, Keras 3.15.1
    python3 examples/tf_recompute_grad_dump.py [--dropout | --stateless-dropout] [--out DIR]

One gradient step of a small dense net, from the same weights and batch:
  1. plain, twice -> plain.safetensors, plain_again.safetensors: the CONTROL, which must be
     bitwise identical before any checkpointed result is believed;
  2. every block wrapped in tf.recompute_grad -> ckpt.safetensors, compared against
     plain.safetensors with `ckpt-harness compare`.
Saved per run: the loss and every trainable variable's gradient, named
"grad.<variable.path>" (Keras 3: "block0/kernel"; Keras 2 spelled it "block0/kernel:0").
The variables are built once and shared, so every run starts from the same weights.

Options and their documented outcomes (tests/interop/run_tf.sh asserts each):
  (default)            Dense blocks                                            exit 0
  --dropout            a keras.layers.Dropout(seed=...) in every block: its SeedGenerator
                       advances on every call, so the recomputation in backward draws a
                       new mask -- caught, exit 1. Each run builds fresh Dropout layers with
                       the same seeds, so the plain-vs-plain control stays identical
                       (tf.random.set_seed does not reset Keras 3's seed state).
  --stateless-dropout  tf.nn.experimental.stateless_dropout with a fixed seed per block:
                       the recomputation draws the same mask                   exit 0
  --reuse-dropout      the Dropout layers built once and reused by every run (what this
                       script did before Keras 3): the two plain runs already draw
                       different masks, and the control says so            exit 1
Exit codes: compare's (0 passed, 1 a difference or a failed control), 2 bad usage or no
ckpt-harness.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_lite  # noqa: E402  (numpy-only safetensors)

keras = tf.keras


def var_name(v):
    return getattr(v, "path", None) or v.name  # Keras 3: path; Keras 2: name


def make_dense():
    return [keras.layers.Dense(32, activation="relu", name=f"block{i}") for i in range(3)]


def make_dropout(kind):
    if kind == "keras":
        return [keras.layers.Dropout(0.2, seed=100 + i) for i in range(3)]
    return [None] * 3


def forward(dense, drops, head, x, recompute, stateless):
    for i, (d, drop) in enumerate(zip(dense, drops)):
        def block(h, d=d, drop=drop, i=i):
            h = d(h)
            if drop is not None:
                h = drop(h, training=True)
            elif stateless:
                h = tf.nn.experimental.stateless_dropout(h, 0.2, seed=[7, i])
            return h
        x = tf.recompute_grad(block)(x) if recompute else block(x)
    return head(x)


def dump(path, variables, grads, loss):
    """Everything `compare` should look at, as one safetensors file."""
    t = {"loss": np.asarray(float(loss.numpy()), np.float32).reshape(())}
    for v, g in zip(variables, grads):
        if g is None:
            raise SystemExit(f"no gradient for {var_name(v)}")
        t["grad." + var_name(v)] = np.ascontiguousarray(g.numpy())
    if len(t) != len(variables) + 1:
        raise SystemExit("two variables share a name: the dump would drop gradients")
    safetensors_lite.save(path, t)


def find_harness(arg):
    if arg:
        return arg if os.path.isfile(arg) and os.access(arg, os.X_OK) else None
    for c in (os.environ.get("CKPT_HARNESS"), os.path.join(HERE, "..", "build", "ckpt-harness"),
              shutil.which("ckpt-harness")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def compare(harness, a, ref, *extra):
    cmd = [harness, "compare", a, ref, "--rows", "5", *extra]
    print("$", " ".join(cmd), flush=True)
    sys.stdout.flush()
    return subprocess.run(cmd, stdout=sys.stdout, stderr=sys.stderr).returncode


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="dumps")
    ap.add_argument("--harness", help="the ckpt-harness program")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--dropout", action="store_true", help="Keras Dropout layers (caught)")
    g.add_argument("--stateless-dropout", action="store_true", help="stateless dropout (passes)")
    g.add_argument("--reuse-dropout", action="store_true",
                   help="Keras Dropout layers built once and reused by every run: the control fails")
    args = ap.parse_args(argv)
    harness = find_harness(args.harness)
    if not harness:
        print("tf_recompute_grad_dump: ckpt-harness not found (--harness PATH)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    dense, head = make_dense(), keras.layers.Dense(10, name="head")
    x = tf.random.normal((8, 16))
    y = tf.random.uniform((8,), maxval=10, dtype=tf.int32)
    forward(dense, [None] * 3, head, x, False, False)  # build the variables once: shared
    variables = [v for d in dense for v in d.trainable_variables] + head.trainable_variables
    shared = make_dropout("keras") if args.reuse_dropout else None
    for name, recompute in (("plain", False), ("plain_again", False), ("ckpt", True)):
        drops = shared or make_dropout("keras" if args.dropout else None)  # fresh, same seeds
        with tf.GradientTape() as tape:
            logits = forward(dense, drops, head, x, recompute, args.stateless_dropout)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        grads = tape.gradient(loss, variables)
        dump(os.path.join(args.out, name + ".safetensors"), variables, grads, loss)
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}: {len(variables)} variables "
          f"({', '.join(var_name(v) for v in variables)})")
    p = lambda n: os.path.join(args.out, n + ".safetensors")  # noqa: E731
    print("-- control: plain vs plain again (must be bitwise identical) --")
    if compare(harness, p("plain_again"), p("plain"), "--rtol", "0", "--atol", "0", "--quiet") != 0:
        print("CONTROL FAILED: two plain runs differ, so any checkpoint verdict would be noise")
        return 1
    print("-- recompute_grad vs plain --")
    rc = compare(harness, p("ckpt"), p("plain"))
    if args.dropout and rc == 1:
        print("caught: the Keras Dropout layer's seed generator advanced, so the recomputed "
              "block drew a new mask (use stateless dropout with a fixed seed inside "
              "recompute_grad)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
