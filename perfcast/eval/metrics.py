"""Accuracy metrics of latency predictions: pure numpy/scipy functions of measured `y` and predicted `p`.

`y` and `p` are 1-D arrays of equal length in the same unit (e.g. seconds); `y` must be positive and finite (failed
measurements dropped), `p` finite. `groups` names each record's task (its `workload_key`); `weights` is the task's
weight in the networks evaluated (a record's `task_weight`). Fractions are fractions, not percentages: mape 0.12
means 12 %. A bad input raises PerfcastError with a one-line message naming the problem; a metric that is undefined
on valid input (r2 of constant `y`, kendall_tau with no rankable group) is nan.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator

import numpy as np
from scipy import stats

from ..errors import PerfcastError

ACCURACY_TOLERANCES = {"acc_5": 0.05, "acc_10": 0.10, "acc_20": 0.20}


# -------------------------------------------------------------------------------------------------------- validation


def _vector(values: Any, what: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise PerfcastError(f"metrics: {what} are not numbers ({e})") from e
    if arr.ndim != 1:
        raise PerfcastError(f"metrics: {what} must be a 1-D array, got shape {arr.shape}")
    return arr


def _first_bad(arr: np.ndarray, bad: np.ndarray) -> str:
    i = int(np.flatnonzero(bad)[0])
    return f"{int(bad.sum())} of {len(arr)} (first: index {i} = {float(arr[i])!r})"


def _check(y: Any, p: Any) -> tuple[np.ndarray, np.ndarray]:
    """`y` and `p` as float arrays, after checking lengths, measured values and predictions."""
    y, p = _vector(y, "measured values"), _vector(p, "predictions")
    if len(y) != len(p):
        raise PerfcastError(f"metrics: {len(y)} measured values but {len(p)} predictions; pass one per record")
    if len(y) == 0:
        raise PerfcastError("metrics: no records to evaluate (empty arrays); check the split and the filters")
    bad_y = ~(np.isfinite(y) & (y > 0))
    if bad_y.any():
        raise PerfcastError(f"metrics: {_first_bad(y, bad_y)} measured values are not positive and finite; "
                            "drop failed measurements (status != 'ok') first")
    bad_p = ~np.isfinite(p)
    if bad_p.any():
        raise PerfcastError(f"metrics: {_first_bad(p, bad_p)} predictions are not finite; check the model output")
    return y, p


def _group_codes(groups: Any, n: int) -> np.ndarray:
    """Integer code per record (0..n_groups-1, in sorted order of the group names)."""
    g = np.asarray(groups)
    if g.ndim != 1 or len(g) != n:
        raise PerfcastError(f"metrics: {len(g) if g.ndim == 1 else g.shape} groups for {n} records; "
                            "pass one group (task) per record")
    return np.unique(g, return_inverse=True)[1].reshape(-1)


def _group_indices(codes: np.ndarray) -> Iterator[np.ndarray]:
    """Positions of each group's records, in input order within the group."""
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    yield from np.split(order, bounds)


