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
weaker, and the correction over-corrects (`--selection-sigma 0` turns it off).

Sigma belongs to the model: a model that flattens the differences between a task's programs less needs a smaller
one. It is fitted on the training networks' searches against their tuned kernels timed alone (`fit_sigma`,
`bench/selection.py --save`) and stored in the model's `model.json` (`info.selection`); a model without one uses
`SELECTION_SIGMA`. A search's candidates are mutations of each other, so sigma is smaller than the model's error
over random programs.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import PerfcastError

SELECTION_SIGMA = 0.2  # bench/selection.py on resnet18 and bert_mini searches, 2026-11-27 (see the module docstring)
SIGMA_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)  # the sigmas `fit_sigma` tries


def model_sigma(model) -> float:
    """The selection sigma fitted for `model` (a cost model; `info_["selection"]["sigma"]`), else SELECTION_SIGMA."""
    fitted = (getattr(model, "info_", None) or {}).get("selection") or {}
    return check_sigma(fitted.get("sigma", SELECTION_SIGMA))


def check_sigma(sigma: float) -> float:
    s = float(sigma)
    if not (math.isfinite(s) and 0 <= s <= 2):
        raise PerfcastError(f"selection sigma {sigma!r} must be between 0 and 2 (the model's log-normal error "
                            f"among a search's candidates; by default the model's fitted one, else "
                            f"{SELECTION_SIGMA}; 0 predicts the kept program alone)")
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


def network_ratios(network: str, samples: list[dict], model, spec, sigmas) -> dict:
    """{"kept": ratio, sigma: ratio, ..., "kernels", "tuned_kernels"} of one network's tuned kernels timed alone
    (`samples`: `perfcast context --samples-out` rows of one `tuned:DB` schedule set): the time-weighted ratio
    sum(calls x predicted) / sum(calls x measured alone), each tuned kernel predicted as the kept program
    (`kept`) and as the fastest of its search's candidates with each sigma (kernels the search did not tune count
    with their plain prediction in both). 1.00 is unbiased."""
    from ..features.cache import features_of_programs
    from .predict import lower_network

    sched = samples[0]["schedules"]
    if not sched.startswith("tuned:") or any(s["schedules"] != sched or s["network"] != network for s in samples):
        raise PerfcastError(f"the samples of {network!r} must be of one tuned:DB schedule set, got "
                            f"{sorted({(s['network'], s['schedules']) for s in samples})}")
    low = lower_network(network, 1, spec, sched)
    keys = [s["workload_key"] for s in samples]
    kept = model.predict(features_of_programs([low.programs[k] for k in keys], spec, asm=model.needs_asm))
    per_cand = candidate_predictions(keys, sched.partition(":")[2], spec, model)
    calls = np.array([s["calls"] for s in samples], float)
    meas = float((calls * np.array([s["isolated_s"] for s in samples], float)).sum())
    out = {"kernels": len(keys), "tuned_kernels": len(per_cand), "kept": float((calls * kept).sum() / meas)}
    for sg in sigmas:
        p = [fastest_of(per_cand[k], sg) if k in per_cand else kept[i] for i, k in enumerate(keys)]
        out[sg] = float((calls * np.array(p)).sum() / meas)
    return out


def fit_sigma(samples: list[dict], networks: list[str], model, spec, sigmas=SIGMA_GRID) -> tuple[float, dict]:
    """(the sigma of `sigmas` that minimises the mean |log ratio| over `networks`, {network: network_ratios})
    from context samples (`perfcast context NET@tuned:DB --samples-out FILE` rows) of those networks' tuned
    kernels. Fit on training networks only: the networks a model is scored on must not choose its sigma."""
    if not networks:
        raise PerfcastError("fit_sigma needs at least one network with tuned kernels timed alone")
    sigmas = [check_sigma(s) for s in sigmas]
    out = tuned_ratios(samples, networks, model, spec, sigmas)
    score = {sg: float(np.mean([abs(math.log(out[n][sg])) for n in networks])) for sg in sigmas}
    return min(sigmas, key=lambda sg: (score[sg], sg)), out


def tuned_ratios(samples: list[dict], networks: list[str], model, spec, sigmas) -> dict:
    """{network: network_ratios} of each network's tuned kernels among context samples; a network without tuned
    samples is an error naming the command that measures them."""
    out = {}
    for net in networks:
        mine = [s for s in samples if s["network"] == net and s["schedules"].startswith("tuned:")]
        if not mine:
            raise PerfcastError(f"the samples have no tuned kernels of {net!r}; measure them with `perfcast context "
                                f"{net}@tuned:DB --out FILE --samples-out SAMPLES`")
        out[net] = network_ratios(net, mine, model, spec, sigmas)
    return out


def save_sigma(model_dir, sigma: float, networks: list[str], device_key: str) -> None:
    """Store a fitted sigma in the saved model at `model_dir` (`model.json` info.selection), read by `model_sigma`."""
    from ..models.base import update_model_info

    update_model_info(model_dir, "selection", {"sigma": check_sigma(sigma), "networks": list(networks),
                                               "device": device_key})
