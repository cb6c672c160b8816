"""`perfcast adapt`: calibrate a trained cost model to a device with a few measured tasks.

1. Every task of the dataset is represented by its programs (any device's, deduplicated) with the *target's* device
   features; the base model's encoder gives their latents.
2. A sampler picks K tasks from them (`kmeans`: CDMPP Algorithm 1; `random`).
3. Their programs are measured on the target with the collector (records of the target already in the dataset are
   reused and their recorded build + run time is counted as the measuring time).
4. A method adapts the model to those measurements (`finetune`, `cmd`, `mtl`, `lottery`).
5. The target's records of the other tasks (where the dataset has them) score the model before and after.

`until_certain=True` replaces the fixed budget by Moses' adaptive controller (§3.4): tasks are measured in rounds of
`round_tasks`; before each round is learned from, the current model's MAPE on it is recorded, and measuring stops
once the coefficient of variation of the last three rounds' errors is below `certain_cv` (or `budget_tasks` is spent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import PerfcastError

CROSSFIT_FOLDS = 5  # task groups of the cross-fitted intervals of an adapted model (`crossfit_intervals`)
SOURCE_PER_DEVICE = 1000  # source records per device `perfcast adapt` reads (finetune replays at most 2,000 in all)


@dataclass(frozen=True)
class AdaptConfig:
    device: str
    model: str | None = None
    data: str | None = None
    budget_tasks: int = 20
    sampler: str = "kmeans"
    method: str = "cmd"
    programs_per_task: int = 8
    seed: int = 0
    until_certain: bool = False
    round_tasks: int = 5
    certain_cv: float = 0.1
    out: str | None = None
    measure_out: str | None = None
    params: dict = field(default_factory=dict)


# ---- pieces the bench reuses ------------------------------------------------------------------------------------
def pool_rows(df, per_task: int = 8, seed: int = 0) -> np.ndarray:
    """Index labels of `df` of up to `per_task` distinct programs per task (drawn with `seed`), sorted."""
    rng = np.random.default_rng(seed)
    first = df.drop_duplicates(["workload_key", "program_hash"])
    rows = []
    for _, g in first.groupby("workload_key", sort=True):
        idx = g.index.to_numpy()
        rows.extend(rng.permutation(idx)[:per_task] if len(idx) > per_task else idx)
    return np.asarray(sorted(rows), dtype=np.int64)


def task_pool(df, X, device_vector, per_task: int = 8, seed: int = 0):
    """(task key per row, ProgramFeatures) of up to `per_task` distinct programs per task, on the target device.
    `df`'s index labels are rows of `X` (a frame filtered from the one `X` belongs to will do)."""
    rows = pool_rows(df, per_task, seed)
    return df.loc[rows, "workload_key"].to_numpy().astype(str), X.take(rows).on_device(device_vector)


def source_sample(df, per_device: int = SOURCE_PER_DEVICE, prefer=None, seed: int = 0) -> np.ndarray:
    """Index labels of up to `per_device` records of each device of `df` (its `device_spec_json`, so code-generation
    variants count apart), taken first among the labels in `prefer`, then drawn with `seed`; sorted."""
    rng = np.random.default_rng(seed)
    prefer = np.asarray([] if prefer is None else prefer)
    rows: list = []
    for _, g in df.groupby("device_spec_json", sort=True):
        idx = rng.permutation(g.index.to_numpy())
        first = np.isin(idx, prefer)
        rows.extend(np.concatenate([idx[first], idx[~first]])[:per_device])
    return np.asarray(sorted(rows), dtype=np.int64)


def measurable(df, network_rows: list[dict], is_target: np.ndarray) -> np.ndarray:
    """Rows of `df` whose task `perfcast adapt` can have on the target: the target has records of it already, or
    a network of the dataset has it at batch size 1 (what `_measure` collects). A task only some network's batch-2
    version has is no candidate: chosen, it would silently shrink the budget."""
    keys = {r["workload_key"] for r in network_rows if r["batch_size"] == 1}
    keys |= set(df["workload_key"].to_numpy()[is_target])
    return df["workload_key"].isin(keys).to_numpy()


