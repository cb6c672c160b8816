"""Mobile CNNs, layer for layer as torchvision's reference implementations:

- MobileNetV2 (Sandler et al., CVPR 2018), width 1.0;
- MobileNetV3-Small and -Large (Howard et al., ICCV 2019), width 1.0 (BatchNorm eps 0.001, hard-swish /
  hard-sigmoid);
- MnasNet-A1 1.0 (Tan et al., CVPR 2019) as torchvision's `mnasnet1_0` (no squeeze-excitation);
- EfficientNet-B0 (Tan & Le, ICML 2019): MBConv blocks with SiLU and squeeze-excitation (squeeze = block input / 4).
"""

from __future__ import annotations

import torch
from torch import nn

IMAGE = 224


def _make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def conv_bn_act(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
                act: type[nn.Module] | None = nn.ReLU6, eps: float = 1e-5) -> nn.Sequential:
    """Conv2d (no bias, 'same' padding for odd k) + BatchNorm2d (+ `act`): the block torchvision's MobileNets,
    EfficientNet, RegNet and ShuffleNetV2 are built of (regnet.py and shufflenet.py import it)."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- MobileNetV2

class InvertedResidualV2(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(conv_bn_act(cin, hidden, 1))
        layers += [conv_bn_act(hidden, hidden, 3, stride, groups=hidden), conv_bn_act(hidden, cout, 1, act=None)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    # t (expansion), c (channels), n (repeats), s (first stride): Table 2 of the paper
    SETTINGS = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                [6, 320, 1, 1]]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        cin, last = 32, 1280
        layers: list[nn.Module] = [conv_bn_act(3, cin, 3, 2)]
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidualV2(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn_act(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ---------------------------------------------------------------- MobileNetV3-Small / -Large

class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int, act: type[nn.Module] = nn.ReLU,
                 scale: type[nn.Module] = nn.Hardsigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.relu = act()
        self.scale_activation = scale()

    def forward(self, x):
        return x * self.scale_activation(self.fc2(self.relu(self.fc1(self.avgpool(x)))))


class InvertedResidualV3(nn.Module):
    def __init__(self, cin: int, k: int, expanded: int, cout: int, use_se: bool, act: str, stride: int):
        super().__init__()
        act_layer = nn.Hardswish if act == "HS" else nn.ReLU
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn_act(cin, expanded, 1, act=act_layer, eps=1e-3))
        layers.append(conv_bn_act(expanded, expanded, k, stride, groups=expanded, act=act_layer, eps=1e-3))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4, 8)))
        layers.append(conv_bn_act(expanded, cout, 1, act=None, eps=1e-3))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.use_res_connect else self.block(x)


class MobileNetV3Small(nn.Module):
    # input, kernel, expanded, output, SE, activation, stride: Table 2 of the paper
    SETTINGS = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
                (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
                (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1), (48, 5, 288, 96, True, "HS", 2),
                (96, 5, 576, 96, True, "HS", 1), (96, 5, 576, 96, True, "HS", 1)]
    LAST_CHANNEL = 1024

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        cout = self.SETTINGS[-1][3]
        last_conv = 6 * cout  # torchvision: the last 1x1 conv widens the last block's output 6x
        layers: list[nn.Module] = [conv_bn_act(3, 16, 3, 2, act=nn.Hardswish, eps=1e-3)]
        layers += [InvertedResidualV3(*s) for s in self.SETTINGS]
        layers.append(conv_bn_act(cout, last_conv, 1, act=nn.Hardswish, eps=1e-3))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(last_conv, self.LAST_CHANNEL), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(self.LAST_CHANNEL, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class MobileNetV3Large(MobileNetV3Small):
    # input, kernel, expanded, output, SE, activation, stride: Table 1 of the paper
    SETTINGS = [(16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2), (24, 3, 72, 24, False, "RE", 1),
                (24, 5, 72, 40, True, "RE", 2), (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
                (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
                (80, 3, 184, 80, False, "HS", 1), (80, 3, 480, 112, True, "HS", 1),
                (112, 3, 672, 112, True, "HS", 1), (112, 5, 672, 160, True, "HS", 2),
                (160, 5, 960, 160, True, "HS", 1), (160, 5, 960, 160, True, "HS", 1)]
    LAST_CHANNEL = 1280


# ---------------------------------------------------------------- MnasNet 1.0

class InvertedResidualMnas(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expansion: int):
        super().__init__()
        mid = cin * expansion
        self.apply_residual = cin == cout and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid, momentum=0.0003), nn.ReLU(),
            nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False), nn.BatchNorm2d(mid, momentum=0.0003),
            nn.ReLU(),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout, momentum=0.0003),
        )

    def forward(self, x):
        return self.layers(x) + x if self.apply_residual else self.layers(x)


def _mnas_stack(cin: int, cout: int, k: int, stride: int, expansion: int, repeats: int) -> nn.Sequential:
    blocks = [InvertedResidualMnas(cin, cout, k, stride, expansion)]
    blocks += [InvertedResidualMnas(cout, cout, k, 1, expansion) for _ in range(1, repeats)]
    return nn.Sequential(*blocks)


class MNASNet(nn.Module):
    DEPTHS = [32, 16, 24, 40, 80, 96, 192, 320]  # width multiplier 1.0

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        d = self.DEPTHS
        bn = dict(momentum=0.0003)
        self.layers = nn.Sequential(
            nn.Conv2d(3, d[0], 3, padding=1, stride=2, bias=False), nn.BatchNorm2d(d[0], **bn), nn.ReLU(),
            nn.Conv2d(d[0], d[0], 3, padding=1, groups=d[0], bias=False), nn.BatchNorm2d(d[0], **bn), nn.ReLU(),
            nn.Conv2d(d[0], d[1], 1, bias=False), nn.BatchNorm2d(d[1], **bn),
            _mnas_stack(d[1], d[2], 3, 2, 3, 3),
            _mnas_stack(d[2], d[3], 5, 2, 3, 3),
            _mnas_stack(d[3], d[4], 5, 2, 6, 3),
            _mnas_stack(d[4], d[5], 3, 1, 6, 2),
            _mnas_stack(d[5], d[6], 5, 2, 6, 4),
            _mnas_stack(d[6], d[7], 3, 1, 6, 1),
            nn.Conv2d(d[7], 1280, 1, bias=False), nn.BatchNorm2d(1280, **bn), nn.ReLU(),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


# ---------------------------------------------------------------- EfficientNet-B0

class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expand_ratio: int):
        super().__init__()
        expanded = _make_divisible(cin * expand_ratio, 8)
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn_act(cin, expanded, 1, act=nn.SiLU))
        layers += [conv_bn_act(expanded, expanded, k, stride, groups=expanded, act=nn.SiLU),
                   SqueezeExcitation(expanded, max(1, cin // 4), act=nn.SiLU, scale=nn.Sigmoid),
                   conv_bn_act(expanded, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):  # stochastic depth is the identity in inference
        return x + self.block(x) if self.use_res_connect else self.block(x)


class EfficientNetB0(nn.Module):
    # expansion, kernel, stride, input, output, repeats: Table 1 of the paper (width and depth 1.0)
    SETTINGS = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [conv_bn_act(3, 32, 3, 2, act=nn.SiLU)]
        for t, k, s, cin, cout, n in self.SETTINGS:
            layers += [MBConv(cin if i == 0 else cout, cout, k, s if i == 0 else 1, t) for i in range(n)]
        layers.append(conv_bn_act(self.SETTINGS[-1][4], 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v2(batch_size: int):
    return MobileNetV2(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)


def mobilenet_v3_small(batch_size: int):
    return MobileNetV3Small(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)


def mnasnet1_0(batch_size: int):
    return MNASNet(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)


def mobilenet_v3_large(batch_size: int):
    return MobileNetV3Large(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)


def efficientnet_b0(batch_size: int):
    return EfficientNetB0(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)
