"""PyTorch -> ONNX -> `ckpt-harness import`, refused unless the import is the same model.

    python3 -m ckpt_harness.torch export SCRIPT.py -o model.onnx [--case cases/model.json]

The user's module is exported the way that keeps its training semantics: the TorchScript
exporter (on torch 2.x it must be asked for, dynamo=False), training=TrainingMode.TRAINING
(BatchNorm normalises with batch statistics, Dropout stays) and do_constant_folding=False
(no BatchNorm folded into a convolution). A model over 2 GB gets its weights as external
data files beside the model (the exporter decides; the importer reads them). Then PyTorch's
own train-mode reference is written (docs/onnx.md, "The reference file": input, output with
every dropout at p = 0, loss, every parameter's gradient, eval output, BatchNorm and Dropout
counts) and `ckpt-harness import --check-against` runs on it: an import that differs from
PyTorch is refused, one line saying what was compared, exit 2, and nothing is left behind.

Everything is written into a temporary folder beside the output first and moved into place
only when the import matched.
"""
import contextlib
import gc
import copy
import os
import sys
import shutil
import subprocess
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ckpt_harness.judge import UsageError, find_harness

LOSSES = ("mean", "sum", "mse", "cross_entropy")
EXPORTERS = ("torchscript", "dynamo")
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def _one_input(inputs):
    x = inputs(0) if callable(inputs) else inputs
    if torch.is_tensor(x):
        x = (x,)
    if not isinstance(x, (tuple, list)) or not all(torch.is_tensor(v) for v in x):
        raise UsageError("build(): inputs must be a tensor, a tuple of tensors or a callable "
                         f"step -> inputs, got {type(x).__name__}")
    if len(x) != 1:
        raise UsageError(f"build(): the model takes {len(x)} inputs; an imported case has one "
                         "(export a wrapper module of one input)")
    x = x[0].detach().cpu()
    if x.is_floating_point():
        return x.float()
    if x.dtype not in (torch.int64, torch.int32):
        raise UsageError(f"build(): the input is {x.dtype}; only float inputs and int64 token "
                         "ids can be imported")
    return x.long()


def _check_model(model):
    if not isinstance(model, nn.Module):
        raise UsageError(f"build(): the model must be a torch.nn.Module, got "
                         f"{type(model).__name__}")
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise UsageError(f"build(): parameter {name} is {p.dtype}; export a float32 model "
                             "(the harness keeps fp32 masters and casts per --precision)")


def dropout_off(model):
    """Every dropout module (and nn.MultiheadAttention's dropout) at p = 0; returns the
    modules that had p > 0."""
    zeroed = []
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            m.p = 0.0
            zeroed.append(m)
        if isinstance(m, nn.MultiheadAttention) and m.dropout > 0:
            m.dropout = 0.0
            zeroed.append(m)
    return zeroed


def batchnorm_modules(model):
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


@contextlib.contextmanager
def modules_that_run(modules):
    """The ids of those of modules whose forward runs inside the block: a BatchNorm or
    Dropout the model holds but its forward never calls exports no node, and counting it
    would make `--check-against` take the graph for a folded one."""
    ran = set()
    hooks = [m.register_forward_hook(lambda mod, inp, out: ran.add(id(mod))) for m in modules]
    try:
        yield ran
    finally:
        for h in hooks:
            h.remove()


