"""CDMPP's predictor (Hu et al., "CDMPP: A Device-Model Agnostic Framework for Latency Prediction of Tensor
Programs", EuroSys'24, §4-5 and Fig. 4).

    compact AST leaves (L, 50) --standardize, + positional encoding of the ordering vector (Θ = 10000)-->
    Linear(50 -> d) --> Transformer encoder (layers x heads) --> h (L, d)
    z_x = Linear_L(flatten h)        one linear layer per leaf count L seen in training (no padding)
        + Linear(d -> z)(mean h)     a shared path, so leaf counts never seen in training still get a z_x
    z_v = MLP(device features (11))
    z   = z_x * (1 + z_v)            CDMPP's z_x ⊗ z_v, with a residual 1 so a zero z_v is the identity
    y^  = decoder MLP(z)             a standardized transformed latency (see perfcast.models.targets)

During training the leaf-count path is dropped for a random `head_dropout` share of each batch's programs, so that
the shared path alone also predicts well (it is all a program with a new leaf count gets). `use_pe=False` is the
paper's "w/o PE" ablation (Fig. 14a). `use_analytic=True` (a perfcast extension, off by default) adds an MLP
of the program-level static figures (FLOPs, bytes, trip counts) to z_x; `use_asm=True` adds the 55 assembly
features (`perfcast.features.asm`: what LLVM made of the program) to that MLP's input.
`leaf_features="per_store"` uses TVM's 164-d per-store (Ansor) feature rows as the leaf sequence instead of the 50-d
compact-AST vectors (CDMPP builds its leaf vectors on Ansor's statement features), with the positional encoding of
the rows' order;
`leaf_features="compact_base"` keeps the compact AST's first 32 columns: without the 12 access-signature and the 6
per-store cache columns (an ablation of those perfcast additions).
"""

from __future__ import annotations

import numpy as np

from ..features.compact_ast import D as LEAF_DIM
from ..features.compact_ast import D_BASE
from ..features.compact_ast import positional_encoding
from ..features.per_store import N_PER_STORE
from ..errors import PerfcastError
from ._torch import Standardizer, TorchCostModel
from .base import register


