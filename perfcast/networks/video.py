"""R3D-18, the 3-D ResNet-18 for video of Tran et al., "A Closer Look at Spatiotemporal Convolutions for Action
Recognition", CVPR 2018, layer for layer as torchvision's `models.video.r3d_18`: a (3, 7, 7) stem of stride (1, 2, 2),
four stages of two BasicBlocks of 3x3x3 convolutions (64-128-256-512 channels, stages 2-4 stride 2 in time and
space, 1x1x1 projection shortcuts), BatchNorm3d and ReLU, global average pooling and a 400-way Kinetics classifier.

It is the zoo's network of 3-D convolutions (TVM's conv3d tasks) and 3-D batch norm and pooling, the layer types of
video and volumetric models that no 2-D CNN, 1-D CNN or Transformer of the zoo produces. Input: a clip of 8 RGB
frames at 112x112 (torchvision's Kinetics recipe crops 112x112; its clips have 16 frames, halved here so that the
largest convolutions, 5.5 GFLOP each at batch 1, stay measurable on a 2-core CPU; the parameters do not depend on
the clip length).
"""

from __future__ import annotations

import torch
from torch import nn

FRAMES, IMAGE = 8, 112


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Conv3d:
    return nn.Conv3d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock3d(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Sequential(_conv(cin, planes, stride), nn.BatchNorm3d(planes), nn.ReLU())
        self.conv2 = nn.Sequential(_conv(planes, planes), nn.BatchNorm3d(planes))
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv3d(cin, planes, 1, stride=stride, bias=False),
                                            nn.BatchNorm3d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv2(self.conv1(x)) + identity)


class R3D(nn.Module):
    def __init__(self, layers: tuple[int, ...] = (2, 2, 2, 2), num_classes: int = 400):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 64, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
                                  nn.BatchNorm3d(64), nn.ReLU())
        stages, cin = [], 64
        for i, (blocks, planes) in enumerate(zip(layers, (64, 128, 256, 512))):
            stride = 1 if i == 0 else 2
            stage = [BasicBlock3d(cin, planes, stride)] + [BasicBlock3d(planes, planes) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
            cin = planes
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):  # x: (batch, 3, 8, 112, 112)
        x = self.layers(self.stem(x))  # (batch, 512, 1, 7, 7)
        return self.fc(self.avgpool(x).flatten(1))  # (batch, 400) logits


def r3d_18(batch_size: int):
    return R3D(), (torch.randn(batch_size, 3, FRAMES, IMAGE, IMAGE),)
