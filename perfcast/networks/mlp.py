"""A multilayer perceptron for MNIST: 784-512-512-10, ReLU, dropout 0.2 (identity at inference).

This is the Keras example `mnist_mlp.py` (keras-team/keras, examples/mnist_mlp.py; "Total params: 669,706").
"""

from __future__ import annotations

import torch
from torch import nn

SIZES = (784, 512, 512, 10)


class MLP(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = SIZES, dropout: float = 0.2):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers += [nn.ReLU(), nn.Dropout(dropout)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def mlp(batch_size: int):
    return MLP(), (torch.randn(batch_size, SIZES[0]),)
