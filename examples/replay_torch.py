#!/usr/bin/env python3
"""Replay a ckpt-harness run in PyTorch and compare it with the harness's plain run.

    build/ckpt-harness run cases/cnn_bn.json --dtype fp32 --dump out/
    python3 examples/replay_torch.py out/cnn_bn [--harness PATH] [--out DIR]

Answers "is my framework's checkpointing the same as the reference?". From a `run --dump`
folder it takes the model (case.json, the case file saved beside the manifest), the initial
weights and buffers (plain/init/weights.safetensors) and each step's model input and loss
target (plain/step_NNNN/data.safetensors); it builds the model from torch.nn.functional ops,
trains it for the dumped steps twice -- plain, and with torch.utils.checkpoint around each
of the case's checkpoint segments -- and compares every step's loss, gradients, parameters
(after the optimizer step) and buffers of both PyTorch runs against the harness's plain run
with `ckpt-harness compare --tolerances examples/interop/replay_tolerances.json`.

Files written to --out (default DUMP_DIR/torch_replay): harness_plain.safetensors (the
harness's plain run, one file, names "s<step>.<kind>.<tensor>", kind loss, grad, param or
buffer), torch_plain.safetensors and torch_ckpt.safetensors (the same names).

Expected results: both PyTorch runs are close to the harness within the stated tolerance
(different summation orders, so not bitwise). In a case with BatchNorm inside a
checkpointed segment, PyTorch's checkpointed run updates the running statistics a second
time when it recomputes the segment (pytorch issue 96136), while the harness's default
policy (batchnorm_recompute skip) does not: those buffers are asserted as expected
mismatches (--expect-mismatch 's*.buffer.*'), and gradients and parameters must still agree.

Supported ops: linear, conv1d/2d/3d (any padding, stride, dilation), relu, leaky_relu,
gelu, tanh, sigmoid, batchnorm (rank 2 to 5), layernorm, max/avgpool1d/2d/3d,
upsample1d/2d/3d, add, concat, flatten, shared parameters ("share"); losses mean, sum, mse,
cross_entropy (with label_smoothing); optimizers
sgd, momentum, adam. dropout and gaussian_noise apply the masks and draws the dump holds
(random.safetensors), in the original forward and in the recomputation. fp32 dumps only. Exit codes: 0 both replays match, 1 a mismatch (or an
expected difference that is absent), 2 bad input or usage (one line on stderr).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_lite  # noqa: E402

SUPPORTED = {"linear", "conv1d", "conv2d", "conv3d", "relu", "leaky_relu", "gelu", "tanh",
             "sigmoid", "batchnorm", "layernorm", "maxpool1d", "maxpool2d", "maxpool3d",
             "avgpool1d", "avgpool2d", "avgpool3d", "upsample1d", "upsample2d", "upsample3d",
             "add", "concat", "flatten", "dropout", "gaussian_noise"}


class ReplayError(Exception):
    pass


def window(v, n):
    return list(v) if isinstance(v, list) else [v] * n


def same_padding(length, k, s, d):
    out = -(-length // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - length, 0)
    return total // 2, total - total // 2


class Model:
    """The case's layers as functional PyTorch ops over named parameters and buffers."""

    def __init__(self, case, weights):
        self.layers = case["layers"]
        self.params, self.buffers = {}, {}
        for name, arr in weights.items():
            if isinstance(arr, tuple):
                raise ReplayError(f"{name}: bf16 weights: replay fp32 dumps only")
            t = torch.from_numpy(np.array(arr))
            if name.endswith(("running_mean", "running_var", "num_batches_tracked")):
                self.buffers[name] = t.reshape(()) if name.endswith("tracked") else t
            else:
                self.params[name] = t.clone().requires_grad_(True)
        prev = "__input__"
        self.reads = {}
        self.random = {}  # this step's random.safetensors: "<layer>.mask" / "<layer>.noise"
        for i, l in enumerate(self.layers):
            if l["op"] not in SUPPORTED:
                raise ReplayError(f"layers[{i}] ({l['name']}): op {l['op']} is not among the "
                                  "ops this example replays (" + ", ".join(sorted(SUPPORTED)) +
                                  "); gen_torch_fixtures.py in tests/fixtures/torch covers more")
            self.reads[l["name"]] = list(l.get("inputs", [prev]))
            prev = l["name"]

    def layer(self, l, xs, ckpt):
        op, n = l["op"], l["name"]
        share = l.get("share") or {}
        share = {"weight": share} if isinstance(share, str) else share
        # a shared parameter ("share") is its owner's tensor: autograd adds both uses
        p = lambda k: self.params.get(share.get(k, f"{n}.{k}"))  # noqa: E731
        x = xs[0]
        if op == "linear":
            return F.linear(x, p("weight"), p("bias"))
        if op.startswith("conv"):
            nsp = int(op[4])
            k, s, d = (window(l["kernel"], nsp), window(l.get("stride", 1), nsp),
                       window(l.get("dilation", 1), nsp))
            pad = l.get("padding", "valid")
            lohi = []
            for j in range(nsp):
                if pad == "valid":
                    lohi.append((0, 0))
                elif pad == "same":
                    lohi.append(same_padding(x.shape[2 + j], k[j], s[j], d[j]))
                else:
                    pj = window(pad, nsp)[j]
                    lohi.append((pj, pj))
            flat = [v for lo_hi in reversed(lohi) for v in lo_hi]  # F.pad: last dim first
            if any(flat):
                x = F.pad(x, flat)
            conv = (F.conv1d, F.conv2d, F.conv3d)[nsp - 1]
            return conv(x, p("weight"), p("bias"), stride=s, dilation=d)
        if op == "relu":
            return F.relu(x)
        if op == "leaky_relu":
            return F.leaky_relu(x, l.get("slope", 0.01))
        if op == "gelu":
            return F.gelu(x)
        if op == "tanh":
            return torch.tanh(x)
        if op == "sigmoid":
            return torch.sigmoid(x)
        if op == "batchnorm":
            training = not l.get("eval", False)
            if training:  # what nn.BatchNorm does, including in a recomputation
                self.buffers[f"{n}.num_batches_tracked"] += 1
            return F.batch_norm(x, self.buffers[f"{n}.running_mean"],
                                self.buffers[f"{n}.running_var"], p("weight"), p("bias"),
                                training=training, momentum=l.get("momentum", 0.1),
                                eps=l.get("eps", 1e-5))
        if op == "layernorm":
            return F.layer_norm(x, x.shape[1:], p("weight"), p("bias"), eps=l.get("eps", 1e-5))
        if op[:7] in ("maxpool", "avgpool"):
            nsp = int(op[7])
            pool = window(l["pool"], nsp)
            stride = window(l.get("stride", l["pool"]), nsp)
            fn = getattr(F, ("max_pool" if op[0] == "m" else "avg_pool") + f"{nsp}d")
            return fn(x, pool, stride)
        if op.startswith("upsample"):
            nsp = int(op[8])
            return F.interpolate(x, scale_factor=[float(v) for v in window(l["scale"], nsp)],
                                 mode="nearest")
        if op == "add":
            out = xs[0]
            for y in xs[1:]:
                out = out + y
            return out
        if op == "concat":
            return torch.cat(xs, dim=1)
        if op == "flatten":
            return x.flatten(1)
        if op in ("dropout", "gaussian_noise"):
            # the draws of the original forward, from the dump: the same in a recomputation,
            # as the harness's counter policy makes them
            key = f"{n}.mask" if op == "dropout" else f"{n}.noise"
            if key not in self.random:
                raise ReplayError(f"{n}: {op}: {key} is not in the step's random.safetensors")
            r = torch.from_numpy(np.array(self.random[key]))
            return x * r if op == "dropout" else x + l["stddev"] * r
        raise ReplayError(f"{n}: op {op} is not replayed")

    def run_layers(self, idx, vals):
        for i in idx:
            l = self.layers[i]
            vals[l["name"]] = self.layer(l, [vals[r] for r in self.reads[l["name"]]], False)

    def forward(self, x, segments, reentrant):
        vals = {"__input__": x}
        names = [l["name"] for l in self.layers]
        seg_of = {}
        for s, (a, b) in enumerate(segments):
            for i in range(a, b + 1):
                seg_of[i] = s
        i = 0
        while i < len(self.layers):
            if i not in seg_of:
                self.run_layers([i], vals)
                i += 1
                continue
            a, b = segments[seg_of[i]]
            inside = set(names[a:b + 1])
            ext = []
            for j in range(a, b + 1):
                for r in self.reads[names[j]]:
                    if r not in inside and r not in ext:
                        ext.append(r)
            later = {r for j in range(b + 1, len(names)) for r in self.reads[names[j]]}
            outs = [nm for nm in names[a:b + 1] if nm in later or nm == names[-1]]

            def seg_fn(*xs, a=a, b=b, ext=ext, outs=outs):
                local = dict(zip(ext, xs))
                self.run_layers(range(a, b + 1), local)
                return tuple(local[o] for o in outs)

            res = checkpoint(seg_fn, *[vals[e] for e in ext], use_reentrant=reentrant)
            vals.update(zip(outs, res))
            i = b + 1
        return vals[names[-1]]


