"""Canary: a custom checkpoint helper that does not restore autocast for the recomputation
(naive_checkpoint.py; pytorch issues 37730, 141896): under bf16 autocast the forward runs
in bf16 but the recomputation, which runs during backward outside the autocast region, in
fp32, so the gradients through it change.

    python3 -m ckpt_harness.torch verify examples/pytorch/canaries/custom_helper_autocast.py --dtype bf16
expected: FAIL, cause "recomputed in fp32, forward in bf16"
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import naive_checkpoint


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(2))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = x + b(x.float())  # blocks take fp32 input (autocast casts it for the matmul)
        return self.head(x)


def build():
    torch.manual_seed(0)
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    return Net(), (x,), lambda out, step: F.cross_entropy(out.float(), y)


def enable_checkpointing(model):
    for b in model.blocks:
        naive_checkpoint.install(b)