def select_tasks(model, df, X, device_vector, k: int, sampler: str, seed: int = 0) -> list[str]:
    """K task keys of `df` chosen by `sampler` on the model's latents of their programs."""
    from .base import get_sampler

    if df.empty:
        raise PerfcastError("no candidate task to measure on the target; the dataset has no tasks")
    keys, Xp = task_pool(df, X, device_vector, seed=seed)
    return get_sampler(sampler).select(keys, model.latent(Xp), k, seed)


def certainty_cv(errors: list[float], window: int = 3) -> float:
    """Moses' certainty: coefficient of variation (population std / mean) of the model's error on the last
    `window` measured rounds; inf until there are that many rounds."""
    e = np.asarray(errors[-window:], np.float64)
    if len(e) < window or e.mean() <= 0:
        return math.inf
    return float(e.std() / e.mean())


def mape_of(model, X, y) -> float | None:
    from ..eval.metrics import mape

    return mape(y, model.predict(X)) if len(y) else None


def recorded_seconds(df, idx) -> float:
    """Measuring time of records already in a dataset: their recorded build + run seconds."""
    return float(np.nansum(df["build_s"].to_numpy()[idx]) + np.nansum(df["measure_s"].to_numpy()[idx]))


def adapt_model(model, method: str, X_t, y_t, X_src, y_src, params: dict | None = None, seed: int = 0):
    from .base import get_method

    return get_method(method, **{"seed": seed, **(params or {})}).adapt(model, X_t, y_t, X_src, y_src)


# ---- measuring on the target -------------------------------------------------------------------------------------
def _measure(ds, rows: list[dict], tasks: list[str], cfg: AdaptConfig, out: Path, log, progress: bool = True) -> float:
    """Measure `tasks` on the target with the collector into dataset `out`, given `rows`, the dataset's network rows
    at batch size 1; returns the seconds spent."""
    from ..collect.collector import CollectConfig, collect
    from ..data.schema import NetworkTaskRecord, TaskRecord
    from ..data.store import Dataset

    wanted = set(tasks)
    nets = sorted({r["network"] for r in rows if r["workload_key"] in wanted})
    if not nets:
        raise PerfcastError("the chosen tasks belong to no network of the dataset at batch size 1; "
                            "pass --data a dataset collected with `perfcast collect`")
    # the collector finds each network's tasks in its dataset: give it every task of those networks
    net_rows = [r for r in rows if r["network"] in nets]
    keys = {r["workload_key"] for r in net_rows}
    mds = Dataset(out, create=True)
    mds.add_tasks([TaskRecord(**r) for r in ds.read("tasks").to_pylist() if r["workload_key"] in keys])
    mds.add_network_tasks([NetworkTaskRecord(**r) for r in net_rows])
    res = collect(CollectConfig(networks=tuple(nets), device=cfg.device, programs_per_task=cfg.programs_per_task,
                                seed=cfg.seed, only_tasks=tuple(tasks)), str(out), log=log, progress=progress)
    return res.seconds


def crossfit_intervals(base, method: str, measured: dict, X_src, y_src, params: dict | None = None, seed: int = 0,
                       folds: int = CROSSFIT_FOLDS) -> dict | None:
    """Prediction intervals of an adaptation from its own measurements, for a target with no other record: the
    measured tasks are split into `folds` groups; the base is adapted by `method` to all groups but one and predicts
    that one (programs of tasks it never saw, as the adapted model will), and the out-of-fold errors are fitted as
    `eval.intervals.fit_intervals` fits validation errors. None with fewer than two tasks or too few programs."""
    from ..eval.intervals import fit_intervals, program_regions
    from ..features.cache import ProgramFeatures

    tasks = sorted(measured)
    k = min(folds, len(tasks))
    if k < 2:
        return None
    order = np.random.default_rng(seed).permutation(len(tasks))
    ys, ps, regs = [], [], []
    for f in range(k):
        out = [tasks[i] for i in order[f::k]]
        inn = [t for t in tasks if t not in out]
        Xi = ProgramFeatures.concat([measured[t][0] for t in inn])
        yi = np.concatenate([measured[t][1] for t in inn])
        m = adapt_model(base, method, Xi, yi, X_src, y_src, params, seed)
        Xo = ProgramFeatures.concat([measured[t][0] for t in out])
        ys.append(np.concatenate([measured[t][1] for t in out]))
        ps.append(m.predict(Xo))
        regs.append(program_regions(Xo))
    table = fit_intervals(np.concatenate(ys), np.concatenate(ps), np.concatenate(regs))
    if table is None:
        return None
    return {**table, "fitted_on": f"the {len(tasks)} measured tasks, cross-fitted in {k} folds"}


