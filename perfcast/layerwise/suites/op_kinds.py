"""Operator kinds the zoo lacks, as one torch module the data engine can collect (`file.py:factory`).

    perfcast collect --network perfcast/layerwise/suites/op_kinds.py:op_kinds --device local \
        --programs-per-task 64 --out perfcast/data/bundled

The eighteen zoo networks cover convolutions, dense layers, LayerNorm at a few widths, attention softmaxes and
elementwise chains; a user's operator is often none of those. Each branch below is one independent kernel on its
own input (so fusion does not merge them): LayerNorm at widths no zoo network has, a softmax over channels,
means over a middle axis, variance, L1 sums, an argmax, resampling (transposed convolution, nearest and bilinear
upsampling, pixel shuffle, average and adaptive pooling), padding and layout changes, activations the zoo does not
use, SwiGLU and an odd-sized dense layer: 31 tasks at batch size 1. Three branches add no task of their own, as
TVM 0.27 imports them: `max(dim)` becomes `topk` and `cumsum` a library call (neither is a tunable kernel), so
the spatial-attention branch gives its mean and concatenation and the global max pooling its reshape. Left out
on purpose, so `bench/outside_zoo.py` keeps measuring operators no training program resembles: RMS / L2
normalisation, GroupNorm and InstanceNorm, softmax over a row, max pooling, GELU, and grouped, dilated, 1-D and
3-D convolutions, batched matmuls and attention.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class OpKinds(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln96, self.ln320 = nn.LayerNorm(96), nn.LayerNorm(320)  # Swin stage 1 (56 x 56 tokens), MobileViT
        self.ln1024, self.ln4096 = nn.LayerNorm(1024), nn.LayerNorm(4096)  # BERT-large, a 4,096-wide LLM
        self.up = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1)  # a decoder's 2x upsampling (14 -> 28)
        self.stem = nn.Conv2d(3, 24, 5, stride=2, padding=2)  # a 5x5 stride-2 stem
        self.odd = nn.Linear(300, 200)  # a dense layer with widths no zoo network has
        self.gate, self.value = nn.Linear(512, 1376, bias=False), nn.Linear(512, 1376, bias=False)  # SwiGLU
        self.emb = nn.Embedding(5000, 128)

    def forward(self, tok96, tok320, tok1024, tok4096, seg, fmap, seq, rows500, rows300, rows512, logits,
                deep, dec, up_n, up_b, pool, adapt, shuf, pad, act128, act256, act64, swi, odd, nhwc, img, ids):
        return (
            self.ln96(tok96), self.ln320(tok320), self.ln1024(tok1024), self.ln4096(tok4096),
            torch.softmax(seg, dim=1),  # per-pixel class softmax of a segmentation head: a strided reduction
            torch.cat([fmap.mean(dim=1, keepdim=True), fmap.max(dim=1, keepdim=True).values], dim=1),  # CBAM
            seq.mean(dim=1),  # sequence mean pooling: reduces the middle axis
            torch.var(rows500, dim=-1),  # two-pass statistics
            rows300.abs().sum(dim=-1),  # L1 of each row
            torch.cumsum(rows512, dim=1),  # a scan: a library call in TVM 0.27, no task
            torch.argmax(logits, dim=-1),  # int64 result
            deep.flatten(2).max(dim=2).values,  # global max pooling: only its reshape is a task (max -> topk)
            self.up(dec),
            F.interpolate(up_n, scale_factor=2, mode="nearest"),
            F.interpolate(up_b, scale_factor=2, mode="bilinear", align_corners=False),
            F.avg_pool2d(pool, 3, stride=2, padding=1),
            F.adaptive_avg_pool2d(adapt, 7),
            F.pixel_shuffle(shuf, 2),
            F.pad(pad, (3, 3, 3, 3)),
            F.mish(act128), F.elu(act256), F.leaky_relu(act64, 0.1),
            F.silu(self.gate(swi)) * self.value(swi),
            torch.tanh(self.odd(odd)),
            nhwc.permute(0, 3, 1, 2).contiguous(),  # NHWC -> NCHW
            torch.relu(self.stem(img)),
            self.emb(ids),
        )


def op_kinds(batch_size: int):
    """The module and its example inputs; `batch_size` scales every input's leading dimension."""
    b = batch_size
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    inputs = (r(b, 3136, 96), r(b, 64, 320), r(b, 32, 1024), r(b, 8, 4096), r(b, 21, 64, 64), r(b, 64, 56, 56),
              r(b, 50, 384), r(b * 64, 500), r(b * 100, 300), r(b * 32, 512), r(b * 64, 1000), r(b, 512, 7, 7),
              r(b, 64, 14, 14), r(b, 64, 28, 28), r(b, 32, 40, 40), r(b, 96, 35, 35), r(b, 256, 14, 14),
              r(b, 64, 16, 16), r(b, 32, 64, 64), r(b, 128, 28, 28), r(b, 256, 14, 14), r(b, 64, 56, 56),
              r(b * 16, 512), r(b * 50, 300), r(b, 56, 56, 96), r(b, 3, 128, 128),
              torch.randint(0, 5000, (b, 200), generator=g))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        module = OpKinds().eval()
    return module, inputs
