"""Gradient-boosted trees on aggregated per-store features: the Ansor / Tenset / TVM meta-schedule baseline.

Each program is TVM's PerStoreFeature matrix (n_stores, 164) summed over its stores (Tenset's XGBoost flattening),
so the model sees exactly what TVM users' cost model sees; with `use_device` (default) the device specification
vector (CDMPP §4.3) is appended, so that on a multi-device dataset the baseline can tell devices apart (TVM trains
one cost model per device, which amounts to the same). The trees regress a transformed latency (`target`,
default log, the scale on which boosted trees fit latencies spanning decades best); squared error; early stopping
on the validation set when one is given.

`features="program"` (a perfcast extension) gives the trees a wider program vector instead: the per-store features
summed *and* their maximum over stores, the compact-AST leaf vectors (`compact_ast`) summed, maximum and minimum
over leaves, the store and leaf counts, and the program-level `analytic` features (`program_matrix`). The sum alone
cannot tell one heavy store from several light ones, and the compact AST's memory-access and cache columns are
what the per-store set lacks. With `target_scale=work` this is the third member of the bundled `ensemble`.

`features="program_asm"` adds what LLVM made of each program: the instruction counts of its x86 assembly
(`features.asm`; building a program for them costs ~0.15 s, so they are loaded only for models that read them).

`objective`: `l2` (squared error on the transformed target, the default) or `mape` (with `target=none` only): the
absolute error weighted by 1 / latency, i.e. the mean absolute percentage error itself (LightGBM's own `mape`
divides by max(1, |label|), which is not it for labels below 1), for the validation set's early stopping too.
"""

from __future__ import annotations

import gzip
import lzma
import re
from pathlib import Path

import numpy as np

from ..errors import PerfcastError, UnknownNameError
from .base import CostModel, register
from .targets import TargetTransform

# Per-tree lines of LightGBM's text model that only training statistics, feature importance and SHAP read: node
# gains, hessian sums, data counts, inner nodes' values, and the trees' byte sizes (which a loader without them
# finds by parsing). Prediction reads the structure, thresholds, decision types and leaf values, so a model saved
# without these predicts bit-identically and continued boosting (`perfcast adapt`) starts from the same scores;
# the bundled tree member's text 23.4 -> 11.7 MB, 7.2 -> 3.5 MB xz.
TRAINING_ONLY_LINES = re.compile(
    r"^(split_gain|leaf_weight|leaf_count|internal_value|internal_weight|internal_count|tree_sizes)=.*\n", re.M)


def store_matrix(X, use_device: bool = False) -> np.ndarray:
    """(n, 164) per-store features summed over each program's stores; (n, 164 + N_DEVICE) with `use_device`."""
    A = np.stack([s.sum(axis=0) if len(s) else np.zeros(s.shape[1], np.float32) for s in X.stores]) \
        if len(X) else np.zeros((0, 164), np.float32)
    return np.hstack([A, np.asarray(X.device, np.float32).reshape(len(A), -1)]) if use_device else A


def program_matrix(X, use_device: bool = False) -> np.ndarray:
    """(n, 2 * 164 + 3 * 50 + 2 + 21 [+ 11]) for `features="program"`: per program, the per-store
    features summed and their maximum over stores, the compact-AST leaf vectors summed, maximum and minimum over
    leaves, the number of stores and of leaves, the analytic features [, the device vector]."""
    from ..features.per_store import N_PER_STORE

    def pooled(a, width, ops):
        a = np.asarray(a, np.float32).reshape(-1, width)
        return [op(a, axis=0) if len(a) else np.zeros(width, np.float32) for op in ops]

    rows = [np.concatenate([*pooled(st, N_PER_STORE, (np.sum, np.max)),
                            *pooled(lv, X.leaf_dim, (np.sum, np.max, np.min)), [len(st), len(lv)]])
            for st, lv in zip(X.stores, X.leaves)]
    A = np.stack(rows).astype(np.float32) if rows else np.zeros((0, 2 * N_PER_STORE + 3 * X.leaf_dim + 2), np.float32)
    parts = [A, np.asarray(X.analytic, np.float32).reshape(len(A), -1)]
    if use_device:
        parts.append(np.asarray(X.device, np.float32).reshape(len(A), -1))
    return np.hstack(parts)