def _record_ids(root: Path) -> set:
    """Record ids of the dataset at `root` (empty when there is none yet)."""
    from ..data.frame import records_frame
    from ..data.store import Dataset

    if not (Path(root) / "perfcast_dataset.json").exists():
        return set()
    return set(records_frame(Dataset(root))["record_id"])


def _target_rows(df, dkey: str):
    return df["device_key"].to_numpy() == dkey


def load_for_adapt(data, dkey: str, asm: bool = False, seed: int = 0, progress: bool = True):
    """(dataset, records frame, ProgramFeatures, its network rows at batch size 1, the task pool's rows (bool),
    the source replay sample's rows) of what adapting to `dkey` uses of `data` (default: bundled): features only of
    the records used (a fresh install has no feature cache, and all of the bundled records' take ~40 min on 2
    cores): the target's, the candidate tasks' pool (`select_tasks` on the pool rows) and a per-device sample of
    the source devices' (`source_sample`: the methods replay at most `max_source` of them; `proxy` tries each
    device)."""
    from ..eval.workflow import open_records
    from ..features.asm_cache import dataset_asm
    from ..features.cache import dataset_features

    ds, df = open_records(data)
    is_t = _target_rows(df, dkey)
    if is_t.all():
        raise PerfcastError(f"the dataset has records of {dkey} only; adaptation needs records of other devices")
    net_rows = [r for r in ds.read("networks").to_pylist() if r["batch_size"] == 1]
    cand = measurable(df, net_rows, is_t)
    if not cand.any():
        raise PerfcastError(f"no task to measure on {dkey}: the dataset has no network at batch size 1 and no "
                            "record of the target; pass --data a dataset collected with `perfcast collect`")
    pool = pool_rows(df[cand], seed=seed)
    src_rows = source_sample(df[~is_t], prefer=pool, seed=seed)
    keep = np.union1d(np.union1d(df.index.to_numpy()[is_t], pool), src_rows)
    df = df.loc[keep].reset_index(drop=True)
    X = dataset_features(ds, df, progress=progress)
    if asm:
        X.asm = dataset_asm(ds, df, progress=progress)
    return ds, df, X, net_rows, np.isin(keep, pool), np.searchsorted(keep, src_rows)


