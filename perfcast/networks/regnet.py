"""RegNetY-400MF (Radosavovic et al., Designing Network Design Spaces, CVPR 2020), layer for layer as torchvision's
`regnet_y_400mf`: residual bottlenecks with grouped 3x3 convolutions (group width 8) and squeeze-excitation whose
width is a quarter of the block's input."""

from __future__ import annotations

import torch
from torch import nn

from .mobilenet import SqueezeExcitation, conv_bn_act

IMAGE = 224


class RegNetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8, se_ratio: float = 0.25):
        super().__init__()
        self.proj = (conv_bn_act(cin, cout, 1, stride, act=None) if cin != cout or stride != 1 else None)
        self.f = nn.Sequential(
            conv_bn_act(cin, cout, 1, act=nn.ReLU),
            conv_bn_act(cout, cout, 3, stride, groups=cout // group_width, act=nn.ReLU),
            SqueezeExcitation(cout, int(round(se_ratio * cin)), act=nn.ReLU, scale=nn.Sigmoid),
            conv_bn_act(cout, cout, 1, act=None))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu((x if self.proj is None else self.proj(x)) + self.f(x))


class RegNetY400MF(nn.Module):
    # (width, depth) per stage: torchvision's BlockParams.from_init_params(depth=16, w_0=48, w_a=27.89, w_m=2.09,
    # group_width=8, se_ratio=0.25), i.e. the paper's quantized linear widths; every stage starts with stride 2
    STAGES = ((48, 1), (104, 3), (208, 6), (440, 6))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [conv_bn_act(3, 32, 3, 2, act=nn.ReLU)]
        cin = 32
        for width, depth in self.STAGES:
            layers += [RegNetBlock(cin if i == 0 else width, width, 2 if i == 0 else 1) for i in range(depth)]
            cin = width
        self.trunk = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.trunk(x)), 1))


def regnet_y_400mf(batch_size: int):
    return RegNetY400MF(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)
