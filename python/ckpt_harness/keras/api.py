"""verify(): the Keras driver's Python API, and the pytest helper.

    from ckpt_harness.keras import verify, assert_checkpoint_equivalent
    r = verify(build, wrap=["enc", "dec"], steps=2, dtypes=["fp32", "mixed_float16"])
    assert r.passed, r.summary

build() returns (model, inputs, loss_fn) as SCRIPT.py's build() does. The runs are written
in the judge input layout (ckpt_harness.dump) and `ckpt-harness judge` decides: the result's
verdict, summary and reports are the harness's own.
"""
import os
import shutil
import tempfile

import tensorflow as tf
import keras

from ckpt_harness import dump as judge_dump
from ckpt_harness.judge import UsageError, run_judge, source_file
from ckpt_harness.keras import instrument as ins
from ckpt_harness.keras import runner

CALIBRATION_DITHER_SEEDS = (None, 1, 2)  # calibration 0: plain rounding; 1, 2: dithered


def _mib(b):
    if b is None:
        return "n/a"
    if abs(b) >= 1048576:
        return f"{b / 1048576:.2f} MiB"
    return f"{b / 1024:.1f} KiB"


def _notes_for_mode(ji, mode, dtype, plain, ck, parts, wrapped_names):
    """Facts about one checkpointed run, as sentences in the report (no verdicts)."""
    tag = f"{mode} ({dtype})"
    if parts:
        for p in parts:
            n = ins.layer_path(p)
            fw, rc = ck.forwards.get(n, 0), ck.recomputed.get(n, 0)
            pb, cb = plain.part_bytes.get(n), ck.part_bytes.get(n)
            mem = ""
            if pb is not None and cb is not None:
                sav = (1.0 - cb / pb) if pb > 0 else 0.0
                mem = (f"; its forward left {_mib(pb)} allocated plain, {_mib(cb)} "
                       f"checkpointed (saving {100.0 * sav:.0f}%)")
            if rc == 0:
                ji.note(f"{tag}: checkpointing did not run inside {n}: {fw} forward calls, "
                        f"recomputed 0 times{mem}")
            else:
                ji.note(f"{tag}: {n} recomputed {rc} times in {fw} forward calls{mem}")
    else:
        rec = {n: c for n, c in ck.layer_recomputes.items()}
        if not rec and ck.untracked["backward"]:
            ji.note(f"{tag}: recomputation ran during backward only in layers the model does "
                    "not track (created inside a call)")
        elif not rec:
            ji.note(f"{tag}: checkpointing did not run: enable_checkpointing(model) made no "
                    "layer run again during backward")
        else:
            top = ", ".join(f"{n} x{c}" for n, c in list(rec.items())[:8])
            ji.note(f"{tag}: layers recomputed during backward: {top}"
                    + (f" (+{len(rec) - 8} more)" if len(rec) > 8 else ""))
    if plain.held and ck.held and plain.held[0] is not None and ck.held[0] is not None:
        ph, ch = plain.held[0], ck.held[0]
        ji.note(f"{tag}: bytes held for backward after the forward (TensorFlow allocator, "
                f"step 0): plain {_mib(ph)}, checkpointed {_mib(ch)}"
                + (f" (saving {100.0 * (1 - ch / ph):.0f}%)" if ph > 0 else ""))
    if ck.created["backward"]:
        names = ", ".join(sorted(set(ck.created_names["backward"]))[:6])
        ji.note(f"{tag}: weights re-created on recompute: {ck.created['backward']} variables "
                f"were created while recomputing during backward ({names}); the recomputation "
                "ran with new random weights, not the forward's")
    ub = ck.untracked["backward"]
    if ub:
        ji.note(f"{tag}: layers the model does not track ran during recomputation: "
                + ", ".join(f"{t} x{c}" for t, c in ub.items()))


def _plain_notes(ji, plain):
    uf = plain.untracked["forward"]
    if uf:
        ji.note("plain: layers the model does not track ran in the forward ("
                + ", ".join(f"{t} x{c}" for t, c in uf.items())
                + "): layers created inside call() get new weights on every call")
    if plain.created["forward"]:
        ji.note(f"plain: {plain.created['forward']} variables were created during training "
                "steps (not at build time)")


