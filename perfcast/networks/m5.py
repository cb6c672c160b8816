"""M5, the 5-layer 1-D CNN on raw audio waveforms of Dai et al., "Very Deep Convolutional Neural Networks for Raw
Waveforms", ICASSP 2017, Table 1: conv [80/4, 128] - maxpool 4 - conv [3, 128] - maxpool 4 - conv [3, 256] -
maxpool 4 - conv [3, 512] - maxpool 4 - global average pooling - softmax over the 10 UrbanSound8k classes; batch
normalization and ReLU after every convolution. Input: 4 s of 8 kHz audio, (batch, 1, 32000). The paper lists
"0.5M" parameters; with conv biases this module has 559,114 (tests/test_networks.py does the sum by hand).

It is the zoo's one network of 1-D convolutions (TVM's conv1d tasks), a layer type that speech and sensor models use
and that no 2-D CNN or Transformer of the zoo produces. (Relax lowers its 1-D max-pooling to expand_dims + max_pool2d
+ squeeze, so that part arrives as 2-D pooling tasks.)
"""

from __future__ import annotations

import torch
from torch import nn

SAMPLES = 32_000  # 4 s at 8 kHz
CHANNELS = (128, 128, 256, 512)


class M5(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 1
        for i, c_out in enumerate(CHANNELS):
            conv = nn.Conv1d(c_in, c_out, 80, stride=4, padding=38) if i == 0 else nn.Conv1d(c_in, c_out, 3, padding=1)
            layers += [conv, nn.BatchNorm1d(c_out), nn.ReLU(), nn.MaxPool1d(4)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x):  # x: (batch, 1, 32000)
        x = self.features(x)  # (batch, 512, 31)
        return self.fc(x.mean(-1))  # global average pooling -> (batch, 10) logits


def m5(batch_size: int):
    return M5(), (torch.randn(batch_size, 1, SAMPLES),)
