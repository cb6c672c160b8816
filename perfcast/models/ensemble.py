"""`ensemble`: the geometric mean of several cost models' predicted latencies (a perfcast extension; averaging
independently trained regressors is the oldest variance-reduction trick there is, cf. scikit-learn's
`VotingRegressor`, which averages arithmetically).

The members are trained one after another on the same training and validation programs, each with its own
parameters, and predict on their own; the ensemble returns exp(mean(log prediction)). The log mean keeps a member that
over-predicts a program by 3x from outweighing one that is right (an arithmetic mean is pulled towards the larger
value, which is what MAPE punishes most).

The default members are two neural models and a tree model, whose errors differ on held-out networks: `cdmpp`
with the analytic features (compact AST), `mlp` (TVM's per-store features) and `lgbm` on the pooled program vector
(`features="program"`: per-store and compact-AST rows pooled, plus the analytic features) regressing latency per
unit of static work (`target_scale=work`). On the `by_network` split the three's kernel MAPE is below any member's
and below the two neural members' (README, Models). An `mlp` regressing latency per unit of work as the second
member gave a slightly lower kernel MAPE but under-predicted whole networks (it is too optimistic about the largest
kernels), so it is not a member.

`members` is a list of [model name, {parameters}] pairs (`--param 'members=[["cdmpp",{}],["xgb",{}]]'`); `seed` and
`threads` are passed on to members that do not set them. `latent(X)` concatenates the neural members' latents
(adaptation's KMeans sampler and the latent plot use it); `perfcast adapt` adapts each member (the neural ones by
the chosen method, the tree ones by continued boosting).
A saved ensemble is a directory with one saved model per member (`member0/`, `member1/`, ...).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import PerfcastError
from .base import CostModel, get_model, list_models, load_model, register

DEFAULT_MEMBERS = [["cdmpp", {"use_analytic": True}], ["mlp", {}],
                   ["lgbm", {"features": "program", "target_scale": "work"}]]
ENSEMBLE_DEFAULTS = dict(members=DEFAULT_MEMBERS, seed=0, threads=0)


@register
class EnsembleModel(CostModel):
    """Geometric mean of the members' predictions; see the module docstring."""

    name = "ensemble"

    def __init__(self, **params):
        unknown = set(params) - set(ENSEMBLE_DEFAULTS)
        if unknown:
            raise PerfcastError(f"unknown parameter(s) {sorted(unknown)} for model 'ensemble'; known: "
                                f"{sorted(ENSEMBLE_DEFAULTS)}")
        super().__init__(**{**ENSEMBLE_DEFAULTS, **params})

    def member_specs(self) -> list[tuple[str, dict]]:
        """[(model name, parameters)] with the ensemble's seed and threads filled in; raises on a malformed list."""
        members = self.params["members"]
        example = "e.g. --param 'members=[[\"cdmpp\",{}],[\"mlp\",{\"target_scale\":\"work\"}]]'"
        if isinstance(members, str):  # "cdmpp,mlp": default parameters each
            members = [[name, {}] for name in members.split(",") if name]
        if not isinstance(members, list) or len(members) < 2:
            raise PerfcastError(f"ensemble members {members!r} must list at least two models; {example}")
        out = []
        for item in members:
            if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], dict)):
                raise PerfcastError(f"ensemble member {item!r} is not a [model name, {{parameters}}] pair; {example}")
            if item[0] == self.name or item[0] not in list_models():
                known = [m for m in list_models() if m != self.name]
                raise PerfcastError(f"ensemble member {item[0]!r} is not a model; known: {', '.join(known)}")
            out.append((item[0], {"seed": self.params["seed"], "threads": self.params["threads"], **item[1]}))
        return out

    def _fit(self, X, y, X_val, y_val) -> None:
        target, w = getattr(self, "_X_target", None), getattr(self, "_sample_weight", None)
        g = getattr(self, "_groups", None)
        self.members_ = [get_model(name, **params).fit(X, y, X_val, y_val, X_target=target, sample_weight=w,
                                                       groups=g)
                         for name, params in self.member_specs()]
        self.info_ = {"members": [{"model": m.name, "epochs": getattr(m, "info_", {}).get("epochs"),
                                   "best_val_mape": getattr(m, "info_", {}).get("best_val_mape")}
                                  for m in self.members_]}

    def _predict(self, X) -> np.ndarray:
        logs = np.stack([np.log(m.predict(X)) for m in self.members_])  # (members, n)
        return np.exp(logs.mean(axis=0))

    def with_members(self, members: list[CostModel]) -> "EnsembleModel":
        """A copy of this ensemble with other (e.g. adapted) trained members."""
        m = EnsembleModel(**self.params)
        m.members_, m.n_train_, m.info_ = list(members), self.n_train_, dict(getattr(self, "info_", {}))
        return m

    def neural_members(self) -> list:
        from ._torch import TorchCostModel

        return [m for m in self.members_ if isinstance(m, TorchCostModel)]

    def latent(self, X) -> np.ndarray:
        """(n, sum of the neural members' latent sizes): their latents side by side."""
        nets = self.neural_members()
        if not nets:
            raise PerfcastError("this ensemble has no neural member (cdmpp, mlp), so it has no latent representation")
        return np.hstack([m.latent(X) for m in nets])

    # ---- persistence -------------------------------------------------------------------------------------------
    def _save_state(self, path: Path) -> dict:
        dirs = []
        for i, m in enumerate(self.members_):
            m.save(path / f"member{i}")
            dirs.append(f"member{i}")
        return {"members": dirs}

    def _load_state(self, path: Path, state: dict) -> None:
        self.members_ = [load_model(path / d) for d in state["members"]]
