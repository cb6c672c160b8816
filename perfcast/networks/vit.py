"""Vision Transformer ViT-Ti/16 at 224x224 (Dosovitskiy et al., ICLR 2021; the "Ti" size from Touvron et al.,
DeiT, ICML 2021), as timm's `vit_tiny_patch16_224`: dim 192, depth 12, 3 heads, MLP 768, class token + learned
position embedding, pre-LayerNorm (eps 1e-6), exact GELU, plain matmul/softmax attention, class-token head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IMAGE = 224


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.softmax(torch.matmul(q * self.scale, k.transpose(-2, -1)), dim=-1)
        return self.proj(torch.matmul(attn, v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VisionTransformer(nn.Module):
    def __init__(self, image: int = IMAGE, patch: int = 16, dim: int = 192, depth: int = 12, heads: int = 3,
                 mlp: int = 768, num_classes: int = 1000):
        super().__init__()
        num_patches = (image // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def vit_tiny(batch_size: int):
    return VisionTransformer(), (torch.randn(batch_size, 3, IMAGE, IMAGE),)
