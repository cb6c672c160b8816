"""ShuffleNet V2 1.0x (Ma et al., ECCV 2018), layer for layer as torchvision's `shufflenet_v2_x1_0`: channel split,
a depthwise-separable branch, concatenation and a channel shuffle (view, transpose, view) in every unit."""

from __future__ import annotations

import torch
from torch import nn

from .mobilenet import conv_bn_act

IMAGE = 224


def _channel_shuffle(x, groups: int):
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        half = cout // 2
        self.stride = stride
        if stride > 1:  # the downsampling unit: both branches see the whole input
            self.branch1 = nn.Sequential(conv_bn_act(cin, cin, 3, stride, groups=cin, act=None),
                                         conv_bn_act(cin, half, 1, act=nn.ReLU))
        self.branch2 = nn.Sequential(conv_bn_act(cin if stride > 1 else half, half, 1, act=nn.ReLU),
                                     conv_bn_act(half, half, 3, stride, groups=half, act=None),
                                     conv_bn_act(half, half, 1, act=nn.ReLU))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), 1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), 1)
        return _channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    REPEATS, WIDTHS = (4, 8, 4), (24, 116, 232, 464, 1024)  # 1.0x: Table 5 of the paper

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        w = self.WIDTHS
        self.conv1 = conv_bn_act(3, w[0], 3, 2, act=nn.ReLU)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], w[0]
        for n, cout in zip(self.REPEATS, w[1:4]):
            stages.append(nn.Sequential(ShuffleUnit(cin, cout, 2), *[ShuffleUnit(cout, cout, 1) for _ in range(n - 1)]))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = conv_bn_act(cin, w[4], 1, act=nn.ReLU)
        self.fc = nn.Linear(w[4], num_classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


def shufflenet_v2_x1_0(batch_size: int):
    return ShuffleNetV2(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)
