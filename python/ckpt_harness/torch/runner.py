"""One training run of the PyTorch driver: a fresh copy of the model, reseeded RNGs, the
configuration (plain, checkpointed in a mode, or a calibration run), `steps` optimizer
steps, every step written into the judge input."""
import copy
import random

import numpy as np
import torch

from ckpt_harness.judge import UsageError
from ckpt_harness.torch import modes as modes_mod
from ckpt_harness.torch.record import (TORCH_DTYPES, CalibrationRounding, Recorder,
                                       SavedBytesMeter, to_numpy, weight_like)

UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}

try:  # torch >= 2.0
    from torch.func import functional_call as _functional_call
except ImportError:  # torch 1.13
    from torch.nn.utils.stateless import functional_call as _functional_call


def reseed(seed):
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)  # CPU and every CUDA device


def make_optimizer(kind, params, lr):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise UsageError(f"--optimizer {kind!r}: expected sgd, adam or adamw")


def _to_device(x, device):
    if torch.is_tensor(x):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def step_inputs(inputs, step, device, shard=None):
    x = inputs(step) if callable(inputs) else inputs
    if torch.is_tensor(x):
        x = (x,)
    if not isinstance(x, (tuple, list)):
        raise UsageError("build(): inputs must be a tensor, a tuple of tensors or a callable "
                         f"step -> inputs, got {type(x).__name__}")
    x = tuple(_to_device(v, device) for v in x)
    return x


def _round_input(x, low):
    dt = TORCH_DTYPES[low]
    return tuple(v.to(dt).float() if torch.is_tensor(v) and v.is_floating_point() else v
                 for v in x)


def _calibration_params(model, low):
    """Every parameter under every name a module holds it by; weight-like modules' parameters
    rounded to the low dtype, with the master's gradient. A tied parameter (a GPT head sharing
    the embedding's weight) is rounded once and the same tensor goes under each of its names,
    so functional_call (which refuses two values for tied names on torch 2.x) replaces every
    use of it alike."""
    dt = TORCH_DTYPES[low]
    owned = [(f"{mname}.{pname}" if mname else pname, p, weight_like(m))
             for mname, m in model.named_modules()
             for pname, p in m.named_parameters(recurse=False)]
    rounded = {}
    for _, p, wl in owned:
        if wl and id(p) not in rounded:
            rounded[id(p)] = p + (p.detach().to(dt).float() - p.detach())
    return {name: rounded.get(id(p), p) for name, p, _ in owned}


class RunSpec:
    def __init__(self, run_id, role, dtype="fp32", mode=None, calibration=None, record=True,
                 reference=None, skip_like=None):
        self.id, self.role, self.dtype, self.mode = run_id, role, dtype, mode
        self.calibration, self.record, self.reference = calibration, record, reference
        # per step, True where the low-precision plain run's GradScaler skipped the update:
        # this fp32 run (its reference or a calibration run) skips it too, as the harness's
        # own fp32 references do, so later steps compare the same model
        self.skip_like = skip_like

    def compile_budget(self):
        """The activation memory budget of a compiled run, or None for an eager one."""
        if self.mode == modes_mod.COMPILE_REFERENCE:
            return 1.0
        if self.mode and self.mode.startswith("compile:"):
            return modes_mod.compile_budget(self.mode)
        return None


def _check_loss(loss, step):
    if not torch.is_tensor(loss):
        raise UsageError(f"loss_fn(output, {step}) returned {type(loss).__name__}, not a tensor")
    if loss.numel() != 1 or loss.dim() > 1:
        raise UsageError(f"loss_fn(output, {step}) returned a tensor of shape "
                         f"{list(loss.shape)}, not a scalar")
    if not loss.requires_grad:
        raise UsageError(f"loss_fn(output, {step}) returned a tensor that does not require "
                         "grad: it does not depend on the model's parameters")
    return loss.reshape(())


def _forward(model, x, step, spec, ctx):
    if spec.role == "calibration":
        x = _round_input(x, spec.dtype)
        params = _calibration_params(model, spec.dtype)
        params.update(dict(model.named_buffers()))
        return _functional_call(model, params, x)
    if spec.dtype != "fp32":
        with torch.autocast(device_type=ctx.device, dtype=TORCH_DTYPES[spec.dtype]):
            return model(*x)
    return model(*x)


def train_run(ctx, spec, writer_run, shard=None, prepared=None, module_model=None):
    """Trains one run and writes it; returns (module order, types, recomputed modules,
    wrapped modules, modules that draw random numbers)."""
    if prepared is not None:
        return _train(ctx, spec, writer_run, prepared, module_model, [], shard)
    model = copy.deepcopy(ctx.template).to(ctx.device)
    wrapped = []
    budget = spec.compile_budget()
    if budget is not None:
        return _train_compiled(ctx, spec, writer_run, model, budget, shard)
    if spec.role == "checkpointed":
        if spec.mode == modes_mod.USER_MODE:
            ctx.enable_checkpointing(model)
        else:
            wrapped = [n for n, _ in modes_mod.select_modules(model, ctx.wrap, ctx.wrap_type)]
            counts = modes_mod.wrap_modules(model, wrapped, spec.mode)
    if shard is not None:
        model = ctx.wrap_distributed(model)
    module_model = model.module if hasattr(model, "module") and shard is not None else model
    got = _train(ctx, spec, writer_run, model, module_model, wrapped, shard)
    if wrapped:  # the judge fails a part that never recomputed
        writer_run.set_parts([(n, counts[n][0], counts[n][1] - counts[n][0]) for n in wrapped])
    return got


