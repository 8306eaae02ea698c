#!/usr/bin/env python3
"""PyTorch reference timings for `make bench`: the bench cases' models built in torch, fp32,
plain (no checkpointing), one SGD step = forward + loss + backward + update, on the given
number of threads. Prints one line per model: `<name> <seconds per step>`.
Usage: torch_bench.py --threads N [--steps S] model...   (models: mlp seed unet2d gpt)
"""
import argparse
import sys
import time

import torch
import torch.nn as nn


def mlp():
    layers = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers[:-1]), torch.randn(256, 1024), "mse"


def seed():
    layers = []
    cin = 1
    for _ in range(5):
        for _ in range(12):
            layers += [nn.Conv3d(cin, 4, 3, padding=1, bias=False), nn.ReLU()]
            cin = 4
    return nn.Sequential(*layers), torch.randn(1, 1, 64, 64, 32), "mean"


# forward MACs per sample: c1 16384*32*27, c1b 16384*32*288, c2 4096*64*288, c2b 4096*64*576,
# c3 1024*128*576, c3b 1024*128*1152, c4 4096*64*1728, c5 16384*32*864, head 16384*32:
# 1524.63M; a step adds the weight gradients (the same) and the input gradients of every
# layer but c1 (1510.47M); tests/bench/run.sh turns that into GFLOP per step
class UNet2d(nn.Module):
    def __init__(self):
        super().__init__()
        c = lambda i, o: nn.Conv2d(i, o, 3, padding=1)
        self.c1, self.c1b = c(3, 32), c(32, 32)
        self.c2, self.c2b = c(32, 64), c(64, 64)
        self.c3, self.c3b = c(64, 128), c(128, 128)
        self.c4 = c(128 + 64, 64)
        self.c5 = c(64 + 32, 32)
        self.head = nn.Conv2d(32, 1, 1)

    def forward(self, x):
        r = torch.relu
        a = r(self.c1b(r(self.c1(x))))
        b = r(self.c2b(r(self.c2(nn.functional.max_pool2d(a, 2)))))
        m = r(self.c3b(r(self.c3(nn.functional.max_pool2d(b, 2)))))
        u = nn.functional.interpolate(m, scale_factor=2, mode="nearest")
        u = r(self.c4(torch.cat([u, b], 1)))
        u = nn.functional.interpolate(u, scale_factor=2, mode="nearest")
        u = r(self.c5(torch.cat([u, a], 1)))
        return self.head(u)


def unet2d():
    return UNet2d(), torch.randn(4, 3, 128, 128), "mse"


# forward MACs per token: q, k, v, proj 4 * 384 * 384, fc and fc2 2 * 384 * 1536 (1769472;
# x 512 tokens = 905.97M, and as much again for the weight and for the input gradients);
# attention per sequence and head 2 * 128 * 128 * 64 (x 6 heads x 4 sequences = 50.33M,
# twice that in backward): 2868.9M MACs per step
class GPTBlock(nn.Module):
    def __init__(self, width=384, heads=6):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.proj = nn.Linear(width, width)
        self.fc, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def attention(self, q, k, v):
        n, t, c = q.shape
        split = lambda z: z.view(n, t, self.heads, c // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        sdpa = getattr(nn.functional, "scaled_dot_product_attention", None)
        if sdpa is not None:  # PyTorch >= 2.0: its fused kernel, what users run
            o = sdpa(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            o = torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v
        return o.transpose(1, 2).reshape(n, t, c)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.proj(self.attention(self.q(h), self.k(h), self.v(h)))
        h = nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh")
        return x + self.fc2(h)


def gpt():
    return GPTBlock(), torch.randn(4, 128, 384), "mse"


MODELS = {"mlp": mlp, "seed": seed, "unet2d": unet2d, "gpt": gpt}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    for name in a.models:
        model, x, loss_kind = MODELS[name]()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        target = None
        times = []
        for step in range(a.steps + 1):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            y = model(x)
            if loss_kind == "mse":
                if target is None:
                    target = torch.randn_like(y)
                loss = ((y - target) ** 2).mean()
            else:
                loss = y.mean()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        times = sorted(times[1:])  # the first step warms up
        print(f"{name} {times[len(times) // 2]:.6f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
