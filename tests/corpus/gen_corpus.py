#!/usr/bin/env python3
"""Writes the healthy-model corpus of the precision judgement (cases/README.md,
"Judging low precision against fp32").

Usage: python3 tests/corpus/gen_corpus.py OUT_DIR [--strip-shipped CASES_DIR] [--seed-offset N]

Writes a family of small, healthy models as case files into OUT_DIR: MLPs and 2-D CNNs of
several depths and widths, with and without BatchNorm / LayerNorm, residual adds, concat
skips and dropout, different activations, losses and optimizers, each run in fp16 (dynamic
loss scaling, as mixed-precision training does) and bf16. With --strip-shipped, also copies
every case of CASES_DIR with its hand-set low-precision tolerances (tolerance.fp16,
tolerance.bf16, tolerance.tensors) removed, so the default judgement alone judges it.
Every generated case expects the low-precision run to be judged close to fp32; the shipped
cases keep their own expectations (canaries stay canaries). --seed-offset N draws the same
family with other seeds (other weights, data and dropout masks): a fresh sample to measure
the false-alarm rate on (make check uses offset 0).

No dependencies beyond the standard library; the output is a pure function of the
arguments (same files, byte for byte, on every run).
"""
import json
import os
import sys

ACTS = ["relu", "gelu", "tanh", "leaky_relu"]
OPTS = [{"optimizer": "sgd", "lr": 0.05},
        {"optimizer": "momentum", "lr": 0.01, "momentum": 0.9},
        {"optimizer": "adam", "lr": 0.001}]


def act_layer(name, kind):
    layer = {"name": name, "op": kind}
    if kind == "leaky_relu":
        layer["slope"] = 0.1
    return layer


def mlp(idx, depth, width, norm, residual, dropout, act):
    layers = [{"name": "in", "op": "linear", "units": width}]
    prev = "in"
    for d in range(depth):
        layers.append({"name": f"fc{d}", "op": "linear", "units": width})
        cur = f"fc{d}"
        if norm == "layernorm":
            layers.append({"name": f"ln{d}", "op": "layernorm"})
            cur = f"ln{d}"
        elif norm == "batchnorm":
            layers.append({"name": f"bn{d}", "op": "batchnorm"})
            cur = f"bn{d}"
        layers.append(act_layer(f"act{d}", act))
        cur = f"act{d}"
        if dropout and d % 2 == 1:
            layers.append({"name": f"drop{d}", "op": "dropout", "rate": 0.2})
            cur = f"drop{d}"
        if residual:
            layers.append({"name": f"res{d}", "op": "add", "inputs": [cur, prev]})
            cur = f"res{d}"
        prev = cur
    layers.append({"name": "head", "op": "linear", "units": 10})
    return {"input": {"shape": [16, 24], "dist": "normal"}, "layers": layers}


def cnn(idx, depth, width, norm, residual, concat, dropout, act):
    layers = [{"name": "stem", "op": "conv2d", "filters": width, "kernel": 3, "padding": "same"}]
    prev = "stem"
    for d in range(depth):
        layers.append({"name": f"conv{d}", "op": "conv2d", "filters": width, "kernel": 3,
                       "padding": "same", "bias": norm != "batchnorm" or d % 2 == 0})
        cur = f"conv{d}"
        if norm == "batchnorm":
            layers.append({"name": f"bn{d}", "op": "batchnorm"})
            cur = f"bn{d}"
        elif norm == "layernorm":
            layers.append({"name": f"ln{d}", "op": "layernorm"})
            cur = f"ln{d}"
        layers.append(act_layer(f"act{d}", act))
        cur = f"act{d}"
        if dropout and d == depth - 1:
            layers.append({"name": f"drop{d}", "op": "dropout", "rate": 0.1})
            cur = f"drop{d}"
        if residual:
            layers.append({"name": f"res{d}", "op": "add", "inputs": [cur, prev]})
            cur = f"res{d}"
        if concat and d == 0:
            layers.append({"name": "cat", "op": "concat", "inputs": [cur, "stem"]})
            layers.append({"name": "mix", "op": "conv2d", "filters": width, "kernel": 1})
            cur = "mix"
        prev = cur
    layers.append({"name": "pool", "op": "avgpool2d", "pool": 2})
    layers.append({"name": "flat", "op": "flatten"})
    layers.append({"name": "head", "op": "linear", "units": 10})
    return {"input": {"shape": [4, 3, 8, 8], "dist": "normal"}, "layers": layers}


def variants():
    """(name, model) pairs: a spread over the axes rather than their full product."""
    out = []
    i = 0
    for depth in (2, 4):
        for width in (8, 32):
            for norm in ("none", "batchnorm", "layernorm"):
                for residual in (False, True):
                    act = ACTS[i % len(ACTS)]
                    dropout = i % 3 == 1
                    name = f"mlp_d{depth}_w{width}_{norm}{'_res' if residual else ''}_{act}"
                    out.append((i, name, mlp(i, depth, width, norm, residual, dropout, act)))
                    i += 1
    for depth in (2, 3):
        for width in (4, 8):
            for norm in ("none", "batchnorm", "layernorm"):
                concat = (depth + width) % 2 == 0
                residual = norm != "layernorm" or depth == 3
                act = ACTS[i % len(ACTS)]
                dropout = i % 2 == 0
                name = (f"cnn_d{depth}_w{width}_{norm}{'_res' if residual else ''}"
                        f"{'_cat' if concat else ''}_{act}")
                out.append((i, name, cnn(i, depth, width, norm, residual, concat, dropout, act)))
                i += 1
    return out


def write_case(path, case):
    with open(path, "w") as f:
        json.dump(case, f, indent=1, sort_keys=False)
        f.write("\n")


def main(argv):
    out, strip, offset = None, None, 0
    args = argv[1:]
    try:
        while args:
            a = args.pop(0)
            if a == "--strip-shipped":
                strip = args.pop(0)
            elif a == "--seed-offset":
                offset = int(args.pop(0))
            elif out is None and not a.startswith("-"):
                out = a
            else:
                raise ValueError(a)
    except (IndexError, ValueError):
        out = None
    if out is None:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    os.makedirs(out, exist_ok=True)
    for i, name, model in variants():
        loss = ["cross_entropy", "mse", "mean"][i % 3]
        case = {"name": name,
                "description": "generated healthy model (tests/corpus/gen_corpus.py)",
                "seed": 1000 + i + 100 * offset,
                "precision": ["fp16", "bf16"]}
        case.update(model)
        if loss == "mse":
            # mse needs the output's shape as target: a conv head would do, keep linear
            pass
        case["loss"] = {"op": loss}
        case["checkpoint"] = {"every": 2}
        train = {"steps": 2}
        train.update(OPTS[i % len(OPTS)])
        train["loss_scale"] = "dynamic"
        case["train"] = train
        case["expect"] = "identical"
        case["expect_precision"] = "close"
        write_case(os.path.join(out, f"corpus_{i:02d}_{name}.json"), case)
    if strip:
        src = strip
        for fn in sorted(os.listdir(src)):
            if not fn.endswith(".json"):
                continue
            with open(os.path.join(src, fn)) as f:
                case = json.load(f)
            tol = case.get("tolerance")
            if isinstance(tol, dict):
                for key in ("fp16", "bf16", "tensors"):
                    tol.pop(key, None)
            write_case(os.path.join(out, "shipped_" + fn), case)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
