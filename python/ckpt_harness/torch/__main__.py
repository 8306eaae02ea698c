"""python3 -m ckpt_harness.torch verify SCRIPT.py [options]
python3 -m ckpt_harness.torch export SCRIPT.py -o MODEL.onnx [options]"""
import argparse
import sys

from ckpt_harness import cli
from ckpt_harness.judge import UsageError

PROG = "python3 -m ckpt_harness.torch"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (run_main prints it)
        raise UsageError(message)


def build_parser():
    from ckpt_harness.torch.modes import MODES, USER_MODE
    ap = _Parser(prog=PROG + " verify",
                 description="Verify that gradient checkpointing changes nothing but memory "
                             "on your PyTorch model: the plain configuration twice (the "
                             "control) and the checkpointed one per mode, judged by "
                             "ckpt-harness.",
                 formatter_class=argparse.RawDescriptionHelpFormatter,
                 epilog="modes:\n" + "\n".join(f"  {k:18} {v}" for k, v in MODES.items()) +
                        f"\n  {USER_MODE:18} the script's enable_checkpointing(model) (the "
                        "mode, and the only one, when the script defines it and no --wrap/"
                        "--wrap-type is given)" +
                        "\n\nexit codes: 0 passed, 1 a difference or unmet memory saving, "
                        "2 bad input")
    cli.add_common_options(ap, dtypes=("fp32", "bf16", "fp16"))
    ap.add_argument("--wrap-type", action="append", default=[], metavar="CLASSNAME",
                    help="checkpoint every submodule of this class (repeatable)")
    ap.add_argument("--modes", default=None, metavar="LIST",
                    help="comma-separated checkpointing modes (default nonreentrant)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--nproc", type=int, default=1, metavar="N",
                    help="torch.distributed: N processes (gloo on the CPU)")
    ap.add_argument("--distributed", default="ddp", choices=("ddp", "fsdp"),
                    help="with --nproc: the wrapper (default ddp)")
    return ap


def build_export_parser():
    from ckpt_harness.torch.onnx_export import EXPORTERS, LOSSES
    ap = _Parser(prog=PROG + " export",
                 description="Export SCRIPT.py's model to ONNX the way that keeps its training "
                             "semantics (the TorchScript exporter, training=TRAINING, "
                             "do_constant_folding=False), write PyTorch's train-mode reference "
                             "(output, loss, every gradient) and run `ckpt-harness import "
                             "--check-against` on it: an import that is not the same model is "
                             "refused and nothing is written (docs/onnx.md).",
                 epilog="exit codes: 0 exported and matched, 2 refused or bad input")
    ap.add_argument("script", metavar="SCRIPT.py",
                    help="defines build() -> (model, inputs, loss_fn); the model is exported "
                         "on inputs(0), its one input")
    ap.add_argument("-o", "--output", required=True, metavar="MODEL.onnx",
                    help="the ONNX file (external data files beside it when the exporter "
                         "writes them, over 2 GB)")
    ap.add_argument("--ref", metavar="REF.npz",
                    help="the reference file (default: MODEL.ref.npz)")
    ap.add_argument("--case", metavar="CASE.json",
                    help="also write the imported case (and CASE.safetensors)")
    ap.add_argument("--loss", choices=LOSSES, default="mean",
                    help="the loss of the reference and of the case (default mean: the "
                         "output's mean)")
    ap.add_argument("--class-dim", type=int, metavar="D",
                    help="cross_entropy: the classes' dim (default as `ckpt-harness import`)")
    ap.add_argument("--ignore-index", type=int, metavar="I",
                    help="cross_entropy: targets equal to I count for nothing")
    ap.add_argument("--opset", type=cli._positive_int, metavar="N",
                    help="ONNX opset (default 17 for torchscript: LayerNorm as one node; the "
                         "exporter's own for dynamo)")
    ap.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                    help="torchscript (default); dynamo (torch 2.x's default exporter: it "
                         "folds BatchNorm into the convolutions, and the check refuses it)")
    ap.add_argument("--seed", type=cli._non_negative_int, default=0,
                    help="seed of the reference's targets (mse, cross_entropy)")
    for opt, what in (("optimizer", "O"), ("lr", "X"), ("steps", "N"), ("checkpoint", "SPEC"),
                      ("precision", "P")):
        ap.add_argument("--" + opt, metavar=what,
                        help=f"with --case: `ckpt-harness import --{opt}`")
    ap.add_argument("--harness", metavar="PATH",
                    help="the ckpt-harness program (default: $CKPT_HARNESS, the source "
                         "tree's build/ckpt-harness, or PATH)")
    return ap


def _export(argv):
    a = build_export_parser().parse_args(argv)
    from ckpt_harness.torch.onnx_export import export_script
    opts = {k: getattr(a, k) for k in ("optimizer", "lr", "steps", "checkpoint", "precision")}
    if not a.case and any(v is not None for v in opts.values()):
        raise UsageError("--optimizer, --lr, --steps, --checkpoint and --precision are the "
                         "case's: give --case CASE.json")
    export_script(a.script, a.output, ref_path=a.ref, case_path=a.case, loss=a.loss,
                  class_dim=a.class_dim, ignore_index=a.ignore_index, exporter=a.exporter,
                  opset=a.opset, seed=a.seed, harness=a.harness, import_options=opts)
    return 0


def _verify(argv):
    ap = build_parser()
    a = ap.parse_args(argv)
    from ckpt_harness.torch.modes import MODES, USER_MODE
    modes = (cli.parse_list(a.modes, [m for m in MODES if not m.startswith("compile")] +
                            ["compile:", USER_MODE], "modes", display=list(MODES) + [USER_MODE])
             if a.modes else None)
    dtypes = cli.parse_list(a.dtype, ("fp32", "bf16", "fp16"), "dtype")
    kw = dict(wrap=a.wrap, wrap_type=a.wrap_type, modes=modes, dtypes=dtypes, steps=a.steps,
              optimizer=a.optimizer, lr=a.lr, seed=a.seed, device=a.device, report=a.report,
              junit=a.junit, html=a.html, bisect=a.bisect, min_saving=a.min_saving,
              dump=a.dump, keep=a.keep, harness=a.harness, quiet=a.quiet)
    if a.nproc < 1:
        raise UsageError(f"--nproc {a.nproc}: must be at least 1")
    if a.nproc > 1:
        from ckpt_harness.torch.distributed import verify_distributed
        r = verify_distributed(a.script, nproc=a.nproc, kind=a.distributed, **kw)
    else:
        from ckpt_harness.torch import verify_script
        r = verify_script(a.script, **kw)
    return r.exit_code


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {PROG} verify SCRIPT.py [options]   ({PROG} verify --help)\n"
              f"       {PROG} export SCRIPT.py -o MODEL.onnx [options]   "
              f"({PROG} export --help)")
        return 0 if argv else 2
    commands = {"verify": _verify, "export": _export}
    if argv[0] not in commands:
        print(f"{PROG}: unknown command {argv[0]!r} (expected verify or export)",
              file=sys.stderr)
        return 2
    return cli.run_main(PROG, commands[argv[0]], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
