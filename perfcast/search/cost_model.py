"""A perfcast model as the cost model of TVM meta-schedule's evolutionary search.

meta-schedule's search (`ms.tune_tir`, `ms.relax_integration.tune_relax`, `perfcast tune --cost-model perfcast`)
asks its cost model to score thousands of candidate programs per round (a population of 512, four genetic
iterations) and measures the 16 it likes best. TVM's own model (`xgb`) starts each tuning run knowing nothing and
learns from those measurements; a perfcast model arrives trained on the bundled data (the Tenset / TLP premise: a
pre-trained model ranks well from the first round, where the untrained one ranks at random). The TPU paper (§5) and
Pruner (§2.4) use their learned models the same way.

`perfcast_cost_model(model, device)` returns a `ms.cost_model.PyCostModel`: `predict` turns each candidate's
scheduled program into perfcast features (`features_of_programs`, the same path as `perfcast predict-records`) and
returns 1 / predicted latency in microseconds (higher is better, as meta-schedule expects); programs already scored
in this run come from a cache keyed by structural hash (a population repeats many of its members). `update` does
not train the model (it stays what was loaded); it keeps the search's measurements beside the predictions so
`stats` can say how well the model ranked what the search measured. A model that reads assembly features
(`needs_asm`, the bundled ensemble) builds every candidate with LLVM first: about 0.7 s per program on this 2-core
machine, half an hour per round; so the default is the bundled search model, a tree model without them
(`perfcast train --model lgbm --param features=program --param target_scale=work --default-weight 30`, 8 min),
~11-15 ms per program.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import PerfcastError, UnknownNameError


@dataclass
class SearchStats:
    """What the cost model did during one search (mutable: it fills as the search runs)."""

    predict_calls: int = 0
    programs_scored: int = 0  # distinct programs featurized and predicted
    cache_hits: int = 0  # candidates scored from the cache
    failed: int = 0  # programs whose features could not be computed (scored worst)
    predict_s: float = 0.0  # wall time inside `predict`
    measured: dict = field(default_factory=dict)  # task name -> [(predicted_s, measured_s)]

    def rank_correlation(self) -> dict[str, float]:
        """Kendall tau-b per task between predicted and measured latency of the programs the search measured
        (tasks with fewer than 3 measured programs are left out)."""
        from scipy.stats import kendalltau

        out = {}
        for task, pairs in self.measured.items():
            if len(pairs) >= 3:
                p, y = np.asarray(pairs).T
                out[task] = float(kendalltau(p, y).statistic)
        return out

    def summary(self) -> dict:
        """JSON-safe figures: counts, seconds, seconds per scored program, Kendall tau per task (None where the
        measured or predicted times are all equal) and its mean."""
        taus = self.rank_correlation()
        finite = [t for t in taus.values() if math.isfinite(t)]
        return {"predict_calls": self.predict_calls, "programs_scored": self.programs_scored,
                "cache_hits": self.cache_hits, "failed": self.failed, "predict_s": self.predict_s,
                "s_per_program": self.predict_s / self.programs_scored if self.programs_scored else None,
                "measured_programs": sum(len(v) for v in self.measured.values()),
                "kendall_tau_by_task": {k: t if math.isfinite(t) else None for k, t in taus.items()},
                "kendall_tau_mean": float(np.mean(finite)) if finite else None}

    def describe(self) -> str:
        """One line for a person."""
        s = self.summary()
        per = f" ({1e3 * s['s_per_program']:.0f} ms each)" if s["s_per_program"] else ""
        tau = (f"; rank correlation with the search's {s['measured_programs']} measurements: Kendall tau "
               f"{s['kendall_tau_mean']:.2f} (mean of {len(s['kendall_tau_by_task'])} tasks)"
               if s["kendall_tau_mean"] is not None else "")
        return (f"perfcast cost model: {s['programs_scored']} programs scored in {s['predict_s']:.1f} s{per}, "
                f"{s['cache_hits']} from the cache, {s['failed']} failed{tau}")


def perfcast_cost_model(model=None, device: str = "local"):
    """A meta-schedule cost model (`ms.cost_model.PyCostModel`) backed by a perfcast model: `model` is a loaded
    model, a model directory or None (the bundled search model, `paths.bundled_search_model_dir()`: `lgbm` on the
    pooled program vector, no assembly, trained like the bundled ensemble's tree member on the by_network split);
    `device` the device id whose features the predictions use (the device the search measures on). The returned
    object has a `stats` attribute (`SearchStats`)."""
    import tvm_ffi
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from .. import paths
    from ..devices import get_device
    from ..features.cache import features_of_programs
    from ..models import load_model

    m = model if hasattr(model, "predict") else load_model(model or paths.bundled_search_model_dir())
    spec = get_device(device)

    @derived_object
    class PerfcastCostModel(ms.cost_model.PyCostModel):
        def __init__(self):
            super().__init__()
            self.stats = SearchStats()
            self._cache: dict[int, float] = {}  # structural hash -> predicted latency (s); inf: failed

        def _latencies(self, mods: list, count_hits: bool = True) -> np.ndarray:
            keys = [tvm_ffi.structural_hash(mod) for mod in mods]
            todo = {}
            for k, mod in zip(keys, mods):
                if k not in self._cache and k not in todo:
                    todo[k] = mod
            if count_hits:
                self.stats.cache_hits += len(keys) - len(todo)
            if todo:
                self._cache.update(zip(todo, self._score(list(todo.values()))))
                self.stats.programs_scored += len(todo)
            return np.array([self._cache[k] for k in keys], dtype=np.float64)

        def _score(self, mods: list) -> np.ndarray:
            try:
                return np.asarray(m.predict(features_of_programs(mods, spec, asm=m.needs_asm)), np.float64)
            except Exception:  # noqa: BLE001 - one program the extractors cannot read must not stop the search
                if len(mods) == 1:
                    self.stats.failed += 1
                    return np.array([math.inf])
                return np.concatenate([self._score([mod]) for mod in mods])

        def predict(self, context, candidates) -> np.ndarray:
            t0 = time.perf_counter()
            lat = self._latencies([c.sch.mod for c in candidates])
            self.stats.predict_calls += 1
            self.stats.predict_s += time.perf_counter() - t0
            with np.errstate(divide="ignore"):
                return np.where(np.isfinite(lat) & (lat > 0), 1e-6 / lat, 0.0)

        def update(self, context, candidates, results) -> None:
            mods = [c.sch.mod for c in candidates]
            lat = self._latencies(mods, count_hits=False)  # the search measures candidates it had scored
            pairs = self.stats.measured.setdefault(str(context.task_name), [])
            for p, r in zip(lat, results):
                secs = [float(s) for s in (r.run_secs or [])]
                if r.error_msg is None and secs and math.isfinite(p):
                    pairs.append((float(p), float(np.median(secs))))

        def save(self, path: str) -> None:  # the model is a perfcast model directory; nothing learned here
            pass

        def load(self, path: str) -> None:
            raise PerfcastError("a perfcast cost model is loaded from a perfcast model directory "
                                "(perfcast_cost_model(model=DIR)), not from a meta-schedule file")

    return PerfcastCostModel()


COST_MODELS = ("xgb", "perfcast", "random")


def search_cost_model(name: str, model=None, device: str = "local"):
    """The cost model a search uses by name: meta-schedule's own `xgb` / `random` (returned as the string
    meta-schedule accepts), or `perfcast` (`perfcast_cost_model(model, device)`)."""
    if name not in COST_MODELS:
        raise UnknownNameError("cost model", name, list(COST_MODELS))
    if name == "perfcast":
        return perfcast_cost_model(model, device)
    if model is not None:
        raise PerfcastError(f"--model only applies to --cost-model perfcast (got --cost-model {name})")
    return name
