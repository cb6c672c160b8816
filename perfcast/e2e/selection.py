"""Selection-aware prediction of a tuned kernel: the winner's curse of a search, corrected.

A meta-schedule search measures many candidate programs of a task and keeps the one that measured fastest. A cost
model's prediction of that kept program is biased high, even when the model is unbiased on programs in general: among
n candidates whose true times scatter around the model's predictions, the one that measured fastest is, more often
than not, one the model over-predicted. On the rocketlake host the bundled model predicted the kept programs of the
training networks' searches 1.88x (resnet18) and 1.56x (bert_mini) too slow, time-weighted against the collector's
isolated timing (`bench/selection.py`); on the by_network test, each task's measured-fastest random program 1.30x
(median), its own first choice 0.87x (`bench/within_task.py`).

The correction uses only what the database says about the search, not its measured times: the set of candidates the
search measured successfully. With the model's predictions p_1..p_n of them and a log-normal error of spread
`sigma` (the true time of candidate i is p_i * exp(sigma * z_i), z_i independent standard normal), the kept
program's time is the minimum over the candidates, and its median t solves

    prod_i Phi(-(ln t - ln p_i) / sigma) = 1/2,

so n = 1 gives p_1 and sigma = 0 gives min_i p_i. This assumes the search measured on the device being predicted:
with a database tuned on another machine the kept program was not chosen by this device's times, the curse is
weaker, and the correction over-corrects (`--selection-sigma 0` turns it off). `SELECTION_SIGMA` is fitted on the training networks' searches
(`bench/selection.py`); a search's candidates are mutations of each other, so it is smaller than the model's error
over random programs.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import PerfcastError

SELECTION_SIGMA = 0.2  # bench/selection.py on resnet18 and bert_mini searches, 2026-11-27 (see the module docstring)


def check_sigma(sigma: float) -> float:
    s = float(sigma)
    if not (math.isfinite(s) and 0 <= s <= 2):
        raise PerfcastError(f"selection sigma {sigma!r} must be between 0 and 2 (the model's log-normal error "
                            f"among a search's candidates; {SELECTION_SIGMA} by default, 0 predicts the kept "
                            "program alone)")
    return s


def fastest_of(predicted_s, sigma: float) -> float:
    """Median of the minimum of independent log-normal times with medians `predicted_s` and log-spread `sigma`."""
    from scipy.optimize import brentq
    from scipy.special import log_ndtr

    p = np.asarray(predicted_s, float)
    if p.size == 0 or not (np.isfinite(p).all() and (p > 0).all()):
        raise PerfcastError(f"predicted times {p.tolist()[:5]} must be positive and finite")
    sigma = check_sigma(sigma)
    if p.size == 1 or sigma == 0:
        return float(p.min())
    lp = np.log(p)

    def f(u):  # log P(min > e^u) - log 1/2, decreasing in u
        return float(log_ndtr(-(u - lp) / sigma).sum()) - math.log(0.5)

    lo, hi = lp.min() - 10 * sigma, lp.min()  # P(min > min p) <= 1/2: the root lies below min p
    return float(math.exp(brentq(f, lo, hi, xtol=1e-10)))


def search_candidates(db_dir: str) -> dict:
    """Structural task key -> [IRModule of every candidate the search measured successfully] of a meta-schedule JSON
    database (failed builds and runs are not candidates; run_secs are not read otherwise)."""
    from .._tvm.util import main_func, structural_key
    from ..data.importer import database_records

    out: dict = {}
    for r in database_records(db_dir):
        if r.measured:
            out.setdefault(structural_key(main_func(r.workload_mod)), []).append(r.program())
    return out


def candidate_predictions(keys, db_dir: str, spec, model) -> dict:
    """Task key -> the model's predictions (s) of the search's candidates, for the `keys` with more than one
    candidate (one batch of features for all of them)."""
    from ..features.cache import features_of_programs

    keys = set(keys)
    cands = {k: c for k, c in search_candidates(db_dir).items() if k in keys and len(c) > 1}
    flat = [p for c in cands.values() for p in c]
    pred = iter(model.predict(features_of_programs(flat, spec, asm=model.needs_asm)) if flat else [])
    return {k: np.array([next(pred) for _ in c]) for k, c in cands.items()}
