"""The TensetMLP baseline (Zheng et al., "TenSet", NeurIPS'21 Datasets track, §5; TVM's `MLPModel`).

Each store's 164 per-store features go through a shared MLP; the store embeddings are summed per program
(a segment sum); a head maps the sum, concatenated with the program's device features, to a standardized
transformed latency. Trained with the same loop, loss and target transform as `cdmpp` (perfcast.models._torch).
"""

from __future__ import annotations

import numpy as np

from ..features.per_store import N_PER_STORE
from ._torch import Standardizer, TorchCostModel
from .base import register


def build_net(hidden: int, n_device: int):
    from torch import nn

    class TensetMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.store_mlp = nn.Sequential(nn.Linear(N_PER_STORE, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                           nn.ReLU())
            self.head = nn.Sequential(nn.Linear(hidden + n_device, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        def encode(self, seq, vec):
            import torch

            # seq: (B, S, 164) standardized stores; vec: (B, n_device)
            return torch.cat([self.store_mlp(seq).sum(dim=1), vec], dim=1)  # (B, hidden + n_device)

        def decode(self, z):
            return self.head(z).squeeze(-1)  # (B, hidden + n_device) -> (B,)

        def forward(self, seq, vec):
            return self.decode(self.encode(seq, vec))  # (B,)

    return TensetMLP()


@register
class TensetMLPModel(TorchCostModel):
    """Per-store MLP, summed over stores (TensetMLP); see the module docstring."""

    name = "mlp"
    ARCH_DEFAULTS = dict(hidden=256)

    def _fit_inputs(self, X) -> None:
        rows = np.concatenate(X.stores) if len(X) else np.zeros((0, N_PER_STORE))
        self.store_norm_ = Standardizer().fit(rows)
        self.device_norm_ = Standardizer().fit(X.device)

    def _inputs(self, X):
        seqs = [self.store_norm_(s) if len(s) else np.zeros((1, N_PER_STORE), np.float32) for s in X.stores]
        return seqs, self.device_norm_(X.device)

    def _build_net(self, X):
        return build_net(self.params["hidden"], len(self.device_norm_.mean_))

    def _input_state(self) -> dict:
        return {"store_norm": self.store_norm_.to_dict(), "device_norm": self.device_norm_.to_dict()}

    def _load_input_state(self, state: dict) -> None:
        self.store_norm_ = Standardizer.from_dict(state["store_norm"])
        self.device_norm_ = Standardizer.from_dict(state["device_norm"])
