"""The regressor families the layerwise paper selects among (§5.2): XGBoost, extremely randomized trees, k nearest
neighbours, a multi-layer perceptron, linear regression and support-vector regression.

Each family is a factory `make(seed) -> sklearn estimator`. Every family sees the same inputs: the layer features
(`perfcast.layerwise.layer.FEATURES`) mapped by log2(1 + x) and standardized, and it is fitted on log(target) (the
prediction is exp of its output), so a linear model is a power law in the layer sizes.
"""

from __future__ import annotations

from typing import Callable

from ..errors import UnknownNameError

_FAMILIES: dict[str, Callable] = {}


def register(name: str):
    def deco(fn):
        _FAMILIES[name] = fn
        return fn
    return deco


def list_families() -> list[str]:
    return list(_FAMILIES)


def make_regressor(name: str, seed: int = 0):
    """A fresh, unfitted pipeline of family `name` (input log-scaling + standardization + regressor on log y)."""
    if name not in _FAMILIES:
        raise UnknownNameError("regressor family", name, list_families(),
                               "choose among them with --families, e.g. --families ert,xgb")
    import numpy as np
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    pipe = make_pipeline(FunctionTransformer(np.log1p), StandardScaler(), _FAMILIES[name](seed))
    return TransformedTargetRegressor(regressor=pipe, func=np.log, inverse_func=np.exp, check_inverse=False)


from . import regressors  # noqa: E402,F401  (register the families)
