"""The PyTorch driver: runs a model plain (twice: the control) and checkpointed in each
mode, writes every step in the harness's judge-input layout and lets `ckpt-harness judge`
decide.

    python3 -m ckpt_harness.torch verify SCRIPT.py --wrap 'blocks.*' [options]

    from ckpt_harness.torch import verify, assert_checkpoint_equivalent
    result = verify(model, inputs, loss_fn, wrap=["blocks.*"], modes=["nonreentrant"])
    assert result.passed, result.summary

docs/pytorch.md has the whole story; docs/interop.md ("Judge input") the layout.
"""
import os
import shutil
import tempfile

import torch

from ckpt_harness.dump import JudgeInput
from ckpt_harness.judge import Result, UsageError, run_judge
from ckpt_harness.torch import modes as modes_mod
from ckpt_harness.torch.modes import MODES, USER_MODE
from ckpt_harness.torch.runner import RunSpec, train_run

__all__ = ["verify", "verify_script", "assert_checkpoint_equivalent", "MODES", "Result",
           "UsageError"]
DTYPES = ("fp32", "bf16", "fp16")


class _Context:
    pass


def _run_id(role, dtype, mode=None, calibration=None, rank=0):
    parts = [role]
    if mode:
        parts.append(mode.replace(":", "-").replace("=", "-"))
    parts.append(dtype)
    if calibration is not None:
        parts.append(str(calibration))
    if rank:
        parts.append(f"r{rank}")
    return ".".join(parts)


def plan_runs(dtypes, modes, record=True):
    """The runs for a dtype list and mode list, in the order they train. torch.compile
    modes are judged against the same compile at budget 1 (the plain variant "compile",
    with its own control); compiled runs record no module outputs (hooks would break the
    graph)."""
    specs = [RunSpec(_run_id("plain", "fp32"), "plain", "fp32", record=record)]
    comp = modes_mod.COMPILE_REFERENCE
    for d in dtypes:
        if d != "fp32":
            specs.append(RunSpec(_run_id("plain", d), "plain", d, record=record))
        specs.append(RunSpec(_run_id("control", d), "control", d, record=record))
        if any(m.startswith("compile:") for m in modes):
            specs.append(RunSpec(_run_id("plain", d, comp), "plain", d, mode=comp, record=False))
            specs.append(RunSpec(_run_id("control", d, comp), "control", d, mode=comp,
                                 record=False))
        for m in modes:
            c = m.startswith("compile:")
            specs.append(RunSpec(_run_id("checkpointed", d, m), "checkpointed", d, mode=m,
                                 record=record and not c, reference=comp if c else None))
        if d != "fp32":
            for j in range(3):
                specs.append(RunSpec(_run_id("calibration", d, calibration=j), "calibration", d,
                                     calibration=j, record=False))
    return specs


def check_options(modes, dtypes, device, steps, optimizer):
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device!r}: expected cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    for d in dtypes:
        if d not in DTYPES:
            raise UsageError(f"--dtype: unknown dtype {d!r} (known: fp32, bf16, fp16)")
    if "fp16" in dtypes and device == "cpu":
        raise UsageError("--dtype fp16: fp16 autocast runs on CUDA only (--device cuda); on "
                         "the CPU use bf16")
    if len(set(dtypes)) != len(dtypes) or not dtypes:
        raise UsageError("--dtype: give each dtype once")
    if any(m != USER_MODE for m in modes):
        modes_mod.check_modes([m for m in modes if m != USER_MODE])
    if any(m.startswith("compile:") for m in modes) and dtypes != ["fp32"]:
        raise UsageError("--modes compile:budget=B: judged in fp32 only (give --dtype fp32)")
    if not isinstance(steps, int) or steps < 1:
        raise UsageError(f"steps must be a positive integer, got {steps!r}")


def _make_context(model, inputs, loss_fn, wrap, wrap_type, enable_checkpointing, steps,
                  optimizer, lr, seed, device):
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"build(): the model must be a torch.nn.Module, got "
                         f"{type(model).__name__}")
    if not callable(loss_fn):
        raise UsageError("build(): loss_fn must be callable as loss_fn(output, step)")
    ctx = _Context()
    ctx.template, ctx.inputs, ctx.loss_fn = model, inputs, loss_fn
    ctx.wrap, ctx.wrap_type = list(wrap or []), list(wrap_type or [])
    ctx.enable_checkpointing = enable_checkpointing
    ctx.steps, ctx.optimizer, ctx.lr, ctx.seed, ctx.device = steps, optimizer, lr, seed, device
    ctx.wrap_distributed = None
    return ctx


