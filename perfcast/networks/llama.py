"""Llama-architecture decoders (Touvron et al., "LLaMA: Open and Efficient Foundation Language Models", 2023) as
Hugging Face `LlamaForCausalLM`, inference only: token embedding, pre-RMSNorm blocks (eps 1e-5), causal
self-attention with rotary position embeddings (theta 10,000, rotate-half form) and grouped-query attention (key /
value heads repeated to the query heads), a SiLU-gated MLP (down(silu(gate(x)) * up(x))), final RMSNorm and an LM
head tied to the embedding. Attention is written as plain matmul / masked softmax (no fused SDPA kernel, so TVM
imports it); the rotary cos / sin tables are precomputed buffers. Input: int64 token ids (batch, seq); output:
logits (batch, seq, vocab).

`smollm_135m`: HuggingFaceTB/SmolLM-135M, 30 layers, 576 wide, 9 query / 3 key-value heads of 64, MLP 1536, vocab
49152, run at seq 128. It is the zoo's network of RMSNorm, rotary embeddings, gated SiLU MLPs and grouped-query
attention, the layer types of today's LLMs that the zoo's BERT / GPT-2 / ViT (LayerNorm, GELU) do not have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SEQ_LEN = 128


@dataclass(frozen=True)
class LlamaConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    positions: int = 2048
    theta: float = 10_000.0
    eps: float = 1e-5


SMOLLM_135M = LlamaConfig(layers=30, hidden=576, heads=9, kv_heads=3, intermediate=1536, vocab=49152)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.heads, c.kv_heads, c.hidden // c.heads
        self.q_proj = nn.Linear(c.hidden, c.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * self.head_dim, c.hidden, bias=False)

    def forward(self, x, cos, sin, mask):  # x: (b, t, hidden); cos, sin: (t, head_dim); mask: (t, t) bool
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (b, heads, t, d)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)  # (b, kv_heads, t, d)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        groups = self.heads // self.kv_heads  # grouped-query attention: each key / value head serves `groups`
        k = k[:, :, None].expand(b, self.kv_heads, groups, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
        v = v[:, :, None].expand(b, self.kv_heads, groups, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (b, heads, t, t)
        w = torch.softmax(torch.where(mask, w, torch.finfo(w.dtype).min), dim=-1)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.eps)
        head_dim = c.hidden // c.heads
        inv_freq = 1.0 / c.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(c.positions, dtype=torch.float32), inv_freq)  # (positions, head_dim / 2)
        angles = torch.cat((angles, angles), dim=-1)  # (positions, head_dim)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        mask = torch.tril(torch.ones(c.positions, c.positions, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, input_ids):  # (batch, seq) int64
        t = input_ids.shape[1]
        cos, sin, mask = self.cos[:t], self.sin[:t], self.mask[:t, :t]
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return F.linear(self.norm(x), self.embed_tokens.weight)  # LM head tied to the embedding


def smollm_135m(batch_size: int):
    return LlamaForCausalLM(SMOLLM_135M), (torch.randint(0, SMOLLM_135M.vocab, (batch_size, SEQ_LEN)),)
