"""python3 -m ckpt_harness.torch verify SCRIPT.py [options]"""
import argparse
import sys

from ckpt_harness import cli
from ckpt_harness.judge import UsageError

PROG = "python3 -m ckpt_harness.torch"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (run_main prints it)
        raise UsageError(message)


def build_parser():
    from ckpt_harness.torch.modes import MODES
    ap = _Parser(prog=PROG + " verify",
                 description="Verify that gradient checkpointing changes nothing but memory "
                             "on your PyTorch model: the plain configuration twice (the "
                             "control) and the checkpointed one per mode, judged by "
                             "ckpt-harness.",
                 formatter_class=argparse.RawDescriptionHelpFormatter,
                 epilog="modes:\n" + "\n".join(f"  {k:18} {v}" for k, v in MODES.items()) +
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


def _verify(argv):
    ap = build_parser()
    a = ap.parse_args(argv)
    from ckpt_harness.torch.modes import MODES
    modes = (cli.parse_list(a.modes, [m for m in MODES if not m.startswith("compile")] +
                            ["compile:"], "modes") if a.modes else None)
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
        print(f"usage: {PROG} verify SCRIPT.py [options]   ({PROG} verify --help)")
        return 0 if argv else 2
    if argv[0] != "verify":
        print(f"{PROG}: unknown command {argv[0]!r} (expected verify)", file=sys.stderr)
        return 2
    return cli.run_main(PROG, _verify, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
