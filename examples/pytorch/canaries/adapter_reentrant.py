"""Canary: adapter fine-tuning with a frozen backbone under reentrant checkpointing. The
block's input comes from frozen layers and needs no gradient, so use_reentrant=True passes
no gradient to the trainable adapter inside the checkpointed block (transformers issue
26221): a "memory saving" that is really missing gradients.

    python3 -m ckpt_harness.torch verify examples/pytorch/canaries/adapter_reentrant.py \
        --wrap 'block' --modes reentrant
expected: FAIL, cause "no gradient reached parameters inside a reentrant segment";
--modes nonreentrant passes.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Adapted(nn.Module):
    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(16, 16)
        self.adapter = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.frozen(x) + self.adapter(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.block = Adapted()
        self.head = nn.Linear(16, 4)
        for p in list(self.embed.parameters()) + list(self.block.frozen.parameters()):
            p.requires_grad_(False)

    def forward(self, x):
        return self.head(self.block(self.embed(x)))


def build():
    torch.manual_seed(0)
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    return Net(), (x,), lambda out, step: F.cross_entropy(out, y)