def run(cfg: AdaptConfig, log: Callable[[str], None] = print, progress: bool = True) -> dict:
    """The whole `perfcast adapt` (module docstring); returns the JSON-able summary and saves to `cfg.out`."""
    from ..devices import get_device
    from ..devices.base import device_key
    from ..eval.intervals import validation_intervals
    from ..eval.workflow import load_data
    from ..features.cache import ProgramFeatures
    from ..models import load_model
    from .base import get_method, get_sampler
    from .sampling import check_budget

    get_sampler(cfg.sampler)
    method = get_method(cfg.method, **cfg.params)  # bad names and budgets fail before anything is loaded or measured
    check_budget(cfg.budget_tasks)
    spec = get_device(cfg.device)
    dkey = device_key(spec)
    base = load_model(cfg.model)
    method.check_model(base)
    ds, df, X, net_rows, in_pool, src = load_for_adapt(cfg.data, dkey, base.needs_asm, cfg.seed, progress)
    is_t = _target_rows(df, dkey)
    y = df["latency_s"].to_numpy()
    order = select_tasks(base, df[in_pool], X, spec.feature_vector(), cfg.budget_tasks, cfg.sampler, cfg.seed)
    out = Path(cfg.out) if cfg.out else None
    mout = Path(cfg.measure_out) if cfg.measure_out else (out / "measurements" if out else None)

    measured: dict[str, tuple] = {}  # task -> (ProgramFeatures, latencies)
    seconds = 0.0
    reused = 0  # records of the target the dataset held
    resumed = 0  # records an earlier run measured into the same measurement directory

    wk = df["workload_key"].to_numpy()

    def obtain(tasks: list[str]) -> None:
        nonlocal seconds, reused, resumed
        todo = []
        for t in tasks:
            idx = np.flatnonzero(is_t & (wk == t))[: cfg.programs_per_task]
            if not len(idx):
                todo.append(t)
                continue
            measured[t] = (X.take(idx), y[idx])  # the dataset already holds the target's programs of this task
            seconds += recorded_seconds(df, idx)
            reused += len(idx)
        if todo:
            if mout is None:
                raise PerfcastError("measuring on the target needs a place for the records; pass --out DIR "
                                    "(or --measure-out DIR)")
            log(f"measuring {len(todo)} tasks x {cfg.programs_per_task} programs on {spec.device_id}")
            earlier = _record_ids(mout)  # an earlier run into the same directory measured these already
            seconds += _measure(ds, net_rows, todo, cfg, mout, log, progress)
            _, mdf, mX = load_data(mout, progress=progress, asm=base.needs_asm)
            mt = mdf["device_key"].to_numpy() == dkey
            my = mdf["latency_s"].to_numpy()
            old = mdf["record_id"].isin(earlier).to_numpy()
            for t in todo:
                idx = np.flatnonzero(mt & (mdf["workload_key"].to_numpy() == t))
                if len(idx):
                    measured[t] = (mX.take(idx), my[idx])
                    seconds += recorded_seconds(mdf, idx[old[idx]])  # their time was spent by that run
                    resumed += int(old[idx].sum())

    def stacked():
        parts = list(measured.values())
        return ProgramFeatures.concat([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    rounds = []
    if cfg.until_certain:
        model = base
        for start in range(0, len(order), cfg.round_tasks):
            batch = order[start:start + cfg.round_tasks]
            obtain(batch)
            got = [t for t in batch if t in measured]
            if not got:  # nothing of this round could be measured (every program failed): next round
                continue
            Xb = ProgramFeatures.concat([measured[t][0] for t in got])
            yb = np.concatenate([measured[t][1] for t in got])
            rounds.append({"tasks": len(measured), "mape_on_new": mape_of(model, Xb, yb)})
            Xt, yt = stacked()
            model = adapt_model(base, cfg.method, Xt, yt, X.take(src), y[src], cfg.params, cfg.seed)
            cv = certainty_cv([r["mape_on_new"] for r in rounds])
            rounds[-1]["cv"] = None if math.isinf(cv) else cv
            log(f"round {len(rounds)}: {len(measured)} tasks, error on the new round "
                f"{rounds[-1]['mape_on_new']:.1%}" + ("" if math.isinf(cv) else f", CV of the last 3 {cv:.2f}"))
            if cv < cfg.certain_cv:
                break
        tasks = list(measured)
    else:
        obtain(order)
        tasks = list(measured)
        if not tasks:
            raise PerfcastError(f"no program of the {len(order)} chosen tasks ran on {spec.device_id}; see the "
                                f"records' errors in {mout}")
        Xt, yt = stacked()
        model = adapt_model(base, cfg.method, Xt, yt, X.take(src), y[src], cfg.params, cfg.seed)

    held = np.flatnonzero(is_t & ~df["workload_key"].isin(tasks).to_numpy())
    X_held = X.take(held)
    before = mape_of(base, X_held, y[held])
    after = mape_of(model, X_held, y[held])
    info = dict(getattr(base, "info_", {}) or {})
    info["train_devices"] = {**info.get("train_devices", {}), dkey: int(sum(len(v[1]) for v in measured.values()))}
    info["adapted"] = {"device": spec.device_id, "device_key": dkey, "method": cfg.method, "sampler": cfg.sampler,
                       "tasks": tasks, "base_model": str(Path(cfg.model).resolve()) if cfg.model else "bundled",
                       "mape_before": before, "mape_after": after, "held_out_records": int(len(held)),
                       "measurements": str(mout.resolve()) if mout is not None and mout.exists() else None}
    # the base's intervals describe its errors on its own devices: refit on the target's held-out records, else
    # cross-fit them on the measured tasks (a new CPU has no other record), else drop them
    info.pop("intervals", None)
    intervals = validation_intervals(model, X_held, y[held])
    if intervals is not None:
        info["intervals"] = {**intervals, "fitted_on": f"held-out records of {dkey}"}
    else:
        intervals = crossfit_intervals(base, cfg.method, measured, X.take(src), y[src], cfg.params, cfg.seed)
        if intervals is not None:
            info["intervals"] = intervals
    model.info_ = info
    proxy = proxy_of(model, df, X, dkey)
    if proxy:
        info["adapted"]["proxy"] = proxy
    result = {"device": spec.device_id, "device_key": dkey, "method": cfg.method, "sampler": cfg.sampler,
              "tasks": tasks, "n_tasks": len(tasks), "programs": int(sum(len(v[1]) for v in measured.values())),
              "reused_records": reused, "resumed_records": resumed, "measure_seconds": round(seconds, 1),
              "held_out_records": int(len(held)),
              "mape_before": before, "mape_after": after, "rounds": rounds, "proxy": proxy, "path": None,
              "interval": {k: info["intervals"][k] for k in ("level", "all", "n", "fitted_on")}
              if "intervals" in info else None}
    if out is not None:
        result["path"] = str(model.save(out))
    return result


def proxy_of(model, df, X, dkey: str) -> dict | None:
    """{"device_key": the source device the target is predicted as, "scale": its factor} for a `proxy` adaptation
    (the device key found by its device vector among the dataset's records), else None."""
    info = getattr(model, "adapt_info_", None) or {}
    if info.get("method") != "proxy":
        return None
    from ..models.base import same_device

    rows = np.flatnonzero(same_device(X.device, model.device_proxy_[-1]["as"]))
    key = dkey if info["proxy_is_target"] else (str(df["device_key"].iloc[rows[0]]) if len(rows) else "unknown")
    return {"device_key": key, "scale": info["scale"], "then": info["then"]}


def latent_report(adapted_dir, data=None, out="perfcast-report", progress: bool = True) -> tuple[str, dict]:
    """PCA plot of source- and target-device latents under the base and the adapted model (CDMPP Fig. 11)."""
    from ..eval.report import latent_pca_plot
    from ..eval.workflow import load_data
    from ..models import load_model

    adapted = load_model(adapted_dir)
    info = (adapted.info_ or {}).get("adapted")
    if not info:
        raise PerfcastError(f"{str(adapted_dir)!r} is not an adapted model; make one with `perfcast adapt --out DIR`")
    base = load_model(None if info["base_model"] == "bundled" else info["base_model"])
    ds, df, X = load_data(data, progress=progress, asm=base.needs_asm)
    is_t = _target_rows(df, info["device_key"])
    X_src = X.take(np.flatnonzero(~is_t))
    if is_t.any():
        X_tgt = X.take(np.flatnonzero(is_t))
    else:
        meas = Path(adapted_dir) / "measurements"
        if not meas.exists():
            raise PerfcastError(f"the dataset has no record of {info['device_key']} and {str(meas)!r} does not "
                                "exist; pass --data a dataset with the device's records")
        _, mdf, mX = load_data(meas, progress=progress, asm=base.needs_asm)
        X_tgt = mX.take(np.flatnonzero(_target_rows(mdf, info["device_key"])))
    Path(out).mkdir(parents=True, exist_ok=True)
    return latent_pca_plot(base, adapted, X_src, X_tgt, Path(out) / "latent_pca.png")
