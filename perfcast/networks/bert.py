"""BERT encoders (Devlin et al., NAACL 2019) as Hugging Face `BertModel` (embeddings + encoder + pooler), inference
only: token + position + token-type embeddings, post-LayerNorm (eps 1e-12), exact (erf) GELU, plain
matmul/softmax attention. The input is int64 token ids (batch, seq); token types are all 0 and there is no padding
mask (every token attends to every token), as for a full-length sequence.

Output: (last_hidden_state (batch, seq, hidden), pooled_output (batch, hidden)), like `BertModel`.

- `bert_base`: 12 layers, hidden 768, 12 heads, intermediate 3072 (bert-base-uncased).
- `bert_tiny`: 2 layers, hidden 128, 2 heads, intermediate 512 (google/bert_uncased_L-2_H-128_A-2, Turc et al.
  2019, "Well-Read Students Learn Better"; the HF mirror prajjwal1/bert-tiny).
- `bert_mini`: 4 layers, hidden 256, 4 heads, intermediate 1024 (google/bert_uncased_L-4_H-256_A-4;
  prajjwal1/bert-mini).
- `bert_small`: 4 layers, hidden 512, 8 heads, intermediate 2048 (google/bert_uncased_L-4_H-512_A-8;
  prajjwal1/bert-small).
The miniatures all use head size 64 and intermediate = 4 x hidden, like BERT-Base.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SEQ_LEN = 128


@dataclass(frozen=True)
class BertConfig:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int = 30522
    max_positions: int = 512
    type_vocab: int = 2
    eps: float = 1e-12


BERT_BASE = BertConfig(layers=12, hidden=768, heads=12, intermediate=3072)
BERT_TINY = BertConfig(layers=2, hidden=128, heads=2, intermediate=512)
BERT_MINI = BertConfig(layers=4, hidden=256, heads=4, intermediate=1024)
BERT_SMALL = BertConfig(layers=4, hidden=512, heads=8, intermediate=2048)


class BertEmbeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab, c.hidden)
        self.position_embeddings = nn.Embedding(c.max_positions, c.hidden)
        self.token_type_embeddings = nn.Embedding(c.type_vocab, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.eps)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(c.max_positions).unsqueeze(0), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, c.max_positions, dtype=torch.long), persistent=False)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(self.token_type_ids[:, :seq])
             + self.position_embeddings(self.position_ids[:, :seq]))
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.hidden // c.heads
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.dropout = nn.Dropout(0.1)

    def _split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        return torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, t, c)


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(c)
        self.attention_output = nn.Linear(c.hidden, c.hidden)
        self.attention_norm = nn.LayerNorm(c.hidden, eps=c.eps)
        self.intermediate = nn.Linear(c.hidden, c.intermediate)
        self.output = nn.Linear(c.intermediate, c.hidden)
        self.output_norm = nn.LayerNorm(c.hidden, eps=c.eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = self.attention_norm(x + self.dropout(self.attention_output(self.attention(x))))
        h = F.gelu(self.intermediate(x))
        return self.output_norm(x + self.dropout(self.output(h)))


class BertModel(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c.layers))
        self.pooler = nn.Linear(c.hidden, c.hidden)

    def forward(self, input_ids):
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


def _build(c: BertConfig, batch_size: int):
    return BertModel(c), (torch.randint(0, c.vocab, (batch_size, SEQ_LEN), dtype=torch.long),)


def bert_base(batch_size: int):
    return _build(BERT_BASE, batch_size)


def bert_tiny(batch_size: int):
    return _build(BERT_TINY, batch_size)


def bert_mini(batch_size: int):
    return _build(BERT_MINI, batch_size)


def bert_small(batch_size: int):
    return _build(BERT_SMALL, batch_size)