USER_PART = "enable_checkpointing(model)"


def _user_part(run, plain, ck):
    """The script's own checkpointing as one part for the judge, recomputed as many times
    as layers (tracked or created inside a call) ran during backward: none means
    checkpointing did not run (an attribute nothing reads), and the judge fails the part
    rather than pass a copy of the plain run. (TensorFlow's held bytes are no proof either
    way: they differ by a few hundred bytes between a plain run and the same plain run
    relabelled.) Recomputed code that calls no Keras layer counts as no recomputation."""
    recomputed = sum(ck.layer_recomputes.values()) + sum(ck.untracked["backward"].values())
    run.set_parts([(USER_PART, len(ck.held), recomputed)])


def _train(run_id, *a, **kw):
    """runner.train_run, with an exception from the user's model or TensorFlow turned into
    one line naming the run (bad input, exit 2)."""
    try:
        return runner.train_run(*a, **kw)
    except UsageError:
        raise
    except runner.LossFnError as e:  # the script's loss_fn failed on the model's output
        msg = " ".join(str(e).split())
        hint = ("; a mixed policy's output: cast it, e.g. keras.ops.cast(output, 'float32')"
                if e.out_dtype in ("float16", "bfloat16") else "")
        raise UsageError(f"run {run_id}: loss_fn(output, {e.step}) raised "
                         f"{type(e.cause).__name__} (the output is {e.out_dtype}{hint}): "
                         f"{msg[:300]}{'...' if len(msg) > 300 else ''}")
    except Exception as e:  # the model itself failed: not a verdict, bad input
        msg = " ".join(str(e).split())
        raise UsageError(f"run {run_id}: the model raised {type(e).__name__}: "
                         f"{msg[:300]}{'...' if len(msg) > 300 else ''}")


