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

`residual` (a perfcast extension; stacking in the sense of boosting): after the members, an `lgbm` on the pooled
program vector learns the ratio measured / (members' geometric mean) on the training programs, with the same sample
weights, early-stopped on the validation programs; the ensemble then predicts the members' mean times that ratio.
The members are early-stopped on their own loss and averaged, and what all of them miss alike stays in the
training residual (e.g. TVM's untuned matmuls whose weight column falls into one or two L1 sets on AMD Zen:
1.5-1.9x under-predicted at K < 512 while trained on, `bench/aliasing.py --by-k`); the stage fits that, and the
validation programs stop it before it fits noise. `residual={}` uses the tree defaults below (`RESIDUAL_DEFAULTS`),
a dict overrides them.
`members_from=DIR` takes the trained members of a saved ensemble instead of training them (then only the residual
stage is fitted; the saved result holds copies of them), for trying a stage on a model that took long to train.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import PerfcastError
from .base import CostModel, get_model, list_models, load_model, register

DEFAULT_MEMBERS = [["cdmpp", {"use_analytic": True}], ["mlp", {}],
                   ["lgbm", {"features": "program", "target_scale": "work"}]]
RESIDUAL_DEFAULTS = dict(features="program", learning_rate=0.03, max_depth=6, early_stopping=100)
ENSEMBLE_DEFAULTS = dict(members=DEFAULT_MEMBERS, residual=None, members_from=None, seed=0, threads=0)


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
        if self.params["members_from"] is not None:
            self.members_ = _trained_members(self.params["members_from"])
        else:
            self.members_ = [get_model(name, **params).fit(X, y, X_val, y_val, X_target=target, sample_weight=w,
                                                           groups=g)
                             for name, params in self.member_specs()]
        self.info_ = {"members": [{"model": m.name, "epochs": getattr(m, "info_", {}).get("epochs"),
                                   "best_val_mape": getattr(m, "info_", {}).get("best_val_mape")}
                                  for m in self.members_]}
        if self.params["members_from"] is not None:
            self.info_["members_from"] = str(self.params["members_from"])
        self.residual_ = None
        if self.params["residual"] is not None:
            stage = get_model("lgbm", **self.residual_params())  # a malformed stage fails before anything else
            if X_val is None or len(X_val) == 0:  # without them the stage would fit the training residual, noise too
                raise PerfcastError("the ensemble's residual stage is early-stopped on validation programs and none "
                                    "were given; fit with X_val, y_val (perfcast train always passes its split's)")
            self.residual_ = stage.fit(X, self.residual_target(X, y), X_val, self.residual_target(X_val, y_val),
                                       sample_weight=w)
            self.info_["residual"] = {"trees": int(self.residual_.booster_.best_iteration
                                                   or self.residual_.booster_.num_trees())}

    def residual_params(self) -> dict:
        """The residual stage's `lgbm` parameters (`RESIDUAL_DEFAULTS`, the ensemble's seed and threads, then the
        `residual` parameter's own); raises on a value that is not a dict."""
        r = self.params["residual"]
        if not isinstance(r, dict):
            raise PerfcastError(f"ensemble residual {r!r} must be a dict of lgbm parameters, e.g. --param "
                                "'residual={}' (the defaults) or --param 'residual={\"max_depth\":4}'")
        return {**RESIDUAL_DEFAULTS, "seed": self.params["seed"], "threads": self.params["threads"], **r}

    def residual_target(self, X, y) -> np.ndarray:
        """What the residual stage regresses: measured / the members' geometric mean (fit, and `perfcast adapt`)."""
        return np.asarray(y, np.float64) / self._members_mean(X)

    def _members_mean(self, X) -> np.ndarray:
        logs = np.stack([np.log(m.predict(X)) for m in self.members_])  # (members, n)
        return np.exp(logs.mean(axis=0))

    def _predict(self, X) -> np.ndarray:
        base = self._members_mean(X)
        residual = getattr(self, "residual_", None)
        return base if residual is None else base * residual.predict(X)

    def with_members(self, members: list[CostModel]) -> "EnsembleModel":
        """A copy of this ensemble with other (e.g. adapted) trained members."""
        m = EnsembleModel(**self.params)
        m.members_, m.n_train_, m.info_ = list(members), self.n_train_, dict(getattr(self, "info_", {}))
        m.residual_ = getattr(self, "residual_", None)
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
        state = {"members": dirs}
        if getattr(self, "residual_", None) is not None:
            self.residual_.save(path / "residual")
            state["residual"] = "residual"
        return state

    def _load_state(self, path: Path, state: dict) -> None:
        self.members_ = [load_model(path / d) for d in state["members"]]
        self.residual_ = load_model(path / state["residual"]) if "residual" in state else None


def _trained_members(path) -> list[CostModel]:
    """The trained members of the ensemble saved at `path` (the `members_from` parameter)."""
    base = load_model(path)
    if not isinstance(base, EnsembleModel):
        raise PerfcastError(f"members_from {str(path)!r} is a {base.name!r} model, not an ensemble; pass a "
                            "directory saved by `perfcast train --model ensemble`")
    return list(base.members_)
