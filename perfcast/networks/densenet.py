"""DenseNet-121 (Huang et al., CVPR 2017): growth rate 32, blocks (6, 12, 24, 16), bottleneck 4x, compression
0.5, as torchvision's `densenet121` (without its memory-efficient checkpointing)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IMAGE = 224


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list):
        x = torch.cat(features, 1)
        return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, cin: int, growth: int, bn_size: int):
        super().__init__({f"denselayer{i + 1}": DenseLayer(cin + i * growth, growth, bn_size)
                          for i in range(num_layers)})

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.relu = nn.ReLU()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.pool = nn.AvgPool2d(2, stride=2)


class DenseNet(nn.Module):
    def __init__(self, growth: int = 32, blocks: tuple = (6, 12, 24, 16), init_features: int = 64,
                 bn_size: int = 4, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("conv0", nn.Conv2d(3, init_features, 7, stride=2, padding=3, bias=False))
        self.features.add_module("norm0", nn.BatchNorm2d(init_features))
        self.features.add_module("relu0", nn.ReLU())
        self.features.add_module("pool0", nn.MaxPool2d(3, stride=2, padding=1))
        n = init_features
        for i, num_layers in enumerate(blocks):
            self.features.add_module(f"denseblock{i + 1}", DenseBlock(num_layers, n, growth, bn_size))
            n += num_layers * growth
            if i != len(blocks) - 1:
                self.features.add_module(f"transition{i + 1}", Transition(n, n // 2))
                n //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(n))
        self.classifier = nn.Linear(n, num_classes)

    def forward(self, x):
        x = F.relu(self.features(x))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


def densenet121(batch_size: int):
    return DenseNet(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)
