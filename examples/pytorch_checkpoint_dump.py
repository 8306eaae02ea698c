#!/usr/bin/env python3
"""Check torch.utils.checkpoint on a small conv net with the PyTorch driver of ckpt-harness.

    python3 examples/pytorch_checkpoint_dump.py [options] [--out DIR] [--harness PATH]

A thin use of `ckpt_harness.torch.verify` (python/ckpt_harness, docs/pytorch.md): the
driver trains the net plain twice (the control: must be bitwise identical) and with
torch.utils.checkpoint around each block, writes every step's loss, gradients, parameters,
buffers and module outputs in the harness's judge-input layout (into --out, kept), and
`ckpt-harness judge` decides. The exit code is the judge's: 0 passed, 1 a difference, 2 bad
usage or no ckpt-harness.

Options and their documented outcomes (tests/interop/check_torch.py asserts each):
  (default)            conv + ReLU blocks, non-reentrant checkpoint           exit 0
  --reentrant          use_reentrant=True                                     exit 0
  --dropout            dropout in every block; the RNG state is stashed and
                       restored for the recomputation, the masks replay       exit 0
  --no-preserve-rng    dropout with preserve_rng_state=False: the recomputed
                       masks differ; cause "dropout mask redrawn on recompute" exit 1
  --batchnorm          BatchNorm in every block: gradients are identical, but the
                       recomputation updates the running statistics a second time
                       (pytorch issue 96136); cause "BatchNorm running statistics
                       updated by the recomputation"                           exit 1
  --amp                bf16 autocast (CPU): checkpointed vs plain in the same autocast
                       bitwise, the autocast run against fp32 by the harness's
                       calibrated rule                                         exit 0
For your own model, write a script with build() and run
`python3 -m ckpt_harness.torch verify SCRIPT.py --wrap PATTERN` instead.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from ckpt_harness.judge import UsageError  # noqa: E402
from ckpt_harness.torch import verify  # noqa: E402


class Block(nn.Module):
    def __init__(self, c, batchnorm, dropout):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c) if batchnorm else nn.Identity()
        self.drop = nn.Dropout(0.2) if dropout else nn.Identity()

    def forward(self, x):
        return self.drop(torch.relu(self.bn(self.conv(x))))


class Net(nn.Module):
    def __init__(self, batchnorm, dropout):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.Sequential(*(Block(8, batchnorm, dropout) for _ in range(3)))
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="dumps", help="the judge input (kept), default dumps/")
    ap.add_argument("--harness", help="the ckpt-harness program (default: $CKPT_HARNESS, "
                    "build/ckpt-harness of this tree, or PATH)")
    ap.add_argument("--dropout", action="store_true", help="dropout in every block")
    ap.add_argument("--no-preserve-rng", action="store_true",
                    help="dropout, and do not replay the RNG on recompute (masks then differ)")
    ap.add_argument("--batchnorm", action="store_true", help="BatchNorm in every block")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast")
    ap.add_argument("--reentrant", action="store_true", help="use_reentrant=True")
    ap.add_argument("--report", help="the harness's reports into this folder")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    model = Net(args.batchnorm, args.dropout or args.no_preserve_rng)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    mode = ("no-preserve-rng" if args.no_preserve_rng else
            "reentrant" if args.reentrant else "nonreentrant")
    try:
        r = verify(model, (x,), lambda out, step: nn.functional.cross_entropy(out.float(), y),
                   wrap=["blocks.*"], modes=[mode], dtypes=["bf16" if args.amp else "fp32"],
                   steps=1, dump=args.out, harness=args.harness, report=args.report,
                   name="pytorch_checkpoint_dump", source=os.path.abspath(__file__))
    except UsageError as e:
        print(f"pytorch_checkpoint_dump: {e}", file=sys.stderr)
        return 2
    return r.exit_code


if __name__ == "__main__":
    sys.exit(main())
