"""The six regressor families of the layerwise paper (§5.2), one factory each, seeded where the estimator is random.
Sizes are modest: a (device, layer type, metric) group holds tens to hundreds of layers."""

from __future__ import annotations

from .base import register


@register("xgb")
def xgb(seed: int):
    from xgboost import XGBRegressor

    return XGBRegressor(n_estimators=300, max_depth=5, learning_rate=0.05, subsample=0.9, random_state=seed,
                        n_jobs=1, verbosity=0)


@register("ert")
def ert(seed: int):
    from sklearn.ensemble import ExtraTreesRegressor

    return ExtraTreesRegressor(n_estimators=200, min_samples_leaf=1, random_state=seed, n_jobs=1)


@register("knn")
def knn(seed: int):
    from sklearn.neighbors import KNeighborsRegressor

    return KNeighborsRegressor(n_neighbors=4, weights="distance")


@register("mlp")
def mlp(seed: int):
    from sklearn.neural_network import MLPRegressor

    return MLPRegressor(hidden_layer_sizes=(64, 64), alpha=1e-3, learning_rate_init=3e-3, max_iter=3000,
                        random_state=seed)


@register("linear")
def linear(seed: int):
    from sklearn.linear_model import Ridge

    return Ridge(alpha=1e-3)


@register("svr")
def svr(seed: int):
    from sklearn.svm import SVR

    return SVR(C=10.0, epsilon=0.05, gamma="scale")