def resolve_segments(case):
    names = [l["name"] for l in case["layers"]]
    n = len(names)
    ck = case.get("checkpoint", {"policy": "sqrt"})
    if "segments" in ck:
        return [(names.index(a), names.index(b)) for a, b in ck["segments"]]
    if "every" in ck:
        k = ck["every"]
        return [(a, min(a + k, n) - 1) for a in range(0, n, k)]
    k = math.ceil(math.sqrt(n))
    return [(s * n // k, (s + 1) * n // k - 1) for s in range(k) if (s + 1) * n // k > s * n // k]


def loss_of(case, y, target):
    loss = case.get("loss", {"op": "mean"})
    op = loss["op"]
    if op == "mean":
        return y.mean()
    if op == "sum":
        return y.sum()
    if op == "mse":
        return ((y - target) ** 2).mean()
    if op == "cross_entropy":
        if "class_dim" in loss or "ignore_index" in loss:
            raise ReplayError("loss: cross_entropy with class_dim or ignore_index is not replayed")
        return F.cross_entropy(y, target.long(),
                               label_smoothing=loss.get("label_smoothing", 0.0))
    raise ReplayError(f"loss {op} is not replayed")


def optimizer_of(case, params):
    t = case.get("train", {})
    opt, lr, wd = t.get("optimizer", "sgd"), t.get("lr", 0.01), t.get("weight_decay", 0.0)
    if opt == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if opt == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=t.get("momentum", 0.9), weight_decay=wd)
    if opt == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(t.get("beta1", 0.9), t.get("beta2", 0.999)),
                                eps=t.get("eps", 1e-8), weight_decay=wd)
    raise ReplayError(f"optimizer {opt} is not replayed")