def program_asm_matrix(X, use_device: bool = False) -> np.ndarray:
    """`program_matrix` and the programs' assembly features (`features.asm.ASM_FEATURES`, 55 columns; NaN where
    LLVM could not build one, which the trees take as missing) for `features="program_asm"`."""
    asm = X.require_asm()
    A = program_matrix(X, use_device)
    return np.hstack([A, np.asarray(asm, np.float32).reshape(len(A), -1)])


FEATURE_SETS = {"per_store": store_matrix, "program": program_matrix, "program_asm": program_asm_matrix}
OBJECTIVES = ("l2", "mape")
GBDT_DEFAULTS = dict(n_estimators=2000, learning_rate=0.05, max_depth=8, subsample=0.8, colsample=0.8,
                     early_stopping=50, objective="l2", target="log", target_scale="none", use_device=True,
                     features="per_store", seed=0, threads=0)


class _GBDT(CostModel):
    def __init__(self, **params):
        unknown = set(params) - set(GBDT_DEFAULTS)
        if unknown:
            raise PerfcastError(f"unknown parameter(s) {sorted(unknown)} for model {self.name!r}; known: "
                                f"{sorted(GBDT_DEFAULTS)}")
        super().__init__(**{**GBDT_DEFAULTS, **params})
        if self.params["features"] not in FEATURE_SETS:
            raise UnknownNameError("feature set", self.params["features"], list(FEATURE_SETS))
        if self.params["objective"] not in OBJECTIVES:
            raise UnknownNameError("tree objective", self.params["objective"], list(OBJECTIVES))
        if self.params["objective"] == "mape" and self.params["target"] != "none":
            raise PerfcastError(f"objective 'mape' needs target 'none' (got {self.params['target']!r}): it weighs the "
                                "absolute error of the latency itself; pass --param target=none")

    @property
    def needs_asm(self) -> bool:
        return self.params["features"] == "program_asm"

    def _weights(self, y, w=None):
        """Per-program weights of the tree loss: `w` (None = 1), divided by the latency for `objective=mape`."""
        if self.params["objective"] != "mape":
            return w
        return (np.ones(len(y)) if w is None else np.asarray(w, np.float64)) / np.asarray(y, np.float64)

    def _matrix(self, X) -> np.ndarray:
        return FEATURE_SETS[self.params["features"]](self._view(X), self.params["use_device"])

    def _fit(self, X, y, X_val, y_val) -> None:
        self.target_ = TargetTransform(self.params["target"]).fit(y)
        val = None if X_val is None else (self._matrix(X_val), self.target_.transform(y_val), self._weights(y_val))
        self.booster_ = self._train(self._matrix(X), self.target_.transform(y), val,
                                    self._weights(y, getattr(self, "_sample_weight", None)), None)

    def _predict(self, X) -> np.ndarray:
        return self.target_.inverse(self._raw_predict(self._matrix(X)))

    def boosted(self, X, y, rounds: int = 100, val_frac: float = 0.2, seed: int = 0) -> "_GBDT":
        """A copy with up to `rounds` more trees fitted to the residuals of (X, y) (seconds), the trees' transfer
        learning (continued boosting; the target transform and the existing trees are kept), early-stopped on a
        `val_frac` share of the programs (none below 5); how `perfcast adapt` adapts a tree model or member."""
        import copy

        y = np.asarray(y, np.float64) / self.scale(X)
        rng = np.random.default_rng(seed)
        n_val = int(round(val_frac * len(y))) if len(y) >= 5 else 0
        perm = rng.permutation(len(y))
        A, z = self._matrix(X), self.target_.transform(y)
        w = self._weights(y)
        val = (A[perm[:n_val]], z[perm[:n_val]], None if w is None else w[perm[:n_val]]) if n_val else None
        m = copy.copy(self)
        m.params = {**self.params, "n_estimators": int(rounds)}
        m.booster_ = self._train(A[perm[n_val:]], z[perm[n_val:]], val, None if w is None else w[perm[n_val:]],
                                 self.booster_)
        m.adapt_info_ = {"method": "boosting", "rounds": int(rounds), "n_target": int(len(y))}
        return m


