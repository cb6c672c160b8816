"""GPT-2 decoders (Radford et al., 2019, "Language Models are Unsupervised Multitask Learners") as Hugging Face
`GPT2LMHeadModel`, inference only: token + learned position embeddings, pre-LayerNorm blocks (eps 1e-5), causal
self-attention written as plain matmul / masked softmax (no fused SDPA kernel, so TVM imports it), tanh-GELU
("gelu_new"), final LayerNorm and an LM head tied to the token embedding. `Conv1D` layers are `nn.Linear` (same
parameters, transposed storage). Input: int64 token ids (batch, seq); output: logits (batch, seq, vocab).

`gpt2`: GPT-2 small, 12 layers, 768 wide, 12 heads, vocab 50257, context 1024, run at seq 128.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SEQ_LEN = 128


@dataclass(frozen=True)
class GPT2Config:
    layers: int
    hidden: int
    heads: int
    vocab: int = 50257
    positions: int = 1024
    eps: float = 1e-5


GPT2_SMALL = GPT2Config(layers=12, hidden=768, heads=12)


class CausalSelfAttention(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.hidden // c.heads
        self.c_attn = nn.Linear(c.hidden, 3 * c.hidden)
        self.c_proj = nn.Linear(c.hidden, c.hidden)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        mask = torch.tril(torch.ones(c.positions, c.positions, dtype=torch.bool)).view(1, 1, c.positions, c.positions)
        self.register_buffer("bias", mask, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, self.head_dim).transpose(1, 2) for y in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        w = torch.where(self.bias[:, :, :t, :t], w, torch.finfo(w.dtype).min)
        w = self.attn_dropout(torch.softmax(w, dim=-1))
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(c.hidden, 4 * c.hidden)
        self.c_proj = nn.Linear(4 * c.hidden, c.hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHead(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.hidden)
        self.wpe = nn.Embedding(c.positions, c.hidden)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.hidden, eps=c.eps)
        self.register_buffer("position_ids", torch.arange(c.positions).unsqueeze(0), persistent=False)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        x = self.drop(self.wte(input_ids) + self.wpe(self.position_ids[:, :t]))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # LM head tied to the token embedding


def _build(c: GPT2Config, batch_size: int):
    return GPT2LMHead(c), (torch.randint(0, c.vocab, (batch_size, SEQ_LEN), dtype=torch.long),)


def gpt2(batch_size: int):
    return _build(GPT2_SMALL, batch_size)