def train(case, weights, data, checkpointed, reentrant):
    torch.manual_seed(0)
    model = Model(case, weights)
    segments = resolve_segments(case) if checkpointed else []
    opt = optimizer_of(case, list(model.params.values()))
    out = {}
    for step, d in enumerate(data):
        x = torch.from_numpy(d["input"])
        if reentrant and checkpointed:
            x.requires_grad_(True)  # the reentrant variant needs an input that requires grad
        target = torch.from_numpy(d["target"]) if "target" in d else None
        model.random = d.get("__random__", {})
        opt.zero_grad(set_to_none=True)
        loss = loss_of(case, model.forward(x, segments, reentrant), target)
        loss.backward()
        out[f"s{step}.loss"] = np.asarray(loss.item(), np.float64).reshape(())
        for n, prm in model.params.items():
            out[f"s{step}.grad.{n}"] = prm.grad.detach().numpy().copy()
        for n, b in model.buffers.items():
            out[f"s{step}.buffer.{n}"] = b.detach().numpy().copy()
        opt.step()
        for n, prm in model.params.items():
            out[f"s{step}.param.{n}"] = prm.detach().numpy().copy()
    return out


def load_dump(d):
    try:
        with open(os.path.join(d, "manifest.json")) as f:
            man = json.load(f)
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
    except (OSError, ValueError) as e:
        raise ReplayError(f"{d}: not a run --dump folder with case.json: {e}")
    files = {(e["run"], e["step"], e["kind"]): os.path.join(d, e["file"]) for e in man["files"]}
    weights = safetensors_lite.load(files[("plain", None, "param")])
    steps = sorted({s for (r, s, k) in files if r == "plain" and s is not None})
    data, ref = [], {}
    for s in steps:
        if ("plain", s, "data") not in files:
            raise ReplayError(f"{d}: step {s} has no data file (dump written by an older "
                              "ckpt-harness: run --dump again)")
        dd = safetensors_lite.load(files[("plain", s, "data")])
        if isinstance(dd["input"], tuple) or dd["input"].dtype != np.float32:
            raise ReplayError(f"{d}: the input is not fp32: replay fp32 dumps only")
        if ("plain", s, "random") in files:  # dropout masks and noise draws
            dd["__random__"] = safetensors_lite.load(files[("plain", s, "random")])
        data.append(dd)
        for kind, tag in (("loss", "loss"), ("grad", "grad"), ("param", "param"),
                          ("buffer", "buffer")):
            if ("plain", s, kind) not in files:
                continue
            for n, v in safetensors_lite.load(files[("plain", s, kind)]).items():
                ref[f"s{s}.loss" if kind == "loss" else f"s{s}.{tag}.{n}"] = v
    return case, weights, data, ref


