"""Evaluating performance models: named dataset splits and accuracy metrics (numpy/pandas/scipy only).

- `splits`: `get_split(name, **params)(df, seed) -> Split` (train/val/test positional indices); names in `SPLITS`;
  `held_out_task_mask(df)`: the records of the by_network test networks' tasks
- `metrics`: mape, rmse, accuracy_within, r2, kendall_tau_by_group, top_k_score, and `summarize` for all of them;
  `label_noise_split`: a model's log error split into its own and its labels' noise (two readings per program)
"""

from .metrics import (accuracy_within, kendall_tau_by_group, label_noise_split, lognormal_mape, mape, r2, rmse,
                      summarize, top_k_score)
from .splits import (SPLITS, Split, by_device, by_network, by_task, get_split, list_splits, random_split,
                     held_out_task_mask)

__all__ = ["SPLITS", "Split", "get_split", "list_splits", "random_split", "by_network", "by_task", "by_device",
           "held_out_task_mask", "mape", "rmse", "accuracy_within", "r2", "kendall_tau_by_group", "top_k_score",
           "summarize", "label_noise_split", "lognormal_mape"]
