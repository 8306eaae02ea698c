"""ckpt_harness: framework drivers for the ckpt-harness program.

Framework-neutral pieces (importable without torch or tensorflow):
  ckpt_harness.dump    the judge-input writer (docs/interop.md, "Judge input")
  ckpt_harness.judge   finding and running `ckpt-harness judge`, and its Result
  ckpt_harness.cli     the options every driver shares, script loading, one-line errors
Framework drivers:
  ckpt_harness.torch   PyTorch (python3 -m ckpt_harness.torch verify SCRIPT.py)
"""
__version__ = "0.1.0"

from ckpt_harness.judge import Result, UsageError  # noqa: E402,F401
