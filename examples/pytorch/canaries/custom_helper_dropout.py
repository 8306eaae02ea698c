"""Canary: a custom checkpoint helper that never restores the RNG (naive_checkpoint.py)
around blocks with dropout: the recomputation draws new masks.

    python3 -m ckpt_harness.torch verify examples/pytorch/canaries/custom_helper_dropout.py
expected: FAIL, cause "dropout mask redrawn on recompute"
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import naive_checkpoint


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.3))
                                    for _ in range(2))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def build():
    torch.manual_seed(0)
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    return Net(), (x,), lambda out, step: F.cross_entropy(out, y)


def enable_checkpointing(model):
    for b in model.blocks:
        naive_checkpoint.install(b)
