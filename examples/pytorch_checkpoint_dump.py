#!/usr/bin/env python3
"""Dump gradients with and without torch.utils.checkpoint, for `ckpt-harness compare`.

    pip install torch safetensors
    python3 examples/pytorch_checkpoint_dump.py --out dumps/
    ckpt-harness compare dumps/ckpt.safetensors dumps/plain.safetensors

One training step of a small conv net, twice from identical weights and data: plain, then
with every block wrapped in torch.utils.checkpoint.checkpoint. Saved per run: the loss,
every parameter's gradient ("grad.<name>") and every buffer ("buffer.<name>", e.g. a
BatchNorm's running_mean and num_batches_tracked, which a recomputed forward updates
twice: pytorch issue 96136). To use this in your own loop, keep only `dump()`.
"""
import argparse
import copy
import os

import torch
import torch.nn as nn
from safetensors.torch import save_file
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.drop = nn.Dropout(0.1) if dropout else nn.Identity()

    def forward(self, x):
        return self.drop(torch.relu(self.bn(self.conv(x))))


class Net(nn.Module):
    def __init__(self, dropout, use_ckpt, preserve_rng):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.ModuleList(Block(8, dropout) for _ in range(3))
        self.head = nn.Linear(8, 10)
        self.use_ckpt, self.preserve_rng = use_ckpt, preserve_rng

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            if self.use_ckpt:
                x = checkpoint(b, x, use_reentrant=False, preserve_rng_state=self.preserve_rng)
            else:
                x = b(x)
        return self.head(x.mean(dim=(2, 3)))


def dump(path, model, loss):
    """Everything `compare` should look at, as one safetensors file."""
    t = {"loss": loss.detach().reshape(())}
    for name, p in model.named_parameters():
        t["grad." + name] = p.grad.detach().contiguous()
    for name, b in model.named_buffers():
        t["buffer." + name] = b.detach().contiguous()
    save_file(t, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="dumps")
    ap.add_argument("--dropout", action="store_true", help="add dropout to every block")
    ap.add_argument("--no-preserve-rng", action="store_true",
                    help="do not replay the RNG on recompute (dropout masks then differ)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    plain = Net(args.dropout, False, True)
    ckpt = copy.deepcopy(plain)  # identical weights and buffers
    ckpt.use_ckpt, ckpt.preserve_rng = True, not args.no_preserve_rng
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    for name, model in (("plain", plain), ("ckpt", ckpt)):
        torch.manual_seed(1)  # the same dropout stream for both runs
        model.train()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        dump(os.path.join(args.out, name + ".safetensors"), model, loss)
    print("wrote", args.out + "/plain.safetensors and ckpt.safetensors")


if __name__ == "__main__":
    main()