def _train(ctx, spec, writer_run, model, module_model, wrapped, shard):
    reseed(ctx.seed)
    opt = make_optimizer(ctx.optimizer, model.parameters(), ctx.lr)
    scaler = None
    if spec.dtype == "fp16" and ctx.device == "cuda" and spec.role != "calibration":
        scaler = torch.cuda.amp.GradScaler()
    rec = (Recorder(module_model, keep_tensors=spec.record, device=ctx.device)
           if spec.role != "calibration" and not getattr(spec, "no_hooks", False) else None)
    cal = (CalibrationRounding(module_model, spec.dtype, spec.calibration, ctx.seed,
                               UNIT_ROUNDOFF[spec.dtype]) if spec.role == "calibration" else None)
    meter = SavedBytesMeter(module_model)
    names = [n for n, _ in module_model.named_parameters()]
    try:
        for step in range(ctx.steps):
            model.train()
            opt.zero_grad(set_to_none=True)
            if rec:
                rec.begin_step()
            if cal:
                cal.step = step
            meter.begin_step()
            if ctx.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            x = step_inputs(ctx.inputs, step, ctx.device, shard)
            with meter.hooks():
                out = _forward(model, x, step, spec, ctx)
                if spec.dtype != "fp32" and spec.role != "calibration":
                    with torch.autocast(device_type=ctx.device, dtype=TORCH_DTYPES[spec.dtype]):
                        loss = _check_loss(ctx.loss_fn(out, step), step)
                else:
                    loss = _check_loss(ctx.loss_fn(out, step), step)
            saved_peak = meter.peak
            if rec:
                rec.phase = "backward"
            scale = 1.0
            if scaler:
                scale = float(scaler.get_scale())
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            else:
                loss.backward()
            if rec:
                rec.phase = "forward"
            pd = dict(module_model.named_parameters())
            grads, none = {}, []
            for n in reversed(names):
                g = pd[n].grad
                if g is None:
                    none.append(n)
                    grads[n] = np.zeros(tuple(pd[n].shape), np.float32)
                else:
                    grads[n] = to_numpy(g)
            skipped = False
            if scaler:
                before = scaler.get_scale()
                scaler.step(opt)
                scaler.update()
                skipped = scaler.get_scale() < before
            elif spec.skip_like and spec.skip_like[step]:
                skipped = True
            else:
                opt.step()
            params = {n: to_numpy(p) for n, p in module_model.named_parameters()}
            buffers = {n: to_numpy(b) for n, b in module_model.named_buffers()}
            dev_peak = torch.cuda.max_memory_allocated() if ctx.device == "cuda" else None
            writer_run.write_step(
                step, float(loss.detach().float()), grads, params, buffers,
                outputs=rec.outputs if rec and spec.record else None,
                output_grads=rec.grads_seen() if rec and spec.record else None,
                recomputed=(rec.recomputed if rec and spec.record and spec.role == "checkpointed"
                            else None),
                saved_bytes_peak=saved_peak, device_peak_bytes=dev_peak,
                recomputed_calls=rec.recomputed_calls if rec else 0, grads_none=none,
                loss_scale=scale, skipped=skipped)
    finally:
        if rec:
            rec.close()
        if cal:
            cal.close()
    if rec:
        writer_run.set_module_dtypes(rec.fwd_dtypes, rec.rec_dtypes)
        return rec.order, rec.types, set(rec.rec_dtypes), wrapped, rec.random
    return None, None, set(), wrapped, set()


def _train_compiled(ctx, spec, writer_run, model, budget, shard):
    """A torch.compile run at one activation memory budget (no module records)."""
    import torch._dynamo
    import torch._functorch.config as fc
    old = fc.activation_memory_budget
    torch._dynamo.reset()
    fc.activation_memory_budget = budget
    try:
        compiled = torch.compile(model, backend=modes_mod.COMPILE_BACKEND)
        inner = _Context(ctx, compiled)
        plain = RunSpec(spec.id, "plain", spec.dtype, record=False)
        plain.no_hooks = True  # a module hook inside the compiled graph would change it
        return train_run(inner, plain, writer_run, shard, prepared=compiled, module_model=model)
    finally:
        fc.activation_memory_budget = old
        torch._dynamo.reset()


class _Context:
    def __init__(self, ctx, model):
        self.__dict__.update(ctx.__dict__)
        self.template = model