def resolve_modes(modes, wrap, wrap_type, enable_checkpointing):
    if enable_checkpointing is not None and (wrap or wrap_type):
        raise UsageError("give either --wrap/--wrap-type or enable_checkpointing(model), "
                         "not both")
    if enable_checkpointing is not None:
        if modes and list(modes) != [USER_MODE]:
            raise UsageError("--modes applies to --wrap/--wrap-type; with the script's own "
                             "enable_checkpointing(model) the mode is that function's")
        return [USER_MODE]
    if modes and USER_MODE in modes:
        raise UsageError(f"--modes {USER_MODE}: the script's enable_checkpointing(model), but "
                         + ("--wrap/--wrap-type replace it" if wrap or wrap_type else
                            "the script defines none"))
    modes = list(modes) if modes else ["nonreentrant"]
    eager = [m for m in modes if not m.startswith("compile:")]
    if eager and not wrap and not wrap_type:
        raise UsageError("nothing to checkpoint: pass --wrap PATTERN or --wrap-type CLASS, or "
                         "define enable_checkpointing(model) in the script")
    return modes


def run_matrix(ctx, writer, dtypes, modes, record, rank=0, shard=None, log=None):
    """Trains every run of the matrix into writer; returns (module order, types, recomputed
    module names, wrapped module names)."""
    order, types, recomputed, wrapped, random = None, {}, set(), [], set()
    for spec in _follow_skips(plan_runs(dtypes, modes, record), writer, rank):
        if rank:
            spec.id = f"{spec.id}.r{rank}"
        if log:
            log(f"run {spec.id}")
        run = writer.run(spec.id, spec.role, spec.dtype, mode=spec.mode, rank=rank,
                         calibration=spec.calibration, reference=spec.reference)
        try:
            o, t, rec, w, rnd = train_run(ctx, spec, run, shard)
        except UsageError:
            raise
        except Exception as e:  # the user's model or loss failed: one line, exit 2
            msg = str(e).strip().splitlines()
            raise UsageError(f"run {spec.id}: training raised {type(e).__name__}: "
                             f"{msg[0] if msg else ''}")
        if spec.role == "checkpointed" and spec.mode == USER_MODE:
            _user_part(writer, run, spec, rank)
        if o is not None and order is None:
            order, types = o, t
        recomputed |= rec
        wrapped = wrapped or w
        if spec.role in ("plain", "control"):
            random |= rnd
    return order or [], types, recomputed, wrapped, random


USER_PART = "enable_checkpointing(model)"


def _user_part(writer, run, spec, rank):
    """The script's own checkpointing as one part for the judge: recomputed as many times
    as module forwards ran again during backward. When none did and every step saved exactly
    the plain run's bytes, checkpointing did not run at all (a flag the forward never reads)
    and the judge fails the part, instead of passing a copy of the plain run. When none did
    but memory differs (checkpointed code that calls no module), no part is declared."""
    steps = run.meta["steps"]
    recomputed = sum(st["recomputed_calls"] for st in steps)
    plain = next((m for m in writer.doc["runs"] if m["role"] == "plain" and
                  m["dtype"] == spec.dtype and m["mode"] is None and m["rank"] == rank), None)
    same_memory = plain is not None and len(plain["steps"]) == len(steps) and all(
        p["saved_bytes_peak"] == c["saved_bytes_peak"] for p, c in zip(plain["steps"], steps))
    if recomputed > 0 or same_memory:
        run.set_parts([(USER_PART, len(steps), recomputed)])


def _follow_skips(specs, writer, rank):
    """The specs in order; before a low dtype's calibration runs, where that dtype's plain run
    (trained by then) skipped steps (GradScaler: inf/NaN gradients), a plain fp32 run of
    variant skip_like:<dtype> that skips the same updates (its fp32 reference in the judge),
    and the calibration runs skip them too."""
    follow = {}
    for spec in specs:
        if spec.role == "calibration":
            if spec.dtype not in follow:
                meta = next((m for m in writer.doc["runs"] if m["role"] == "plain" and
                             m["dtype"] == spec.dtype and m["mode"] is None and
                             m["rank"] == rank), None)
                skips = [bool(s["skipped"]) for s in meta["steps"]] if meta else []
                follow[spec.dtype] = skips if any(skips) else None
                if follow[spec.dtype]:
                    yield RunSpec(_run_id("plain", "fp32", f"skip_like-{spec.dtype}"), "plain",
                                  "fp32", mode=f"skip_like:{spec.dtype}", record=False,
                                  skip_like=follow[spec.dtype])
            spec.skip_like = follow[spec.dtype]
        yield spec


