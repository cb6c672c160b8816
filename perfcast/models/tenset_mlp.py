"""The TensetMLP baseline (Zheng et al., "TenSet", NeurIPS'21 Datasets track, §5; TVM's `MLPModel`).

Each store's 164 per-store features go through a shared MLP; the store embeddings are summed per program
(a segment sum); a head maps the sum, concatenated with the program's device features, to a standardized
transformed latency. Trained with the same loop, loss and target transform as `cdmpp` (perfcast.models._torch).
`use_asm=True` (a perfcast extension, off by default: the baseline is TenSet's) appends the program's 55 assembly
features (`perfcast.features.asm`), standardized, to the device features the head reads.
"""

from __future__ import annotations

import numpy as np

from ..features.per_store import N_PER_STORE
from ._torch import Standardizer, TorchCostModel
from .base import register


def build_net(hidden: int, n_vec: int):
    from torch import nn

    class TensetMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.store_mlp = nn.Sequential(nn.Linear(N_PER_STORE, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                           nn.ReLU())
            self.head = nn.Sequential(nn.Linear(hidden + n_vec, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        def encode(self, seq, vec):
            import torch

            # seq: (B, S, 164) standardized stores; vec: (B, n_vec): device features [+ 55 asm features]
            return torch.cat([self.store_mlp(seq).sum(dim=1), vec], dim=1)  # (B, hidden + n_vec)

        def decode(self, z):
            return self.head(z).squeeze(-1)  # (B, hidden + n_vec) -> (B,)

        def forward(self, seq, vec):
            return self.decode(self.encode(seq, vec))  # (B,)

    return TensetMLP()


@register
class TensetMLPModel(TorchCostModel):
    """Per-store MLP, summed over stores (TensetMLP); see the module docstring."""

    name = "mlp"
    ARCH_DEFAULTS = dict(hidden=256, use_asm=False)

    @property
    def needs_asm(self) -> bool:
        return bool(self.params["use_asm"])

    def _fit_inputs(self, X) -> None:
        rows = np.concatenate(X.stores) if len(X) else np.zeros((0, N_PER_STORE))
        self.store_norm_ = Standardizer().fit(rows)
        self.device_norm_ = Standardizer().fit(X.device)
        self.asm_norm_ = Standardizer().fit(X.require_asm()) if self.params["use_asm"] else None

    def _inputs(self, X):
        seqs = [self.store_norm_(s) if len(s) else np.zeros((1, N_PER_STORE), np.float32) for s in X.stores]
        vec = self.device_norm_(X.device)
        if self.asm_norm_ is not None:
            vec = np.concatenate([vec, self.asm_norm_(X.require_asm())], axis=1)
        return seqs, vec

    def _build_net(self, X):
        return build_net(self.params["hidden"], len(self.device_norm_.mean_)
                         + (len(self.asm_norm_.mean_) if self.asm_norm_ is not None else 0))

    def _input_state(self) -> dict:
        return {"store_norm": self.store_norm_.to_dict(), "device_norm": self.device_norm_.to_dict(),
                **({"asm_norm": self.asm_norm_.to_dict()} if self.asm_norm_ is not None else {})}

    def _load_input_state(self, state: dict) -> None:
        self.store_norm_ = Standardizer.from_dict(state["store_norm"])
        self.device_norm_ = Standardizer.from_dict(state["device_norm"])
        self.asm_norm_ = Standardizer.from_dict(state["asm_norm"]) if "asm_norm" in state else None