@register
class XGBModel(_GBDT):
    """XGBoost (`xgboost`) regressor; see the module docstring."""

    name = "xgb"

    def _train(self, A, z, val, w, init):
        """A fitted regressor: new (init None) or `init`'s trees plus more (continued boosting)."""
        import xgboost as xgb

        p = self.params
        booster = xgb.XGBRegressor(
            n_estimators=p["n_estimators"], learning_rate=p["learning_rate"], max_depth=p["max_depth"],
            subsample=p["subsample"], colsample_bytree=p["colsample"], random_state=p["seed"],
            n_jobs=p["threads"] or None, tree_method="hist",
            objective="reg:absoluteerror" if p["objective"] == "mape" else "reg:squarederror",
            early_stopping_rounds=p["early_stopping"] if val is not None else None)
        booster.fit(A, z, sample_weight=w, eval_set=[val[:2]] if val is not None else None,
                    sample_weight_eval_set=[val[2]] if val is not None and val[2] is not None else None,
                    verbose=False, xgb_model=None if init is None else init.get_booster())
        return booster

    def _raw_predict(self, A) -> np.ndarray:
        return self.booster_.predict(A)

    def _save_state(self, path: Path) -> dict:
        self.booster_.save_model(path / "xgb.json")
        return {"target": self.target_.to_dict(), "file": "xgb.json"}

    def _load_state(self, path: Path, state: dict) -> None:
        import xgboost as xgb

        self.target_ = TargetTransform.from_dict(state["target"])
        self.booster_ = xgb.XGBRegressor()
        self.booster_.load_model(path / state["file"])


@register
class LGBMModel(_GBDT):
    """LightGBM regressor; see the module docstring."""

    name = "lgbm"

    def _train(self, A, z, val, w, init):
        """A fitted booster: new (init None) or `init`'s trees plus more (continued boosting)."""
        import lightgbm as lgb

        p = self.params
        train = lgb.Dataset(A, z, weight=w)
        sets = [lgb.Dataset(val[0], val[1], weight=val[2], reference=train)] if val is not None else []
        params = {"objective": "l1" if p["objective"] == "mape" else "regression",
                  "learning_rate": p["learning_rate"], "max_depth": p["max_depth"],
                  "num_leaves": min(2 ** p["max_depth"] - 1, 255), "bagging_fraction": p["subsample"],
                  "bagging_freq": 1, "feature_fraction": p["colsample"], "seed": p["seed"], "verbose": -1,
                  "num_threads": p["threads"],
                  # LightGBM's default 20, fewer for the few programs continued boosting adapts to
                  "min_data_in_leaf": min(20, max(1, len(z) // 10))}
        callbacks = [lgb.early_stopping(p["early_stopping"], verbose=False)] if sets else []
        return lgb.train(params, train, num_boost_round=p["n_estimators"], valid_sets=sets, callbacks=callbacks,
                         init_model=init, keep_training_booster=init is not None)

    def _raw_predict(self, A) -> np.ndarray:
        return self.booster_.predict(A, num_iteration=self.booster_.best_iteration or None)

    def _save_state(self, path: Path) -> dict:
        # LightGBM's text model without its training statistics, xz-compressed (the bundled tree member's 2,000
        # trees of up to 255 leaves: 23.4 MB of text, 11.7 MB without them, 3.5 MB xz)
        text = self.booster_.model_to_string(num_iteration=self.booster_.best_iteration or None)
        text = TRAINING_ONLY_LINES.sub("", text)
        (path / "lgbm.txt.xz").write_bytes(lzma.compress(text.encode(), preset=9))
        return {"target": self.target_.to_dict(), "file": "lgbm.txt.xz"}

    def _load_state(self, path: Path, state: dict) -> None:
        import lightgbm as lgb

        self.target_ = TargetTransform.from_dict(state["target"])
        f = path / state["file"]
        unpack = {".xz": lzma.decompress, ".gz": gzip.decompress}.get(f.suffix)  # .gz: saved before 2026-11-27 22:30
        if unpack is not None:
            self.booster_ = lgb.Booster(model_str=unpack(f.read_bytes()).decode())
        else:  # models saved before 2026-11-27
            self.booster_ = lgb.Booster(model_file=str(f))
