"""Cost models: a registry of estimators with fit / predict / save / load (importing this imports no torch).

- `cdmpp`: CDMPP's compact-AST Transformer with device features (the perfcast predictor)
- `xgb`, `lgbm`: gradient-boosted trees on TVM's per-store features, summed (the Ansor / Tenset baseline)
- `mlp`: the TensetMLP baseline (per-store MLP, summed)
- `ensemble`: the geometric mean of several of these (default: cdmpp and mlp)
"""

from . import cdmpp, ensemble, gbdt, tenset_mlp  # noqa: F401  (register the models)
from ._torch import WEIGHT_AVERAGES
from .base import CostModel, get_model, list_models, load_model, register
from .losses import LOSSES
from .targets import TRANSFORMS, TargetTransform

__all__ = ["CostModel", "get_model", "list_models", "load_model", "register", "LOSSES", "TRANSFORMS",
           "TargetTransform", "WEIGHT_AVERAGES"]
