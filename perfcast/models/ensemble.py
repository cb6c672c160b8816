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
`gate` (a perfcast extension; stacking with a validation-fitted gate, cf. scikit-learn's `StackingRegressor`,
which fits its final estimator on held-out predictions): `gate="annotations"` replaces the equal weights of the
members' log predictions by weights per program region, fitted on the validation programs: the regions are the
four combinations of "has a parallel loop" and "has a vectorized loop" (analytic features), which separate TVM's
untuned default kernels (neither) from scheduled ones. Per region the weights are the point of a simplex grid
(`GATE_STEP`) with the lowest validation MAPE; a region with fewer than `GATE_MIN_PROGRAMS` validation programs
keeps equal weights. Why: on the bundled model's validation programs the tree member is the best one on default
kernels (12.1 % MAPE against 19.4 % and 20.9 % for the neural ones) and the neural members on scheduled ones, and
whole untuned networks are sums of default kernels (README, Models). Weights fitted on the training programs would
trust whichever member memorised them most (the tree: 4.4 % on training default kernels), hence the validation set.
The residual stage, if any, is fitted after the gate, on measured / gated mean.
`members_from=DIR` takes the trained members of a saved ensemble instead of training them (then only the gate and
the residual stage are fitted; the saved result holds copies of them and names them in its `members` parameter,
`saved_params`), for trying a stage on a model that took long to train. A list of directories (`--param
'members_from=["ENS","CDMPP_SEED1"]'`) joins the members of each: a saved ensemble gives its members, any
other saved model itself (e.g. a second seed of one member trained alone).
Fit it on the records the members trained on: on records of kinds they never saw, the stage learns the members'
error on those kinds in its first trees and applies it to other unfamiliar programs (outside-zoo MAPE 51 -> 58 %
with a new round of operator kinds that a full retraining took in neutrally; README, Programs outside the training
data); `fit` warns when the stage's training programs outnumber the members'.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np

from ..errors import PerfcastError, UnknownNameError
from .base import CostModel, get_model, list_models, load_model, read_model_meta, register

DEFAULT_MEMBERS = [["cdmpp", {"use_analytic": True}], ["mlp", {}],
                   ["lgbm", {"features": "program", "target_scale": "work"}]]