def declare_modules(writer, order, types, recomputed, wrapped, random):
    for n in order:
        inside = n in recomputed or any(n == w or n.startswith(w + ".") for w in wrapped)
        writer.add_module(n, types.get(n, "?"), inside, random=n in random)


def verify(model, inputs, loss_fn, wrap=(), wrap_type=(), enable_checkpointing=None,
           modes=None, dtypes=("fp32",), steps=2, optimizer="sgd", lr=0.01, seed=0,
           device="cpu", report=None, junit=None, html=None, bisect=True, min_saving=None,
           dump=None, keep=False, harness=None, quiet=False, name="model", source=None,
           echo=True):
    """Verifies that checkpointing `model` changes nothing but memory; returns the judge's
    Result (.passed, .verdict, .summary, .report_path). Raises UsageError on bad input."""
    dtypes = list(dtypes)
    modes = resolve_modes(modes, wrap, wrap_type, enable_checkpointing)
    check_options(modes, dtypes, device, steps, optimizer)
    ctx = _make_context(model, inputs, loss_fn, wrap, wrap_type, enable_checkpointing, steps,
                        optimizer, lr, seed, device)
    if ctx.wrap or ctx.wrap_type:  # a pattern that wraps nothing fails before anything runs
        modes_mod.select_modules(model, ctx.wrap, ctx.wrap_type)
    root = dump or tempfile.mkdtemp(prefix="ckpt-harness-torch-")
    was_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        writer = new_writer(root, name, source, dtypes, modes, steps, optimizer, lr, seed,
                            device, 1)
        order, types, recomputed, wrapped, random = run_matrix(ctx, writer, dtypes, modes,
                                                                bisect)
        declare_modules(writer, order, types, recomputed, wrapped, random)
        writer.finish(min_saving)
        return run_judge(root, harness=harness, report=report, junit=junit, html=html,
                         bisect=bisect, min_saving=min_saving, quiet=quiet, echo=echo,
                         temporary=not dump and not keep)
    finally:
        torch.use_deterministic_algorithms(was_det)
        if not dump and not keep:
            shutil.rmtree(root, ignore_errors=True)
        elif keep and not dump and echo:
            print(f"judge input kept in {root}")


def new_writer(root, name, source, dtypes, modes, steps, optimizer, lr, seed, device, nproc):
    return JudgeInput(root, "torch", torch.__version__, device, name, source=source,
                      config={"dtypes": dtypes, "modes": modes, "steps": steps,
                              "optimizer": {"kind": optimizer, "lr": lr}, "seed": seed,
                              "nproc": nproc,
                              "deterministic_algorithms": True})


def verify_script(script, **kw):
    """verify() on SCRIPT.py's build() (and enable_checkpointing, when it defines one)."""
    from ckpt_harness.cli import load_script
    mod = load_script(script)
    built = mod.build()
    if not isinstance(built, tuple) or len(built) != 3:
        raise UsageError(f"{script}: build() must return (model, inputs, loss_fn)")
    model, inputs, loss_fn = built
    kw.setdefault("name", os.path.splitext(os.path.basename(script))[0])
    kw.setdefault("source", script)
    ec = getattr(mod, "enable_checkpointing", None)
    if callable(ec) and not kw.get("wrap") and not kw.get("wrap_type"):
        kw.setdefault("enable_checkpointing", ec)
    return verify(model, inputs, loss_fn, **kw)


def assert_checkpoint_equivalent(model, inputs, loss_fn, **kw):
    """pytest helper: verify() and fail with the harness's summary when it does not pass."""
    kw.setdefault("echo", False)
    r = verify(model, inputs, loss_fn, **kw)
    if not r.passed:
        raise AssertionError("checkpointing changed the training run (ckpt-harness judge):\n"
                             + r.summary)
    return r