def build_net(d_model: int, heads: int, layers: int, z_dim: int, decoder_hidden: int, decoder_layers: int,
              leaf_counts: list[int], n_device: int, n_analytic: int, head_dropout: float, dropout: float,
              in_dim: int = LEAF_DIM):
    import torch
    from torch import nn

    class CDMPPNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(in_dim, d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=dropout,
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.shared = nn.Linear(d_model, z_dim)
            self.per_leaf = nn.ModuleDict({str(L): nn.Linear(L * d_model, z_dim) for L in leaf_counts})
            self.device_mlp = nn.Sequential(nn.Linear(n_device, z_dim), nn.ReLU(), nn.Linear(z_dim, z_dim))
            self.analytic_mlp = (nn.Sequential(nn.Linear(n_analytic, z_dim), nn.ReLU(), nn.Linear(z_dim, z_dim))
                                 if n_analytic else None)
            dec, width = [], z_dim
            for _ in range(decoder_layers):
                dec += [nn.Linear(width, decoder_hidden), nn.ReLU()]
                width = decoder_hidden
            self.decoder = nn.Sequential(*dec, nn.Linear(width, 1))

        def encode(self, seq, vec):
            # seq: (B, L, in_dim) standardized leaves (+ PE); vec: (B, n_device + n_analytic [+ 55 asm])
            B, L, _ = seq.shape
            h = self.encoder(self.embed(seq))  # (B, L, d)
            zx = self.shared(h.mean(dim=1))  # (B, z)
            head = self.per_leaf[str(L)] if str(L) in self.per_leaf else None
            if head is not None:
                zl = head(h.reshape(B, L * h.shape[-1]))  # (B, z)
                if self.training and head_dropout > 0:
                    zl = zl * (torch.rand(B, 1) >= head_dropout).to(zl.dtype)
                zx = zx + zl
            if self.analytic_mlp is not None:
                zx = zx + self.analytic_mlp(vec[:, n_device:])
            zv = self.device_mlp(vec[:, :n_device])  # (B, z)
            return zx * (1 + zv)  # (B, z)

        def decode(self, z):
            return self.decoder(z).squeeze(-1)  # (B, z) -> (B,)

        def forward(self, seq, vec):
            return self.decode(self.encode(seq, vec))  # (B,)

    return CDMPPNet()


@register
class CDMPPModel(TorchCostModel):
    """CDMPP compact-AST Transformer with device features; see the module docstring for the architecture."""

    name = "cdmpp"
    ARCH_DEFAULTS = dict(d_model=64, heads=4, layers=2, z_dim=128, decoder_hidden=256, decoder_layers=2,
                         head_dropout=0.2, dropout=0.0, use_pe=True, use_analytic=False, use_asm=False,
                         leaf_features="compact")

    @property
    def needs_asm(self) -> bool:
        return bool(self.params["use_asm"])

    def _leaves(self, X) -> tuple[list, list, int]:
        """(per-program leaf rows, their ordering vectors, row width) for the chosen `leaf_features`."""
        X = self._view(X)
        if self.params["leaf_features"] == "compact":
            return X.leaves, X.ordering, X.leaf_dim
        if self.params["leaf_features"] == "compact_base":  # ablation: without the access-signature columns
            return [a[:, :D_BASE] for a in X.leaves], X.ordering, D_BASE
        if self.params["leaf_features"] == "per_store":
            return X.stores, [np.arange(len(s), dtype=np.int32) for s in X.stores], N_PER_STORE
        raise PerfcastError(f"leaf_features={self.params['leaf_features']!r} is not one of compact, compact_base, "
                             "per_store")

    def _fit_inputs(self, X) -> None:
        rows, _, width = self._leaves(X)
        X = self._view(X)
        self.leaf_norm_ = Standardizer().fit(np.concatenate(rows) if len(X) else np.zeros((0, width)))
        self.device_norm_ = Standardizer().fit(X.device)
        self.analytic_norm_ = Standardizer().fit(X.analytic)
        self.asm_norm_ = Standardizer().fit(X.require_asm()) if self.params["use_asm"] else None
        self.leaf_counts_ = sorted({max(1, len(a)) for a in rows})

    def _inputs(self, X):
        seqs = []
        rows, orders, width = self._leaves(X)
        for leaves, order in zip(rows, orders):
            if len(leaves) == 0:  # a program without stores: one all-zero leaf
                leaves, order = np.zeros((1, width), np.float32), np.zeros(1, np.int32)
            s = self.leaf_norm_(leaves)
            if self.params["use_pe"]:
                s = s + positional_encoding(order, width).astype(np.float32)
            seqs.append(s)
        vec = self.device_norm_(X.device)
        if self.params["use_analytic"]:
            vec = np.concatenate([vec, self.analytic_norm_(self._view(X).analytic)], axis=1)
        if self.params["use_asm"]:
            vec = np.concatenate([vec, self.asm_norm_(X.require_asm())], axis=1)
        return seqs, vec

    def _build_net(self, X):
        p = self.params
        return build_net(p["d_model"], p["heads"], p["layers"], p["z_dim"], p["decoder_hidden"],
                         p["decoder_layers"], self.leaf_counts_, len(self.device_norm_.mean_),
                         (len(self.analytic_norm_.mean_) if p["use_analytic"] else 0)
                         + (len(self.asm_norm_.mean_) if p["use_asm"] else 0), p["head_dropout"],
                         p["dropout"], len(self.leaf_norm_.mean_))

    def _input_state(self) -> dict:
        return {"leaf_norm": self.leaf_norm_.to_dict(), "device_norm": self.device_norm_.to_dict(),
                "analytic_norm": self.analytic_norm_.to_dict(), "leaf_counts": self.leaf_counts_,
                **({"asm_norm": self.asm_norm_.to_dict()} if self.asm_norm_ is not None else {})}

    def _load_input_state(self, state: dict) -> None:
        self.leaf_norm_ = Standardizer.from_dict(state["leaf_norm"])
        self.device_norm_ = Standardizer.from_dict(state["device_norm"])
        self.analytic_norm_ = Standardizer.from_dict(state["analytic_norm"])
        self.asm_norm_ = Standardizer.from_dict(state["asm_norm"]) if "asm_norm" in state else None
        self.leaf_counts_ = list(state["leaf_counts"])