RESIDUAL_DEFAULTS = dict(features="program", learning_rate=0.03, max_depth=6, early_stopping=100)
ENSEMBLE_DEFAULTS = dict(members=DEFAULT_MEMBERS, residual=None, gate=None, members_from=None, seed=0, threads=0)
GATES = ("annotations",)
GATE_STEP = 0.05  # simplex grid of member weights
GATE_MIN_PROGRAMS = 50  # validation programs a region needs to get its own weights
N_REGIONS = 4  # annotation_region's values


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
            out.append((item[0], {**self.inherited_params(), **item[1]}))
        return out

    def inherited_params(self) -> dict:
        """What every member and the residual stage inherit from the ensemble unless their own parameters say
        otherwise."""
        return {"seed": self.params["seed"], "threads": self.params["threads"]}

    @property
    def needs_asm(self) -> bool:
        members = getattr(self, "members_", None)
        if members is None:
            members = (_saved_member_configs(self.params["members_from"]) if self.params["members_from"] is not None
                       else [get_model(name, **params) for name, params in self.member_specs()])
        stage = getattr(self, "residual_", None)
        asm_stage = (stage.needs_asm if stage is not None else
                     self.params["residual"] is not None and self.residual_params()["features"] == "program_asm")
        return asm_stage or any(m.needs_asm for m in members)

    def _fit(self, X, y, X_val, y_val) -> None:
        target, w = getattr(self, "_X_target", None), getattr(self, "_sample_weight", None)
        g = getattr(self, "_groups", None)
        if self.params["gate"] is not None and self.params["gate"] not in GATES:  # fail before training members
            raise UnknownNameError("ensemble gate", self.params["gate"], list(GATES),
                                   "or leave it unset for equal weights")
        if self.params["members_from"] is not None:
            self.members_, n_members = _trained_members(self.params["members_from"])
            if self.params["residual"] is not None and len(X) > n_members:
                warnings.warn(unseen_stage_warning(self.params["members_from"], len(X), n_members), stacklevel=3)
        else:
            self.members_ = [get_model(name, **params).fit(X, y, X_val, y_val, X_target=target, sample_weight=w,
                                                           groups=g)
                             for name, params in self.member_specs()]
        self.info_ = {"members": [{"model": m.name, "epochs": getattr(m, "info_", {}).get("epochs"),
                                   "best_val_mape": getattr(m, "info_", {}).get("best_val_mape")}
                                  for m in self.members_]}
        if self.params["members_from"] is not None:
            src = self.params["members_from"]
            self.info_["members_from"] = [str(d) for d in src] if isinstance(src, (list, tuple)) else str(src)
        self.gate_ = None
        if self.params["gate"] is not None:
            self.gate_ = self._fit_gate(X_val, y_val)
            self.info_["gate"] = {str(r): [round(float(v), 4) for v in ws] for r, ws in self.gate_.items()}
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
        return {**RESIDUAL_DEFAULTS, **self.inherited_params(), **r}

    def residual_target(self, X, y) -> np.ndarray:
        """What the residual stage regresses: measured / the members' geometric mean (fit, and `perfcast adapt`)."""
        return np.asarray(y, np.float64) / self._members_mean(X)

    def _member_logs(self, X) -> np.ndarray:
        """(n, members) log of each member's predicted latency."""
        return np.stack([np.log(m.predict(X)) for m in self.members_], axis=1)

    def gate_table(self) -> np.ndarray:
        """(regions, members) weights of the members' log predictions per region (equal without a gate)."""
        table = np.full((N_REGIONS, len(self.members_)), 1.0 / len(self.members_))
        for r, w in (getattr(self, "gate_", None) or {}).items():
            table[r] = w
        return table

    def _members_mean(self, X) -> np.ndarray:
        """(n,) the members' geometric mean, weighted per region by the gate if there is one."""
        return np.exp((self._member_logs(X) * self.gate_table()[annotation_region(X)]).sum(axis=1))

    def _fit_gate(self, X_val, y_val) -> dict[int, list[float]]:
        """{region: member weights}: per region of the validation programs, the simplex-grid weights of the
        members' log predictions with the lowest MAPE (see the module docstring)."""
        if X_val is None or len(X_val) == 0:
            raise PerfcastError("the ensemble's gate is fitted on validation programs and none were given; fit with "
                                "X_val, y_val (perfcast train always passes its split's)")
        logs = self._member_logs(X_val)  # (n_val, members)
        y = np.asarray(y_val, np.float64)
        grid = simplex_grid(len(self.members_), GATE_STEP)  # (G, members)
        region = annotation_region(X_val)
        gate = {}
        for r in np.unique(region):
            sel = region == r
            if sel.sum() < GATE_MIN_PROGRAMS:
                continue
            mape = np.concatenate([np.abs(np.exp(logs[sel] @ g.T) / y[sel, None] - 1.0).mean(axis=0)  # (chunk,)
                                   for g in np.array_split(grid, max(1, len(grid) // 256))])  # (G,)
            gate[int(r)] = grid[int(np.argmin(mape))].tolist()
        return gate

    def _predict(self, X) -> np.ndarray:
        base = self._members_mean(X)
        residual = getattr(self, "residual_", None)
        return base if residual is None else base * residual.predict(X)

    def with_members(self, members: list[CostModel]) -> "EnsembleModel":
        """A copy of this ensemble with other (e.g. adapted) trained members."""
        m = EnsembleModel(**self.params)
        m.members_, m.n_train_, m.info_ = list(members), self.n_train_, dict(getattr(self, "info_", {}))
        m.residual_ = getattr(self, "residual_", None)
        m.gate_ = getattr(self, "gate_", None)
        m.device_proxy_ = getattr(self, "device_proxy_", None)
        return m

    def neural_members(self) -> list:
        from ._torch import TorchCostModel

        return [m for m in self.members_ if isinstance(m, TorchCostModel)]

    def latent(self, X) -> np.ndarray:
        """(n, sum of the neural members' latent sizes): their latents side by side."""
        nets = self.neural_members()
        if not nets:
            raise PerfcastError("this ensemble has no neural member (cdmpp, mlp), so it has no latent representation")
        X = self.proxied(X)[0]
        return np.hstack([m.latent(X) for m in nets])

    # ---- persistence -------------------------------------------------------------------------------------------
    def saved_params(self) -> dict:
        """With `members_from`, the members it joined written as a recipe: `members` lists each member's name and
        the parameters in which it differs from what `member_specs` would give it (the model's defaults with the
        ensemble's seed and threads), `members_from` is None (the sources stay in `info_["members_from"]`). So the
        saved model.json says which members it holds, and fitting its parameters again trains the same members."""
        if self.params["members_from"] is None or getattr(self, "members_", None) is None:
            return self.params
        members = []
        for m in self.members_:
            base = {**get_model(m.name).params, **self.inherited_params()}
            members.append([m.name, {k: v for k, v in m.params.items() if k not in base or base[k] != v}])
        return {**self.params, "members": members, "members_from": None}

    def _save_state(self, path: Path) -> dict:
        dirs = []
        for i, m in enumerate(self.members_):
            m.save(path / f"member{i}")
            dirs.append(f"member{i}")
        state = {"members": dirs}
        if getattr(self, "residual_", None) is not None:
            self.residual_.save(path / "residual")
            state["residual"] = "residual"
        if getattr(self, "gate_", None) is not None:
            state["gate"] = {str(r): w for r, w in self.gate_.items()}
        return state

    def _load_state(self, path: Path, state: dict) -> None:
        self.members_ = [load_model(path / d) for d in state["members"]]
        self.residual_ = load_model(path / state["residual"]) if "residual" in state else None
        self.gate_ = {int(r): list(w) for r, w in state["gate"].items()} if "gate" in state else None


def annotation_region(X) -> np.ndarray:
    """(n,) region of each program for the gate: 2 x (has a parallel loop) + (has a vectorized loop), from the
    analytic features (0: neither, as TVM's default CPU kernels; 3: both)."""
    from ..features.analytic import ANALYTIC_FEATURES

    a = np.asarray(X.analytic)
    parallel = a[:, ANALYTIC_FEATURES.index("max_parallel_extent")] > 0
    vector = a[:, ANALYTIC_FEATURES.index("max_vector_extent")] > 0
    return 2 * parallel.astype(np.int64) + vector.astype(np.int64)


def simplex_grid(k: int, step: float) -> np.ndarray:
    """(G, k) every weight vector of k non-negative multiples of `step` that sum to 1."""
    n = int(round(1.0 / step))
    out = [c for c in itertools.product(range(n + 1), repeat=k - 1) if sum(c) <= n]
    return np.array([[*c, n - sum(c)] for c in out], np.float64) / n


def _check_ensemble(path, name: str) -> None:
    if name != EnsembleModel.name:
        raise PerfcastError(f"members_from {str(path)!r} is a {name!r} model, not an ensemble; pass a "
                            "directory saved by `perfcast train --model ensemble`")


def _member_dirs(members_from) -> list[Path]:
    """The saved models `members_from` names, one directory per member: each saved ensemble's member directories
    and each other saved model's own (a single directory must be an ensemble). Reads only model.json files; at
    least two members or an error that names the fix."""
    many = isinstance(members_from, (list, tuple))
    if many and not members_from:
        raise PerfcastError("members_from [] names no saved model; give an ensemble directory or a list of model "
                            "directories, e.g. --param 'members_from=[\"ENS\",\"CDMPP_SEED1\"]'")
    dirs = []
    for src in members_from if many else [members_from]:
        p, meta = read_model_meta(src)
        if not many:
            _check_ensemble(src, meta["name"])
        dirs.extend([p / d for d in meta["state"]["members"]] if meta["name"] == EnsembleModel.name else [p])
    if len(dirs) < 2:
        raise PerfcastError(f"members_from {members_from!r} gives {len(dirs)} member; an ensemble needs at least "
                            "two (add another saved model to the list)")
    return dirs


def _trained_members(members_from) -> tuple[list[CostModel], int]:
    """(the trained members `members_from` names (`_member_dirs`), the fewest programs any was trained on)."""
    members = [load_model(d) for d in _member_dirs(members_from)]
    return members, min(int(m.n_train_) for m in members)


def unseen_stage_warning(path, n_stage: int, n_members: int) -> str:
    """Why a residual stage fitted on more programs than its `members_from` members trained on misleads (README,
    Programs outside the training data: a stage learns the members' error on the programs they never saw)."""
    return (f"the residual stage trains on {n_stage} programs, {n_stage - n_members} more than the members of "
            f"{str(path)!r} were trained on ({n_members}): it learns the members' error on the programs they never "
            f"saw and applies it to others (outside-zoo MAPE 51 -> 58 % with an unseen round of operator kinds); "
            f"to learn from new records, retrain the members (leave out members_from)")


def _saved_member_configs(path) -> list[CostModel]:
    """Untrained models with the parameters of the members `members_from` (`path`) names: what features they read,
    without loading their weights (only the model.json files)."""
    return [get_model(meta["name"], **meta["params"]) for meta in (read_model_meta(d)[1] for d in _member_dirs(path))]
