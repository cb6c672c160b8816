"""Prediction intervals: how far off a prediction may be, from how far off the model was on programs it did not fit.

Split-conformal (Vovk et al.; Lei et al. 2018), on the log scale: the model's log errors log(measured / predicted)
on its validation programs (a split's `val` part: tasks of the training networks, never fitted; the ensemble's gate,
residual stage and the neural members' early stopping read them, which makes the bounds a little narrow: see
`bench/intervals.py` for their coverage on unseen networks) are sorted, and the interval at `level` L multiplies a
prediction by the ⌊(n + 1)(1 − L)/2⌋-th and the ⌈(n + 1)(1 + L)/2⌉-th smallest of them, exponentiated.
Asymmetric on purpose: where the model under-predicts, the interval reaches further up.

The bounds are fitted per program region (`models.ensemble.annotation_region`: has a parallel loop × has a
vectorized loop; TVM's untuned default kernels have neither and are predicted about twice as tightly as scheduled
programs); a region with fewer than `REGION_MIN_PROGRAMS` validation programs uses the bounds of all of them.
The members' disagreement was tried as a per-program scale (normalized conformal) and gave no narrower intervals at
the same coverage (rank correlation with the error ~0.2), so the region is the only condition.

`perfcast train` stores the table in the model (`info.intervals`); `python bench/intervals.py --save` fits it for a
model trained before (the bundled one). A whole network's interval takes every kernel at its lower bound, then at
its upper one (`perfcast.e2e.predict`): its kernels' errors taken as fully correlated, which is what a device-wide
bias does and what a network's many kernels would otherwise average away.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import PerfcastError

INTERVAL_LEVEL = 0.8
REGION_MIN_PROGRAMS = 50  # validation programs a region needs for its own bounds
MIN_PROGRAMS = 20  # fewer validation programs: no interval at all


def check_level(level: float) -> float:
    lv = float(level)
    if not (math.isfinite(lv) and 0 < lv < 1):
        raise PerfcastError(f"interval level {level!r} must be between 0 and 1 (0.8: the range that holds 8 of 10 "
                            "measurements)")
    return lv


def conformal_bounds(log_ratio, level: float = INTERVAL_LEVEL) -> tuple[float, float]:
    """(low, high) factors from log errors log(measured / predicted): the ⌊(n+1)(1−L)/2⌋-th and ⌈(n+1)(1+L)/2⌉-th
    smallest, exponentiated (ranks clipped to 1..n)."""
    lv = check_level(level)
    r = np.sort(np.asarray(log_ratio, np.float64))
    n = len(r)
    if n == 0:
        raise PerfcastError("no validation programs to fit an interval on")
    eps = 1e-9  # (1 - 0.8) / 2 is 0.0999...: 20 x it must still floor to rank 2
    lo = min(max(int(math.floor((n + 1) * (1 - lv) / 2 + eps)), 1), n)
    hi = min(max(int(math.ceil((n + 1) * (1 + lv) / 2 - eps)), 1), n)
    return float(np.exp(r[lo - 1])), float(np.exp(r[hi - 1]))


def fit_intervals(measured_s, predicted_s, regions, level: float = INTERVAL_LEVEL) -> dict | None:
    """{"level", "n", "all": [low, high], "regions": {region: [low, high]}} from validation programs' measured and
    predicted latencies and their regions; None below `MIN_PROGRAMS` programs."""
    lv = check_level(level)
    y, p = np.asarray(measured_s, np.float64), np.asarray(predicted_s, np.float64)
    regions = np.asarray(regions)
    if not (len(y) == len(p) == len(regions)):
        raise PerfcastError(f"{len(y)} measured, {len(p)} predicted latencies and {len(regions)} regions differ")
    ok = (y > 0) & (p > 0) & np.isfinite(y) & np.isfinite(p)
    if ok.sum() < MIN_PROGRAMS:
        return None
    r, g = np.log(y[ok] / p[ok]), regions[ok]
    table = {"level": lv, "n": int(ok.sum()), "all": list(conformal_bounds(r, lv)), "regions": {}}
    for reg in np.unique(g):
        sel = g == reg
        if sel.sum() >= REGION_MIN_PROGRAMS:
            table["regions"][str(int(reg))] = list(conformal_bounds(r[sel], lv))
    return table


def interval_factors(table: dict, regions) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) factors per program of `regions` from a `fit_intervals` table."""
    regions = np.asarray(regions)
    low = np.full(len(regions), table["all"][0], np.float64)
    high = np.full(len(regions), table["all"][1], np.float64)
    for reg, (lo, hi) in table["regions"].items():
        sel = regions == int(reg)
        low[sel], high[sel] = lo, hi
    return low, high


def model_intervals(model) -> dict | None:
    """The interval table stored in a trained model (`info_["intervals"]`), else None."""
    return (getattr(model, "info_", None) or {}).get("intervals")


def program_regions(X) -> np.ndarray:
    """(n,) region of each program (features `X`) that its bounds are fitted for: `annotation_region`."""
    from ..models.ensemble import annotation_region

    return annotation_region(X)


def validation_intervals(model, X_val, y_val, level: float = INTERVAL_LEVEL) -> dict | None:
    """`fit_intervals` of a fitted model on its validation programs (features `X_val`, latencies `y_val`)."""
    if len(y_val) < MIN_PROGRAMS:
        return None
    table = fit_intervals(y_val, model.predict(X_val), program_regions(X_val), level)
    return None if table is None else {**table, "fitted_on": "validation"}


def inside(table: dict, regions, measured_s, predicted_s) -> np.ndarray:
    """(n,) bool: each program's measured latency lies in `table`'s interval around its prediction."""
    lo, hi = interval_factors(table, regions)
    y, p = np.asarray(measured_s, np.float64), np.asarray(predicted_s, np.float64)
    return (y >= p * lo) & (y <= p * hi)


def interval_coverage(table: dict, X, measured_s, predicted_s) -> dict:
    """{"level", "coverage"}: the share of programs (features `X`) whose measured latency lies in the interval
    of `table` around its prediction (what `perfcast train` and `perfcast eval` report on the test part)."""
    held = inside(table, program_regions(X), measured_s, predicted_s)
    return {"level": table["level"], "coverage": float(held.mean()) if len(held) else float("nan")}


def save_intervals(model_dir, table: dict) -> None:
    """Store an interval table in the saved model at `model_dir` (`model.json` info.intervals)."""
    from ..models.base import update_model_info

    update_model_info(model_dir, "intervals", table)