def verify(build, wrap=(), enable_checkpointing=None, steps=2, dtypes=("fp32",),
           optimizer="sgd", lr=0.01, seed=0, modes=("recompute_grad",), report=None,
           junit=None, html=None, bisect=True, min_saving=None, dump=None, keep=False,
           harness=None, quiet=False, echo=True, reseed=True, model_name=None, source=None):
    """Runs the matrix and hands it to `ckpt-harness judge`; returns its Result.

    build: SCRIPT.py's build(). wrap: layer path/name patterns to checkpoint with
    tf.recompute_grad, or enable_checkpointing(model) for your own mechanism. dtypes: from
    fp32, mixed_float16, mixed_bfloat16. modes: recompute_grad, recompute_grad:preserve-state.
    report/junit/html: the harness's outputs. dump: keep the judge input there. reseed=False
    skips clear_session and set_random_seed before each build (to show what the control
    catches without them; layer names must then be given explicitly). Bad input raises
    UsageError."""
    if not wrap and enable_checkpointing is None:
        raise UsageError("nothing to checkpoint: give --wrap PATTERN or define "
                         "enable_checkpointing(model) in the script")
    if wrap and enable_checkpointing is not None:
        raise UsageError("give either --wrap or enable_checkpointing(model), not both")
    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    cfg = runner.Config(steps=steps, dtypes=dtypes, optimizer=optimizer, lr=lr, seed=seed,
                        wrap=wrap, modes=modes, record_outputs=bisect, reseed=reseed,
                        device=device)
    tf.config.experimental.enable_op_determinism()
    memory = runner.memory_for(cfg.device)
    owned_tmp = None
    if dump:
        out = os.path.abspath(dump)
        if os.path.exists(os.path.join(out, "judge.json")):
            shutil.rmtree(os.path.join(out, "runs"), ignore_errors=True)
    else:
        owned_tmp = out = tempfile.mkdtemp(prefix="ckpt-keras-")
    name = model_name or "keras_model"
    source = source or source_file(build)
    ji = judge_dump.JudgeInput(out, "keras", f"tensorflow {tf.__version__}, keras "
                               f"{keras.__version__}", cfg.device, name, source=source,
                               config=cfg.as_dict(), deterministic=True)
    if not memory.ok:
        ji.note("memory: TensorFlow's allocator on the CPU counts no bytes unless the process "
                "starts with TF_CPU_ALLOCATOR_USE_BFC=true (python3 -m ckpt_harness.keras sets "
                "it); no memory figures in this run")
    modules = {}
    wrapped = set()
    snap = None
    fp32_plain = None
    try:
        for d in cfg.dtypes:
            pol, jd = runner.POLICIES[d], runner.JUDGE_DTYPE[d]
            r = low_plain = ji.run(f"plain.{jd}", "plain", dtype=jd)
            snap, plain, parts = _train(r.meta["id"], build, cfg, snap, r, pol, memory=memory,
                                                  modules=modules)
            if d == "fp32":
                fp32_plain = plain
            if d == cfg.dtypes[0]:
                _plain_notes(ji, plain)
            r = ji.run(f"control.{jd}", "control", dtype=jd)
            _train(r.meta["id"], build, cfg, snap, r, pol, memory=memory, modules=modules)
            for m in cfg.modes:
                r = ji.run(f"checkpointed.{m.replace(':', '-')}.{jd}", "checkpointed",
                           dtype=jd, mode=m)
                _, ck, parts = _train(r.meta["id"], build, cfg, snap, r, pol, checkpointed=True,
                                                mode=m, enable_checkpointing=enable_checkpointing,
                                                memory=memory, modules=modules)
                if parts:
                    for p in parts:
                        wrapped.add(ins.layer_path(p))
                        wrapped.update(ins.layer_path(s) for s in ins.walk(p))
                else:
                    wrapped.update(ck.layer_recomputes)
                    _user_part(r, plain, ck)
                _notes_for_mode(ji, m, d, plain, ck, parts, wrapped)
            if jd != "fp32":
                if fp32_plain is None:
                    r = ji.run("plain.fp32", "plain", dtype="fp32")
                    snap, fp32_plain, _ = _train(r.meta["id"], build, cfg, snap, r, "float32",
                                                           memory=memory, modules=modules)
                # the fp32 runs this dtype is judged against skip the updates its loss
                # scaler skipped (the judge refuses references that did not)
                skips = [s["skipped"] for s in low_plain.meta["steps"]]
                if any(skips):
                    r = ji.run(f"plain.fp32.skip_like-{jd}", "plain", dtype="fp32",
                               mode=f"skip_like:{jd}")
                    _train(r.meta["id"], build, cfg, snap, r, "float32", memory=memory,
                           modules=modules, skip_like=skips)
                for k, ds in enumerate(CALIBRATION_DITHER_SEEDS):
                    r = ji.run(f"calibration{k}.{jd}", "calibration", dtype=jd, calibration=k)
                    _train(r.meta["id"], build, cfg, snap, r, "float32", memory=memory,
                           rounder=ins.Rounder(jd, ds), modules=modules,
                           skip_like=skips if any(skips) else None)
        for n, t in modules.items():
            ji.add_module(n, t, n in wrapped)
        ji.finish(min_saving=min_saving)
        res = run_judge(out, harness=harness, report=report, junit=junit, html=html,
                        bisect=bisect, min_saving=min_saving, quiet=quiet, echo=echo,
                        temporary=bool(owned_tmp and not keep))
        if keep and owned_tmp:
            print(f"judge input kept in {out}")
        return res
    finally:
        if owned_tmp and not keep:
            shutil.rmtree(owned_tmp, ignore_errors=True)


def assert_checkpoint_equivalent(build, **kw):
    """pytest helper: raises AssertionError whose message is the harness's summary when the
    judge does not pass."""
    kw.setdefault("echo", False)
    r = verify(build, **kw)
    if not r.passed:
        raise AssertionError("checkpointing changed this Keras model's training "
                             f"(ckpt-harness judge, exit {r.exit_code}):\n{r.summary}")
    return r
