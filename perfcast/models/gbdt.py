"""Gradient-boosted trees on aggregated per-store features: the Ansor / Tenset / TVM meta-schedule baseline.

Each program is TVM's PerStoreFeature matrix (n_stores, 164) summed over its stores (Tenset's XGBoost flattening),
so the model sees exactly what TVM users' cost model sees; with `use_device` (default) the device specification
vector (CDMPP §4.3) is appended, so that on a multi-device dataset the baseline can tell devices apart (TVM trains
one cost model per device, which amounts to the same). The trees regress a transformed latency (`target`,
default log, the scale on which boosted trees fit latencies spanning decades best); squared error; early stopping
on the validation set when one is given.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import PerfcastError
from .base import CostModel, register
from .targets import TargetTransform


def store_matrix(X, use_device: bool = False) -> np.ndarray:
    """(n, 164) per-store features summed over each program's stores; (n, 164 + N_DEVICE) with `use_device`."""
    A = np.stack([s.sum(axis=0) if len(s) else np.zeros(s.shape[1], np.float32) for s in X.stores]) \
        if len(X) else np.zeros((0, 164), np.float32)
    return np.hstack([A, np.asarray(X.device, np.float32).reshape(len(A), -1)]) if use_device else A


GBDT_DEFAULTS = dict(n_estimators=2000, learning_rate=0.05, max_depth=8, subsample=0.8, colsample=0.8,
                     early_stopping=50, target="log", target_scale="none", use_device=True, seed=0, threads=0)


class _GBDT(CostModel):
    def __init__(self, **params):
        unknown = set(params) - set(GBDT_DEFAULTS)
        if unknown:
            raise PerfcastError(f"unknown parameter(s) {sorted(unknown)} for model {self.name!r}; known: "
                                f"{sorted(GBDT_DEFAULTS)}")
        super().__init__(**{**GBDT_DEFAULTS, **params})

    def _fit(self, X, y, X_val, y_val) -> None:
        self.target_ = TargetTransform(self.params["target"]).fit(y)
        dev = self.params["use_device"]
        val = None if X_val is None else (store_matrix(X_val, dev), self.target_.transform(y_val))
        self._fit_trees(store_matrix(X, dev), self.target_.transform(y), val, getattr(self, "_sample_weight", None))

    def _predict(self, X) -> np.ndarray:
        return self.target_.inverse(self._raw_predict(store_matrix(X, self.params["use_device"])))


@register
class XGBModel(_GBDT):
    """XGBoost (`xgboost`) regressor; see the module docstring."""

    name = "xgb"

    def _fit_trees(self, A, z, val, w) -> None:
        import xgboost as xgb

        p = self.params
        self.booster_ = xgb.XGBRegressor(
            n_estimators=p["n_estimators"], learning_rate=p["learning_rate"], max_depth=p["max_depth"],
            subsample=p["subsample"], colsample_bytree=p["colsample"], random_state=p["seed"],
            n_jobs=p["threads"] or None, tree_method="hist",
            early_stopping_rounds=p["early_stopping"] if val is not None else None)
        self.booster_.fit(A, z, sample_weight=w, eval_set=[val] if val is not None else None, verbose=False)

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

    def _fit_trees(self, A, z, val, w) -> None:
        import lightgbm as lgb

        p = self.params
        train = lgb.Dataset(A, z, weight=w)
        sets = [lgb.Dataset(val[0], val[1], reference=train)] if val is not None else []
        params = {"objective": "regression", "learning_rate": p["learning_rate"], "max_depth": p["max_depth"],
                  "num_leaves": min(2 ** p["max_depth"] - 1, 255), "bagging_fraction": p["subsample"],
                  "bagging_freq": 1, "feature_fraction": p["colsample"], "seed": p["seed"], "verbose": -1,
                  "num_threads": p["threads"]}
        callbacks = [lgb.early_stopping(p["early_stopping"], verbose=False)] if sets else []
        self.booster_ = lgb.train(params, train, num_boost_round=p["n_estimators"], valid_sets=sets,
                                  callbacks=callbacks)

    def _raw_predict(self, A) -> np.ndarray:
        return self.booster_.predict(A, num_iteration=self.booster_.best_iteration or None)

    def _save_state(self, path: Path) -> dict:
        self.booster_.save_model(str(path / "lgbm.txt"))
        return {"target": self.target_.to_dict(), "file": "lgbm.txt"}

    def _load_state(self, path: Path, state: dict) -> None:
        import lightgbm as lgb

        self.target_ = TargetTransform.from_dict(state["target"])
        self.booster_ = lgb.Booster(model_file=str(path / state["file"]))