def find_harness(arg):
    if arg:  # named explicitly: that one or none
        return arg if os.path.isfile(arg) and os.access(arg, os.X_OK) else None
    for c in (os.environ.get("CKPT_HARNESS"),
              os.path.join(HERE, "..", "build", "ckpt-harness"), shutil.which("ckpt-harness")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def compare(harness, a, ref, tol, *extra):
    cmd = [harness, "compare", a, ref, "--tolerances", tol, "--rows", "5", *extra]
    print("$", " ".join(cmd), flush=True)
    sys.stdout.flush()
    return subprocess.run(cmd, stdout=sys.stdout, stderr=sys.stderr).returncode


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump_dir", help="a run --dump case folder (holds manifest.json, case.json)")
    ap.add_argument("--out", help="where to write the replay's files (default DUMP_DIR/torch_replay)")
    ap.add_argument("--harness", help="the ckpt-harness program")
    ap.add_argument("--tolerances", default=os.path.join(HERE, "interop", "replay_tolerances.json"))
    ap.add_argument("--reentrant", action="store_true", help="use_reentrant=True")
    args = ap.parse_args(argv)
    harness = find_harness(args.harness)
    if not harness:
        print("replay_torch: ckpt-harness not found (--harness PATH)", file=sys.stderr)
        return 2
    try:
        case, weights, data, ref = load_dump(args.dump_dir)
        torch.use_deterministic_algorithms(True)
        plain = train(case, weights, data, False, args.reentrant)
        ckpt = train(case, weights, data, True, args.reentrant)
    except (ReplayError, KeyError) as e:
        print(f"replay_torch: {e}", file=sys.stderr)
        return 2
    out = args.out or os.path.join(args.dump_dir, "torch_replay")
    os.makedirs(out, exist_ok=True)
    paths = {}
    for name, t in (("harness_plain", ref), ("torch_plain", plain), ("torch_ckpt", ckpt)):
        paths[name] = os.path.join(out, name + ".safetensors")
        safetensors_lite.save(paths[name], t)
    segs = resolve_segments(case)
    names = [l["name"] for l in case["layers"]]
    bn_in_segment = any(l["op"] == "batchnorm" and not l.get("eval", False) and
                        any(a <= i <= b for a, b in segs) for i, l in enumerate(case["layers"]))
    print(f"replay {case['name']}: torch {torch.__version__}, {len(data)} steps, segments " +
          ", ".join(f"[{names[a]} .. {names[b]}]" for a, b in segs) +
          (", reentrant" if args.reentrant else ", non-reentrant"))
    print("-- PyTorch plain vs the harness's plain run --")
    rc = compare(harness, paths["torch_plain"], paths["harness_plain"], args.tolerances)
    print("-- PyTorch checkpointed vs the harness's plain run --")
    extra = ["--expect-mismatch", "s*.buffer.*"] if bn_in_segment else []
    rc2 = compare(harness, paths["torch_ckpt"], paths["harness_plain"], args.tolerances, *extra)
    if bn_in_segment:
        print("expected: PyTorch's recomputation updated the BatchNorm running statistics a "
              "second time (pytorch issue 96136; the harness's batchnorm_recompute skip does "
              "not); gradients and parameters agree")
    return max(rc, rc2)


if __name__ == "__main__":
    sys.exit(main())
