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
in this run come from a cache keyed by structural hash (a population repeats many of its members). `update` keeps
the search's measurements beside the predictions so `stats` can say how well the model ranked what the search
measured. With `online=True` (`perfcast tune --cost-model perfcast-online`) it also learns from them, as Moses
(§3, step 4) and Pruner (§2.5) keep adapting their pre-trained models inside the tuning loop: once a task has
`ONLINE_MIN_MEASURED` measured programs, a small gradient-boosted model on the pooled program vector
(`models.gbdt.program_matrix`, signed log1p) regresses log(measured / predicted) over that task's measurements and
multiplies every later prediction of the task by exp(its output). The loaded model itself is never changed.
Replayed on 30 meta-schedule databases (`bench/search_replay.py`), a correction fitted on a search's first 16
measurements raised Kendall tau on its later ones from .25 to .34; real searches: `bench/search.py --arms`.

A model that reads assembly features (`needs_asm`, the bundled ensemble) builds every candidate with LLVM first:
about 0.7 s per program on this 2-core machine, half an hour per round; so the default is the bundled search model,
a tree model without them (`perfcast train --model lgbm --param features=program --param target_scale=work
--default-weight 30`, 8 min), ~11-15 ms per program.
"""

from __future__ import annotations

import math
import time
import warnings
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
    online_fits: int = 0  # per-task corrections fitted (online=True)
    predict_s: float = 0.0  # wall time inside `predict`
    measured: dict = field(default_factory=dict)  # task name -> [(predicted_s, measured_s)]
    unseen_dtypes: dict = field(default_factory=dict)  # task name -> element types the model never trained on
    recomputing: int = 0  # scored programs that repeat loop-invariant work (`eval.coverage`: ranked blind)

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
                "cache_hits": self.cache_hits, "failed": self.failed, "online_fits": self.online_fits,
                "predict_s": self.predict_s,
                "s_per_program": self.predict_s / self.programs_scored if self.programs_scored else None,
                "measured_programs": sum(len(v) for v in self.measured.values()),
                "kendall_tau_by_task": {k: t if math.isfinite(t) else None for k, t in taus.items()},
                "kendall_tau_mean": float(np.mean(finite)) if finite else None,
                "unseen_dtypes": {k: v for k, v in self.unseen_dtypes.items() if v},
                "recomputing": self.recomputing}

    def describe(self) -> str:
        """One line for a person."""
        s = self.summary()
        per = f" ({1e3 * s['s_per_program']:.0f} ms each)" if s["s_per_program"] else ""
        tau = (f"; rank correlation with the search's {s['measured_programs']} measurements: Kendall tau "
               f"{s['kendall_tau_mean']:.2f} (mean of {len(s['kendall_tau_by_task'])} tasks)"
               if s["kendall_tau_mean"] is not None else "")
        online = f", {s['online_fits']} online corrections fitted" if s["online_fits"] else ""
        unseen = s["unseen_dtypes"]
        blind = (f"; {len(unseen)} task(s) in element types the model never trained on, ranked blind: "
                 + ", ".join(f"{t} ({', '.join(d)})" for t, d in unseen.items())) if unseen else ""
        recomputing = (f"; {s['recomputing']} of them repeat loop-invariant work, which the model cannot judge "
                       "(LLVM may or may not hoist it)") if s["recomputing"] else ""
        return (f"perfcast cost model: {s['programs_scored']} programs scored in {s['predict_s']:.1f} s{per}, "
                f"{s['cache_hits']} from the cache, {s['failed']} failed{recomputing}{online}{tau}{blind}")


ONLINE_MIN_MEASURED = 16  # measured programs of a task before its online correction is fitted (one search round)
# the correction: few shallow trees, as a search's few dozen measurements of one task allow
ONLINE_PARAMS = dict(n_estimators=60, learning_rate=0.1, num_leaves=4, min_child_samples=3, subsample=0.8,
                     subsample_freq=1, colsample_bytree=0.5, verbose=-1, n_jobs=1)


def signed_log1p(a: np.ndarray) -> np.ndarray:
    """sign(a) log(1 + |a|): what the correction sees of a program vector (counts spanning many decades)."""
    return np.sign(a) * np.log1p(np.abs(a))


class OnlineCorrection:
    """Per task, log(measured / predicted) of the programs a search measured, regressed on their pooled program
    vectors (see the module docstring); `factor(task, rows)` is 1 until the task has `min_measured` of them."""

    def __init__(self, min_measured: int = ONLINE_MIN_MEASURED, seed: int = 0):
        self.min_measured = min_measured
        self.seed = seed
        self.data_: dict[str, tuple[list, list]] = {}  # task -> ([program vector], [log residual])
        self.models_: dict = {}  # task -> fitted LGBMRegressor

    def add(self, task: str, rows: np.ndarray, predicted_s: np.ndarray, measured_s: np.ndarray) -> bool:
        """Record measurements of `task` (rows: their program vectors); refit its correction when it has enough.
        Returns whether a correction was fitted."""
        import lightgbm as lgb

        xs, rs = self.data_.setdefault(task, ([], []))
        xs.extend(signed_log1p(np.asarray(rows, np.float64)))
        rs.extend(np.log(np.asarray(measured_s, np.float64) / np.asarray(predicted_s, np.float64)))
        if len(rs) < self.min_measured:
            return False
        self.models_[task] = lgb.LGBMRegressor(**ONLINE_PARAMS, random_state=self.seed).fit(np.stack(xs),
                                                                                            np.array(rs))
        return True

    def factor(self, task: str, rows: np.ndarray) -> np.ndarray:
        """(n,) multiplier of the model's predicted latency for `task`'s programs with these vectors."""
        g = self.models_.get(task)
        if g is None or len(rows) == 0:
            return np.ones(len(rows))
        return np.exp(g.predict(signed_log1p(np.asarray(rows, np.float64))))


def perfcast_cost_model(model=None, device: str = "local", online: bool = False, seed: int = 0):
    """A meta-schedule cost model (`ms.cost_model.PyCostModel`) backed by a perfcast model: `model` is a loaded
    model, a model directory or None (the bundled search model, `paths.bundled_search_model_dir()`: `lgbm` on the
    pooled program vector, no assembly, trained like the bundled ensemble's tree member on the by_network split);
    `device` the device id whose features the predictions use (the device the search measures on); `online`: learn
    a per-task correction from the search's measurements (`OnlineCorrection`, seeded by `seed`). The returned
    object has a `stats` attribute (`SearchStats`)."""
    import tvm_ffi
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from .. import paths
    from ..devices import get_device
    from ..eval.coverage import RECOMPUTE_SHARE, program_dtypes, recomputed_share, unseen_dtypes
    from ..features.cache import features_of_programs
    from ..models import load_model
    from ..models.gbdt import program_matrix

    m = model if hasattr(model, "predict") else load_model(model or paths.bundled_search_model_dir())
    spec = get_device(device)

    @derived_object
    class PerfcastCostModel(ms.cost_model.PyCostModel):
        def __init__(self):
            super().__init__()
            self.stats = SearchStats()
            self.model = m  # the perfcast model (read-only)
            self._cache: dict[int, float] = {}  # structural hash -> predicted latency (s); inf: failed
            self._rows: dict[int, np.ndarray] = {}  # structural hash -> pooled program vector (online only)
            self.online = OnlineCorrection(seed=seed) if online else None

        def _latencies(self, mods: list, count_hits: bool = True) -> tuple[np.ndarray, list]:
            """(the model's predicted latency of each program, their structural hashes)."""
            keys = [tvm_ffi.structural_hash(mod) for mod in mods]
            todo = {}
            for k, mod in zip(keys, mods):
                if k not in self._cache and k not in todo:
                    todo[k] = mod
            if count_hits:
                self.stats.cache_hits += len(keys) - len(todo)
            if todo:
                self._cache.update(zip(todo, self._score(list(todo.values()), list(todo))))
                self.stats.programs_scored += len(todo)
            return np.array([self._cache[k] for k in keys], dtype=np.float64), keys

        def _score(self, mods: list, keys: list) -> np.ndarray:
            try:
                X = features_of_programs(mods, spec, asm=m.needs_asm)
                lat = np.asarray(m.predict(X), np.float64)
                self.stats.recomputing += sum(recomputed_share(mod) >= RECOMPUTE_SHARE for mod in mods)
                if self.online is not None:
                    self._rows.update(zip(keys, program_matrix(X)))
                return lat
            except Exception:  # noqa: BLE001 - one program the extractors cannot read must not stop the search
                if len(mods) == 1:
                    self.stats.failed += 1
                    return np.array([math.inf])
                return np.concatenate([self._score([mod], [k]) for mod, k in zip(mods, keys)])

        def predict(self, context, candidates) -> np.ndarray:
            t0 = time.perf_counter()
            task = str(context.task_name)
            if task not in self.stats.unseen_dtypes:  # once per task: its workload's element types
                self.stats.unseen_dtypes[task] = unseen = unseen_dtypes(m, program_dtypes(context.mod))
                if unseen:
                    warnings.warn(f"task {task!r} uses {', '.join(unseen)}, which none of the perfcast model's "
                                  "training programs use: it ranks this task's candidates blind; steer such tasks "
                                  "with --cost-model xgb", stacklevel=2)
            lat = self._corrected(task, *self._latencies([c.sch.mod for c in candidates]))
            self.stats.predict_calls += 1
            self.stats.predict_s += time.perf_counter() - t0
            with np.errstate(divide="ignore"):
                return np.where(np.isfinite(lat) & (lat > 0), 1e-6 / lat, 0.0)

        def _corrected(self, task: str, lat: np.ndarray, keys: list) -> np.ndarray:
            """The predictions times the task's online correction (unchanged without one)."""
            if self.online is None or task not in self.online.models_:
                return lat
            ok = np.flatnonzero(np.isfinite(lat))
            out = lat.copy()
            out[ok] *= self.online.factor(task, np.stack([self._rows[keys[i]] for i in ok]) if len(ok) else [])
            return out

        def update(self, context, candidates, results) -> None:
            task = str(context.task_name)
            lat, keys = self._latencies([c.sch.mod for c in candidates], count_hits=False)  # all scored before
            shown = self._corrected(task, lat, keys)  # what the search was told (before this update's refit)
            pairs = self.stats.measured.setdefault(task, [])
            used, measured = [], []
            for i, (p, r) in enumerate(zip(shown, results)):
                secs = [float(s) for s in (r.run_secs or [])]
                if r.error_msg is None and secs and math.isfinite(p):
                    pairs.append((float(p), float(np.median(secs))))
                    used.append(i)
                    measured.append(pairs[-1][1])
            if self.online is not None and used:
                rows = np.stack([self._rows[keys[i]] for i in used])
                if self.online.add(task, rows, lat[used], np.array(measured)):
                    self.stats.online_fits += 1

        def save(self, path: str) -> None:  # the model is a perfcast model directory; nothing learned here
            pass

        def load(self, path: str) -> None:
            raise PerfcastError("a perfcast cost model is loaded from a perfcast model directory "
                                "(perfcast_cost_model(model=DIR)), not from a meta-schedule file")

    return PerfcastCostModel()


COST_MODELS = ("xgb", "perfcast", "perfcast-online", "random")


def search_cost_model(name: str, model=None, device: str = "local"):
    """The cost model a search uses by name: meta-schedule's own `xgb` / `random` (returned as the string
    meta-schedule accepts), `perfcast` (`perfcast_cost_model(model, device)`) or `perfcast-online` (the same,
    learning a per-task correction from the search's measurements)."""
    if name not in COST_MODELS:
        raise UnknownNameError("cost model", name, list(COST_MODELS))
    if name.startswith("perfcast"):
        return perfcast_cost_model(model, device, online=name == "perfcast-online")
    if model is not None:
        raise PerfcastError(f"--model only applies to --cost-model perfcast or perfcast-online (got --cost-model "
                            f"{name})")
    return name
