"""A 3-D U-Net with BatchNorm and skip connections for `python3 -m ckpt_harness.torch verify`.

Healthy: checkpoint the convolutions and keep each BatchNorm outside the checkpointed part
(a recomputed BatchNorm in training mode updates its running statistics a second time):

    python3 -m ckpt_harness.torch verify examples/pytorch/unet3d_bn.py --wrap '*.convs'

Canary (pytorch issue 96136): checkpoint whole blocks, BatchNorm included:

    python3 -m ckpt_harness.torch verify examples/pytorch/unet3d_bn.py --wrap 'enc*' --wrap 'dec*'
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

C, SIZE, BATCH = 4, 8, 2


class Level(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv3d(cin, cout, 3, padding=1), nn.ReLU(),
                                   nn.Conv3d(cout, cout, 3, padding=1))
        self.bn = nn.BatchNorm3d(cout)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.convs(x)))


class UNet3D(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv3d(1, C, 3, padding=1)
        self.enc1 = Level(C, C)
        self.pool = nn.MaxPool3d(2)
        self.enc2 = Level(C, 2 * C)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec1 = Level(3 * C, C)
        self.head = nn.Conv3d(C, 1, 1)

    def forward(self, x):
        s1 = self.enc1(self.stem(x))
        bottom = self.enc2(self.pool(s1))
        return self.head(self.dec1(torch.cat([self.up(bottom), s1], dim=1)))


def build():
    torch.manual_seed(0)
    x = torch.randn(2, BATCH, 1, SIZE, SIZE, SIZE)
    target = torch.randn(2, BATCH, 1, SIZE, SIZE, SIZE)
    return (UNet3D(), lambda step: (x[step % 2],),
            lambda out, step: F.mse_loss(out.float(), target[step % 2]))
