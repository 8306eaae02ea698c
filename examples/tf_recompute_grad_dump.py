#!/usr/bin/env python3
"""Dump gradients with and without tf.recompute_grad, for `ckpt-harness compare`.

    pip install tensorflow safetensors
    python3 examples/tf_recompute_grad_dump.py --out dumps/
    ckpt-harness compare dumps/ckpt.safetensors dumps/plain.safetensors

One step of a small dense net, twice from the same weights and batch: plain, then with
every block wrapped in tf.recompute_grad. Saved per run with safetensors.numpy: the loss
and every trainable variable's gradient ("grad.<variable name>", e.g. "grad.block0/kernel:0"
-- add a --map file to compare against names spelled another way). With --dropout the
blocks use Keras dropout, which recompute_grad does not replay (keras issue 17548): the
recomputed mask differs and `compare` reports the mismatch.
"""
import argparse
import os

import numpy as np
import tensorflow as tf
from safetensors.numpy import save_file


def make_blocks(dropout):
    blocks = []
    for i in range(3):
        dense = tf.keras.layers.Dense(32, activation="relu", name=f"block{i}")
        drop = tf.keras.layers.Dropout(0.1) if dropout else None
        blocks.append((dense, drop))
    return blocks


def forward(blocks, head, x, recompute):
    for dense, drop in blocks:
        def block(h, dense=dense, drop=drop):
            h = dense(h)
            return drop(h, training=True) if drop is not None else h
        x = tf.recompute_grad(block)(x) if recompute else block(x)
    return head(x)


def dump(path, variables, grads, loss):
    """Everything `compare` should look at, as one safetensors file."""
    t = {"loss": np.asarray(loss.numpy(), dtype=np.float32).reshape(())}
    for v, g in zip(variables, grads):
        t["grad." + v.name] = np.ascontiguousarray(g.numpy())
    save_file(t, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="dumps")
    ap.add_argument("--dropout", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tf.keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    blocks = make_blocks(args.dropout)
    head = tf.keras.layers.Dense(10, name="head")
    x = tf.random.normal((8, 16))
    y = tf.random.uniform((8,), maxval=10, dtype=tf.int32)
    forward(blocks, head, x, False)  # build the variables once: both runs share them
    variables = [v for d, _ in blocks for v in d.trainable_variables] + head.trainable_variables
    for name, recompute in (("plain", False), ("ckpt", True)):
        tf.random.set_seed(1)
        with tf.GradientTape() as tape:
            logits = forward(blocks, head, x, recompute)
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        grads = tape.gradient(loss, variables)
        dump(os.path.join(args.out, name + ".safetensors"), variables, grads, loss)
    print("wrote", args.out + "/plain.safetensors and ckpt.safetensors")


if __name__ == "__main__":
    main()