def _check_weights(weights: Any, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = _vector(weights, "weights")
    if len(w) != n:
        raise PerfcastError(f"metrics: {len(w)} weights for {n} records; pass one weight per record")
    bad = ~(np.isfinite(w) & (w >= 0))
    if bad.any():
        raise PerfcastError(f"metrics: {_first_bad(w, bad)} weights are not finite and non-negative")
    return w


# ---------------------------------------------------------------------------------------------------------- metrics


def mape(y: Any, p: Any) -> float:
    """Mean absolute percentage error, as a fraction: mean_i |p_i - y_i| / y_i."""
    y, p = _check(y, p)
    return float(np.mean(np.abs(p - y) / y))


def rmse(y: Any, p: Any) -> float:
    """Root mean squared error, in the unit of y: sqrt(mean_i (p_i - y_i)^2)."""
    y, p = _check(y, p)
    return float(np.sqrt(np.mean((p - y) ** 2)))


def accuracy_within(y: Any, p: Any, tol: float) -> float:
    """Fraction of records predicted within a relative tolerance: mean_i [ |p_i - y_i| / y_i <= tol ]."""
    y, p = _check(y, p)
    return float(np.mean(np.abs(p - y) / y <= tol))


def r2(y: Any, p: Any) -> float:
    """Coefficient of determination: 1 - sum_i (y_i - p_i)^2 / sum_i (y_i - mean(y))^2; nan when y is constant
    (scikit-learn's r2_score returns 1.0 or 0.0 there instead)."""
    y, p = _check(y, p)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0.0:
        return float("nan")
    return float(1.0 - np.sum((y - p) ** 2) / ss_tot)


def _kendall_tau(y: np.ndarray, p: np.ndarray) -> float:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return float(stats.kendalltau(y, p).statistic)


def kendall_tau_by_group(y: Any, p: Any, groups: Any) -> float:
    """Mean rank correlation within groups: mean over groups g with >= 2 distinct y of tau_b(y_g, p_g), scipy's
    kendalltau (tau-b). Groups whose tau is undefined (constant predictions) are left out of the mean; nan when no
    group remains."""
    y, p = _check(y, p)
    taus = [_kendall_tau(y[idx], p[idx]) for idx in _group_indices(_group_codes(groups, len(y)))
            if len(np.unique(y[idx])) >= 2]
    taus = [t for t in taus if np.isfinite(t)]
    return float(np.mean(taus)) if taus else float("nan")


def top_k_score(y: Any, p: Any, groups: Any, weights: Any = None, k: int = 1) -> float:
    """Tenset's top-k score of choosing programs by predicted latency (1.0: the best measured program is picked).

    Per task g: picks_g = the k records of g with the lowest p (all of g if it has fewer; ties go to the earlier
    record), score_g = min(y_g) / min(y[picks_g]). Overall: sum_g w_g * score_g / sum_g w_g, with w_g the weight of
    g's first record (all 1 when `weights` is None). For k = 1 this is Tenset's "average peak score@1"; for k > 1
    Tenset's train_model.py averages the best-so-far curve over the k picks, which this does not.
    """
    y, p = _check(y, p)
    if int(k) != k or k < 1:
        raise PerfcastError(f"metrics: top-k needs an integer k >= 1, got {k!r}")
    w = _check_weights(weights, len(y))
    scores, task_w = [], []
    for idx in _group_indices(_group_codes(groups, len(y))):
        picks = idx[np.argsort(p[idx], kind="stable")[:int(k)]]
        scores.append(y[idx].min() / y[picks].min())
        task_w.append(w[idx[0]])
    total = float(np.sum(task_w))
    if total <= 0:
        raise PerfcastError("metrics: the task weights sum to 0; pass positive weights (a record's task_weight)")
    return float(np.dot(task_w, scores) / total)


def summarize(y: Any, p: Any, groups: Any = None, weights: Any = None) -> dict[str, float]:
    """All metrics in one JSON-able dict of Python floats (`n` is an int): n, mape, rmse, acc_5, acc_10, acc_20,
    r2, and, when `groups` is given, kendall_tau, top1 and top5 (weighted by `weights`, which need `groups`)."""
    y, p = _check(y, p)
    if weights is not None and groups is None:
        raise PerfcastError("metrics: weights are per-task and need groups; pass groups (the workload keys) too")
    out: dict[str, float] = {"n": int(len(y)), "mape": mape(y, p), "rmse": rmse(y, p)}
    out.update({key: accuracy_within(y, p, tol) for key, tol in ACCURACY_TOLERANCES.items()})
    out["r2"] = r2(y, p)
    if groups is not None:
        out["kendall_tau"] = kendall_tau_by_group(y, p, groups)
        out["top1"] = top_k_score(y, p, groups, weights, k=1)
        out["top5"] = top_k_score(y, p, groups, weights, k=5)
    return out


def lognormal_mape(rms: float) -> float:
    """E|exp(Z) - 1| for Z ~ N(0, rms^2): the MAPE a log error of that root mean square gives (when normal).
    Closed form: E[X - 1] + 2 E[(1 - X)+] for X = exp(Z) is exp(rms^2 / 2) (2 Phi(rms) - 1)."""
    if not np.isfinite(rms) or rms < 0:
        raise PerfcastError(f"metrics: a root mean square log error of {rms!r}; pass a finite value >= 0")
    return float(np.exp(rms ** 2 / 2) * (2 * stats.norm.cdf(rms) - 1))


def label_noise_split(y: Any, y_again: Any, p: Any) -> dict[str, float]:
    """A model's squared log error against labels `y`, split into its own and the labels' noise, from a second,
    independent reading `y_again` of every program (another sitting, its day's speed divided out).

    With e = log(p / y) and e' = log(p / y_again), the two readings' noises independent of each other and of the
    model's error against the latency the timer reads on average, E[e e'] is the model's own mean squared log error
    and E[e^2] - E[e e'] the noise of `y`. Returned: n, total_rms, model_rms, label_noise_rms (roots of those means;
    a sample whose noise estimate comes out negative gives 0), model_share (E[e e'] / E[e^2]), each rms as MAPE
    (`lognormal_mape`), floor_mape (`y_again` as a prediction of `y`), and the model's MAPE against each reading."""
    y, p = _check(y, p)
    y_again, _ = _check(y_again, p)
    e, e_again = np.log(p / y), np.log(p / y_again)
    total_sq, model_sq = float(np.mean(e ** 2)), float(np.mean(e * e_again))
    model_rms = float(np.sqrt(max(model_sq, 0.0)))
    noise_rms = float(np.sqrt(max(total_sq - model_sq, 0.0)))
    return {"n": int(len(y)), "total_rms": float(np.sqrt(total_sq)), "model_rms": model_rms,
            "label_noise_rms": noise_rms, "model_share": model_sq / total_sq if total_sq > 0 else float("nan"),
            "model_rms_as_mape": lognormal_mape(model_rms), "label_noise_rms_as_mape": lognormal_mape(noise_rms),
            "floor_mape": mape(y, y_again), "model_mape": mape(y, p), "model_mape_again": mape(y_again, p)}
