"""The Conformer encoder of Gulati et al., "Conformer: Convolution-augmented Transformer for Speech Recognition",
Interspeech 2020, in its small configuration (Conformer-S, Table 1: 16 blocks, dim 144, 4 attention heads), inference
only, as ESPnet / torchaudio (`torchaudio.models.Conformer`) build it: a convolutional subsampling front end (two 3x3
stride-2 Conv2d + ReLU over the 80-bin log-mel spectrogram, then a Linear to dim 144), then per block a half-step
feed-forward module (LayerNorm, Linear 144 -> 576, SiLU, Linear back), multi-head self-attention, the convolution
module (LayerNorm, pointwise Conv1d to 288 channels, GLU, depthwise Conv1d of kernel 31 (ESPnet's and torchaudio's
odd kernel for the paper's 32), BatchNorm1d, SiLU, pointwise Conv1d), a second half-step feed-forward module and a
LayerNorm. Attention is written as plain matmul / softmax with absolute positions (torchaudio's form; the paper's
relative positional encoding is left out). No decoder: the output is the encoded frames.

It is the zoo's network of 1-D depthwise convolutions, gated linear units and SiLU, the layer types of speech models
that the zoo's M5 (dense 1-D convolutions) and Transformers do not have. Input: 10 s of 80-bin log-mel frames every
10 ms, (batch, 1000, 80); output (batch, 249, 144).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

FRAMES, MELS = 1000, 80


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(self.norm(x))))


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm = nn.LayerNorm(dim)
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x):  # (b, t, dim)
        b, t, c = x.shape
        q, k, v = self.in_proj(self.norm(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, self.head_dim).transpose(1, 2) for y in (q, k, v))  # (b, heads, t, d)
        w = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim), dim=-1)
        return self.out_proj(torch.matmul(w, v).transpose(1, 2).reshape(b, t, c))


class ConvModule(nn.Module):
    def __init__(self, dim: int, kernel: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pointwise1 = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.pointwise2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x):  # (b, t, dim)
        y = self.pointwise1(self.norm(x).transpose(1, 2))  # (b, 2 dim, t)
        y = F.silu(self.bn(self.depthwise(F.glu(y, dim=1))))  # (b, dim, t)
        return self.pointwise2(y).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, kernel: int):
        super().__init__()
        self.ffn1, self.ffn2 = FeedForward(dim, ffn), FeedForward(dim, ffn)
        self.attn = SelfAttention(dim, heads)
        self.conv = ConvModule(dim, kernel)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = x + 0.5 * self.ffn1(x)
        x = x + self.attn(x)
        x = x + self.conv(x)
        return self.norm(x + 0.5 * self.ffn2(x))


class ConformerEncoder(nn.Module):
    def __init__(self, dim: int = 144, layers: int = 16, heads: int = 4, kernel: int = 31, mels: int = MELS):
        super().__init__()
        self.subsample = nn.Sequential(nn.Conv2d(1, dim, 3, stride=2), nn.ReLU(),
                                       nn.Conv2d(dim, dim, 3, stride=2), nn.ReLU())
        self.proj = nn.Linear(dim * (((mels - 1) // 2 - 1) // 2), dim)
        self.blocks = nn.Sequential(*(ConformerBlock(dim, heads, 4 * dim, kernel) for _ in range(layers)))

    def forward(self, x):  # x: (batch, frames, mels)
        y = self.subsample(x.unsqueeze(1))  # (batch, dim, frames', mels')
        b, c, t, f = y.shape
        y = self.proj(y.transpose(1, 2).reshape(b, t, c * f))  # (batch, frames', dim)
        return self.blocks(y)


def conformer_s(batch_size: int):
    return ConformerEncoder(), (torch.randn(batch_size, FRAMES, MELS),)
