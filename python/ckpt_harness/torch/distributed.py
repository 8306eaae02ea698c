"""The PyTorch driver under torch.distributed: N processes (gloo on the CPU), each training
the model under DistributedDataParallel (or FSDP where the installed torch runs it on this
device) on the script's batch (every rank gets the same batch: build()'s loss_fn holds its
targets, so the driver cannot shard them); every rank's runs go into one judge input, and
the judge checks each rank's gradients against rank 0's as well."""
import json
import os
import shutil
import tempfile
import traceback

import torch

from ckpt_harness.judge import UsageError, run_judge


def _wrapper(kind, mode, device):
    import torch.distributed as dist  # noqa: F401
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        def wrap(m):
            # reentrant checkpointing reruns forward inside backward: DDP must be told the
            # graph is the same every step
            static = mode in ("reentrant", "user")
            return DDP(m, static_graph=static) if device == "cpu" else DDP(m, device_ids=[0])
        return wrap
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:
        raise UsageError(f"--distributed fsdp: torch {torch.__version__} has no "
                         "torch.distributed.fsdp")
    return lambda m: FSDP(m, device_id=None) if device == "cpu" else FSDP(m)


def _worker(rank, script, root, nproc, kind, kw):
    from ckpt_harness.cli import load_script
    from ckpt_harness.torch import (_make_context, check_options, declare_modules, new_writer,
                                    resolve_modes, run_matrix)
    err_path = os.path.join(root, f"error.rank{rank}.txt")
    try:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://" + os.path.join(root, "rendezvous"),
                                rank=rank, world_size=nproc)
        torch.use_deterministic_algorithms(True)
        mod = load_script(script)
        model, inputs, loss_fn = mod.build()
        ec = getattr(mod, "enable_checkpointing", None)
        ec = ec if callable(ec) and not kw["wrap"] and not kw["wrap_type"] else None
        modes = resolve_modes(kw["modes"], kw["wrap"], kw["wrap_type"], ec)
        check_options(modes, kw["dtypes"], kw["device"], kw["steps"], kw["optimizer"])
        ctx = _make_context(model, inputs, loss_fn, kw["wrap"], kw["wrap_type"], ec, kw["steps"],
                            kw["optimizer"], kw["lr"], kw["seed"], kw["device"])
        name = os.path.splitext(os.path.basename(script))[0]
        writer = new_writer(root, name, script, kw["dtypes"], modes, kw["steps"],
                            kw["optimizer"], kw["lr"], kw["seed"], kw["device"], nproc)
        writer.doc["config"]["distributed"] = kind
        ctx.wrap_distributed = _wrapper(kind, modes[0] if len(modes) == 1 else "reentrant"
                                        if "reentrant" in modes else modes[0], kw["device"])
        results = run_matrix(ctx, writer, kw["dtypes"], modes, kw["bisect"], rank=rank,
                             shard=(rank, nproc))
        declare_modules(writer, *results)
        writer.doc["min_saving"] = kw["min_saving"]
        with open(os.path.join(root, f"judge.rank{rank}.json"), "w") as f:
            json.dump(writer.doc, f)
        dist.barrier()
        dist.destroy_process_group()
    except UsageError as e:
        with open(err_path, "w") as f:
            f.write(str(e))
        raise SystemExit(2)
    except Exception as e:
        with open(err_path, "w") as f:
            f.write(f"rank {rank}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        if os.environ.get("CKPT_HARNESS_TRACEBACK"):
            traceback.print_exc()
        raise SystemExit(2)


def verify_distributed(script, nproc=2, kind="ddp", **kw):
    """verify_script() with the model under torch.distributed in nproc processes."""
    import torch.multiprocessing as mp
    dump, keep = kw.pop("dump", None), kw.pop("keep", False)
    judge_kw = {k: kw.pop(k) for k in ("harness", "report", "junit", "html", "quiet")
                if k in kw}
    kw.setdefault("modes", None)
    kw.setdefault("wrap", [])
    kw.setdefault("wrap_type", [])
    for k, v in (("dtypes", ["fp32"]), ("steps", 2), ("optimizer", "sgd"), ("lr", 0.01),
                 ("seed", 0), ("device", "cpu"), ("bisect", True), ("min_saving", None)):
        kw.setdefault(k, v)
    if kind not in ("ddp", "fsdp"):
        raise UsageError(f"--distributed {kind!r}: expected ddp or fsdp")
    if not torch.distributed.is_available():
        raise UsageError(f"--nproc: torch {torch.__version__} was built without "
                         "torch.distributed")
    if any(d != "fp32" for d in kw["dtypes"]):
        raise UsageError("--nproc: the distributed runs are judged in fp32 only (give "
                         "--dtype fp32)")
    if kind == "fsdp":
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401
        except Exception as e:  # Debian's 1.13 under Python 3.11 fails on import
            raise UsageError(f"--distributed fsdp: torch {torch.__version__} cannot import "
                             f"torch.distributed.fsdp here ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:120]})")
    from ckpt_harness.cli import load_script
    load_script(script)  # a missing build() is reported here, once, not by every process
    root = dump or tempfile.mkdtemp(prefix="ckpt-harness-torch-ddp-")
    os.makedirs(root, exist_ok=True)
    try:
        try:
            mp.spawn(_worker, args=(script, root, nproc, kind, kw), nprocs=nproc, join=True)
        except Exception:
            for r in range(nproc):
                p = os.path.join(root, f"error.rank{r}.txt")
                if os.path.exists(p):
                    with open(p) as f:
                        raise UsageError(f.read().strip())
            raise UsageError(f"--nproc {nproc}: a process failed without saying why")
        docs = []
        for r in range(nproc):
            with open(os.path.join(root, f"judge.rank{r}.json")) as f:
                docs.append(json.load(f))
        doc = docs[0]
        for d in docs[1:]:
            doc["runs"] += d["runs"]
        with open(os.path.join(root, "judge.json"), "w") as f:
            json.dump(doc, f, indent=1)
        return run_judge(root, bisect=kw["bisect"], min_saving=kw["min_saving"],
                         temporary=not dump and not keep, **judge_kw)
    finally:
        if not dump and not keep:
            shutil.rmtree(root, ignore_errors=True)
