"""Layerwise multi-metric models (the layerwise paper, `ai-driven-performance-modeling-inference.txt`).

- `suite`: the paper's layer configurations as collectable Relax modules (`layers:CONFIGS.json[@N]`)
- `layer`: a layer from a TIR kernel or from a row of hyper-parameters, and its feature vector
- `table`: training tables from a perfcast dataset or the TVM_Profiling_Dataset CSV
- `base`, `regressors`: the registry of regressor families (xgb, ert, knn, mlp, linear, svr)
- `model`: per (device, layer type, metric) model selection, prediction, energy, save/load
"""

from .base import list_families, make_regressor
from .layer import FEATURES, LAYER_TYPES, Layer, features, layer_of_row, layer_of_tir
from .model import LayerwiseModel, holdout_eval
from .table import METRICS, load_table

__all__ = ["FEATURES", "LAYER_TYPES", "METRICS", "Layer", "LayerwiseModel", "features", "holdout_eval",
           "layer_of_row", "layer_of_tir", "list_families", "load_table", "make_regressor"]
