"""A ResNet-style CNN (basic residual blocks with GroupNorm) for
`python3 -m ckpt_harness.torch verify`:

    python3 -m ckpt_harness.torch verify examples/pytorch/resnet_cnn.py --wrap-type BasicBlock
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.gn1 = nn.GroupNorm(2, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.gn2 = nn.GroupNorm(2, cout)
        self.relu = nn.ReLU()
        self.short = (nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        h = self.relu(self.gn1(self.conv1(x)))
        return self.relu(self.gn2(self.conv2(h)) + self.short(x))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2),
                                    BasicBlock(16, 16, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = self.layers(torch.relu(self.stem(x)))
        return self.fc(h.mean(dim=(2, 3)))


def build():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 16, 16)
    y = torch.randint(0, 10, (4,))
    return ResNet(), (x,), lambda out, step: F.cross_entropy(out.float(), y)
