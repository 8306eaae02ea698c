"""Canary (torch >= 2.4): torch.compile with an activation memory budget below 1 around a
model with dropout. Found on torch 2.15 (CPU): at budget 0 the min-cut partitioner
recomputes the dropout in backward and the gradients differ from the same compile at
budget 1 (pytorch issue 190758 reports fresh randomness on recompute under a budget);
budget 0.5 happened to keep the mask here and passed.

    python3 -m ckpt_harness.torch verify examples/pytorch/canaries/compile_budget_dropout.py \
        --modes compile:budget=0
expected: FAIL at step 0 (no module records under compile: the cause names the dropout
as the suspect, not proven)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def build():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.2), nn.Linear(32, 32),
                      nn.GELU(), nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    return m, (x,), lambda out, step: F.cross_entropy(out, y)