@contextlib.contextmanager
def _exporter_output_captured(into):
    """The exporters' notes (Python warnings, progress lines, logging, C++ messages on the
    process's stdout and stderr) go into the file `into` instead of the user's terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(into, "w") as f, warnings.catch_warnings(), \
                contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            warnings.simplefilter("ignore")
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def export_onnx(model, x, path, exporter="torchscript", opset=None):
    """Writes model (trained on x) to path. torchscript: training=TRAINING,
    do_constant_folding=False (dynamo=False on torch 2.x); dynamo: torch 2.x's default
    exporter, which folds BatchNorm into the convolutions whatever training says (the check
    then refuses the import)."""
    kw = dict(input_names=["x"], output_names=["y"])
    if opset is not None or exporter == "torchscript":
        kw["opset_version"] = 17 if opset is None else opset
    if exporter == "torchscript":
        kw.update(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        if TORCH2:
            kw["dynamo"] = False
    elif not TORCH2:
        raise UsageError(f"--exporter dynamo: torch {torch.__version__} has no dynamo exporter "
                         "(torch >= 2)")
    else:
        kw.update(dynamo=True, training=torch.onnx.TrainingMode.TRAINING, verbose=False)
    model.train()
    try:
        with _exporter_output_captured(path + ".log"):
            torch.onnx.export(model, (x,), path, **kw)
        os.remove(path + ".log")
    except Exception as e:  # the exporter could not take the model: one line
        msg = str(e).strip().splitlines()
        raise UsageError(f"torch.onnx.export ({exporter}, torch {torch.__version__}) failed: "
                         f"{type(e).__name__}: {msg[0] if msg else ''}")


def _loss(y, kind, target, class_dim, ignore_index):
    if kind == "mean":
        return y.mean()
    if kind == "sum":
        return y.sum()
    if kind == "mse":
        return F.mse_loss(y, target)
    kw = {} if ignore_index is None else {"ignore_index": ignore_index}
    if class_dim == -1 or class_dim == y.dim() - 1:
        return F.cross_entropy(y.reshape(-1, y.shape[-1]), target.reshape(-1), **kw)
    return F.cross_entropy(y.movedim(class_dim, 1), target, **kw)


def default_class_dim(x, y):
    """The class dim `ckpt-harness import --loss cross_entropy` writes without --class-dim
    (docs/onnx.md): -1 for token inputs and (N, L, V) outputs over an (N, L, ...) input."""
    if not x.is_floating_point():
        return -1
    if y.dim() == 3 and x.dim() >= 2 and tuple(y.shape[:2]) == tuple(x.shape[:2]):
        return -1
    return 1


def _target(y, kind, class_dim, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "mse":
        return torch.randn(y.shape, generator=g)
    if kind != "cross_entropy":
        return None
    cd = class_dim % y.dim()
    shape = tuple(s for i, s in enumerate(y.shape) if i != cd)
    return torch.randint(0, y.shape[cd], shape, generator=g)


def tied_names(model):
    """A tied parameter's other names: {"tied.<name>": the UTF-8 bytes of its first name}
    (the one `grad.` uses), so an exporter that keeps another name (torch's dynamo exporter
    keeps nanoGPT's lm_head.weight for wte.weight) still matches. Module by module, as
    torch 1.13's named_parameters cannot list duplicates."""
    first, out = {}, {}
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            name = mname + "." + pname if mname else pname
            if id(p) in first and first[id(p)] != name:
                out["tied." + name] = np.frombuffer(first[id(p)].encode(), dtype=np.uint8)
            first.setdefault(id(p), name)
    return out


def reference(model, x, loss="mean", class_dim=None, ignore_index=None, seed=0):
    """PyTorch's train-mode reference of model on x, as `import --check-against` reads it.
    UsageError when the train-mode output is random even with every dropout module at 0
    (functional dropout the driver cannot switch off)."""
    m = copy.deepcopy(model).train()
    dropped = dropout_off(m)
    bns = batchnorm_modules(m)
    outs = []
    for s in (seed, seed + 1):  # the same output under two RNG states, or randomness remains
        torch.manual_seed(s)
        with torch.no_grad():
            outs.append(copy.deepcopy(m)(x))
    if not torch.equal(outs[0], outs[1]):
        raise UsageError("the model's train-mode output changes between two forward passes "
                         "with every dropout module at p = 0: randomness the driver cannot "
                         "switch off (F.dropout, scaled_dot_product_attention's dropout_p, "
                         "...), so there is nothing exact to compare the import with; make it a "
                         "module (nn.Dropout) or give it p = 0 when exporting")
    torch.manual_seed(seed)
    with modules_that_run(dropped + bns) as ran:  # the counts: modules the forward calls
        y = m(x)
    n_drop = sum(id(d) in ran for d in dropped)
    n_bn = sum(id(b) in ran for b in bns)
    if not torch.is_tensor(y) or not y.is_floating_point():
        raise UsageError("the model must return one float tensor (the loss reads it)")
    cd = None
    if loss == "cross_entropy":
        cd = default_class_dim(x, y) if class_dim is None else class_dim
        if not -y.dim() <= cd < y.dim():
            raise UsageError(f"--class-dim {cd}: the output has {y.dim()} dims")
    target = _target(y.detach(), loss, cd, seed)
    value = _loss(y, loss, target, cd, ignore_index)
    value.backward()
    ref = {"input": x.numpy(), "output": y.detach().numpy(),
           "loss": np.array(value.item(), dtype=np.float32),
           "count.dropout": np.array(n_drop, dtype=np.int64),
           "count.batchnorm": np.array(n_bn, dtype=np.int64)}
    if target is not None:
        ref["target"] = target.numpy()
    for name, p in m.named_parameters():  # a tied weight once, under its first name
        if p.grad is not None:
            ref["grad." + name] = p.grad.detach().numpy()
    ref.update(tied_names(m))
    e = copy.deepcopy(model).eval()
    with torch.no_grad():
        ref["output_eval"] = e(x).numpy()
    n_params = sum(p.numel() for p in m.parameters())
    if n_params > CONDITIONING_MAX_PARAMS:  # a float64 copy would triple the memory
        return ref
    worst, name = fp32_conditioning(m, x, loss, target, cd, ignore_index, seed)
    ref["cond.fp32_vs_fp64"] = np.array(worst)
    if worst > CHECK_BOUND:
        raise UsageError(
            f"PyTorch's own float32 gradients of this model differ from its float64 ones by "
            f"relative L2 {worst:.2g} ({name}), more than the check's bound {CHECK_BOUND:g}: "
            "the reference cannot judge the import; export on another input shape or loss "
            "(BatchNorm over many values with --loss mean cancels almost all of a gradient)")
    return ref


CHECK_BOUND = 1e-4  # `import --check-against`'s relative L2 bound (docs/onnx.md)
# above this many parameters the float64 conditioning check is skipped (the output says so)
CONDITIONING_MAX_PARAMS = 50_000_000


def fp32_conditioning(m, x, loss, target, class_dim, ignore_index, seed):
    """How far PyTorch's float32 gradients of m (already backpropagated) lie from its float64
    ones: the worst relative L2 and its name. Gradients below 1e-6 of the step's gradient
    norm (mathematically zero ones) are left out, as the check judges those otherwise."""
    d = copy.deepcopy(m).double()
    d.zero_grad()
    torch.manual_seed(seed)
    yd = d(x.double() if x.is_floating_point() else x)
    t = target.double() if target is not None and target.is_floating_point() else target
    _loss(yd, loss, t, class_dim, ignore_index).backward()
    pairs = [(n, p.grad.double(), q.grad) for (n, p), (_, q) in
             zip(m.named_parameters(), d.named_parameters())
             if p.grad is not None and q.grad is not None]
    total = sum(float(q.norm()) ** 2 for _, _, q in pairs) ** 0.5
    worst, name = 0.0, ""
    for n, p, q in pairs:
        if float(q.norm()) <= 1e-6 * total:
            continue
        r = float((p - q).norm() / q.norm())
        if r > worst:
            worst, name = r, "grad." + n
    return worst, name


def _import_args(prog, onnx_path, case_path, ref_path, o):
    args = [prog, "import", onnx_path, "-o", case_path, "--check-against", ref_path,
            "--loss", o["loss"]]
    for opt in ("class_dim", "ignore_index", "optimizer", "lr", "steps", "checkpoint",
                "precision"):
        if o.get(opt) is not None:
            args += ["--" + opt.replace("_", "-"), str(o[opt])]
    return args


def _run_import(args):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def _refusal(onnx_path, stderr, code):
    line = next((s for s in stderr.splitlines() if s.strip()), f"exit code {code}")
    if line.startswith("ckpt-harness: "):
        line = line[len("ckpt-harness: "):]
    return UsageError(f"{onnx_path}: not written, ckpt-harness import refused the export: "
                      f"{line}")


def export_and_check(model, inputs, output, ref_path=None, case_path=None, loss="mean",
                     class_dim=None, ignore_index=None, exporter="torchscript", opset=None,
                     seed=0, harness=None, import_options=None, log=print):
    """Exports model to output, writes the reference (ref_path, default OUTPUT.ref.npz),
    checks the import against it and, with case_path, writes the imported case. Returns the
    check's line (what was compared). UsageError (nothing written) on a refusal."""
    if loss not in LOSSES:
        raise UsageError(f"--loss {loss!r}: expected one of {', '.join(LOSSES)}")
    if exporter not in EXPORTERS:
        raise UsageError(f"--exporter {exporter!r}: expected torchscript or dynamo")
    if not output.endswith(".onnx"):
        raise UsageError(f"-o {output}: the model file must end in .onnx")
    if (class_dim is not None or ignore_index is not None) and loss != "cross_entropy":
        raise UsageError("--class-dim and --ignore-index apply to --loss cross_entropy only")
    _check_model(model)
    x = _one_input(inputs)
    ref_path = ref_path or output[:-len(".onnx")] + ".ref.npz"
    out_dir = os.path.dirname(os.path.abspath(output))
    for p in [output, ref_path] + ([case_path] if case_path else []):
        d = os.path.dirname(os.path.abspath(p))
        if not os.path.isdir(d):
            raise UsageError(f"{p}: folder {d} does not exist")
    prog = find_harness(harness)
    model = copy.deepcopy(model).cpu()
    o = dict(import_options or {}, loss=loss, class_dim=class_dim, ignore_index=ignore_index)
    tmp = tempfile.mkdtemp(prefix=".ckpt-export-", dir=out_dir)
    try:
        t_onnx = os.path.join(tmp, os.path.basename(output))
        t_ref = os.path.join(tmp, os.path.basename(ref_path))
        if t_ref == t_onnx:
            raise UsageError(f"--ref {ref_path}: the reference and the model are one file")
        shown = lambda s: s.replace(t_ref, ref_path).replace(t_onnx, output)
        torch.manual_seed(seed)
        export_onnx(model, x, t_onnx, exporter=exporter, opset=opset)
        ref = reference(model, x, loss, class_dim, ignore_index, seed)  # as exported
        conditioned = "cond.fp32_vs_fp64" in ref
        with open(t_ref, "wb") as f:  # np.savez would add .npz to another suffix
            np.savez(f, **ref)
        del ref, model  # the import below needs the memory more
        gc.collect()
        t_case = os.path.join(tmp, "check", "case.json")
        os.mkdir(os.path.dirname(t_case))
        code, out, err = _run_import(_import_args(prog, t_onnx, t_case, t_ref, o))
        if code != 0:
            raise _refusal(output, shown(err), code)
        line = shown(out)
        shutil.rmtree(os.path.dirname(t_case))
        shutil.move(t_ref, ref_path)
        for f in sorted(os.listdir(tmp)):  # the model and any external data files
            shutil.move(os.path.join(tmp, f), os.path.join(out_dir, f))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if case_path:  # the same files matched above; this writes the case that names them
        code, out, err = _run_import(_import_args(prog, output, case_path, ref_path, o))
        if code != 0:
            line = next((s for s in err.splitlines() if s.strip()), f"exit code {code}")
            raise UsageError(f"{case_path}: not written ({output} and {ref_path} were): {line}")
        line = out
    check = next((s for s in line.splitlines() if s.startswith("check-against")), line)
    log(check + ("" if conditioned else
                 f" (PyTorch's float32 vs float64 conditioning not checked: over "
                 f"{CONDITIONING_MAX_PARAMS} parameters)"))
    log(f"wrote {output} ({exporter} exporter, torch {torch.__version__}), "
        f"{ref_path}" + (f", {case_path}" if case_path else ""))
    return check


def export_script(script, output, **kw):
    """export_and_check() on SCRIPT.py's build()."""
    from ckpt_harness.cli import load_script
    mod = load_script(script)
    built = mod.build()
    if not isinstance(built, tuple) or len(built) != 3:
        raise UsageError(f"{script}: build() must return (model, inputs, loss_fn)")
    model, inputs, _ = built
    return export_and_check(model, inputs, output, **kw)
