"""Train, evaluate and use cost models on perfcast datasets: the library behind `perfcast train / eval /
predict-records / report / hpo`.

Every function takes a dataset directory (None: the bundled dataset) and, where a trained model is used, a model
directory (None: the bundled model). A trained model remembers the dataset and split it was trained on, so
`evaluate()` with no split evaluates it on exactly the test part it never saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .. import paths
from ..errors import PerfcastError
from .metrics import summarize
from .splits import DEFAULT_TEST_NETWORKS, get_split

HELD_OUT = DEFAULT_TEST_NETWORKS  # the by_network split's test networks
# loss weight of a TVM default-pipeline kernel relative to a random schedule (see `train`; its effect: README, Models)
DEFAULT_WEIGHT = 10.0
# loss weight of a program a meta-schedule search found (imported from a tuning database) relative to a random one
SEARCHED_WEIGHT = 1.0


def open_records(data=None, device: str | None = None, min_protocol: int = 0, measured_before: str | None = None):
    """(dataset, records DataFrame) of the ok records of `data` (default: bundled), of `device` only when given,
    measured before `measured_before` (ISO 8601 UTC) when given; no such records is an error that names the fix
    (`records_frame` says it for a device)."""
    from ..data.frame import records_frame
    from ..data.store import Dataset

    ds = Dataset(data if data is not None else paths.bundled_dataset_dir())
    df = records_frame(ds, device=device, min_protocol=min_protocol)
    if measured_before is not None and not df.empty:
        from ..data.frame import measured_before as before

        df = df.iloc[before(ds, df, measured_before)].reset_index(drop=True)
    if df.empty:
        more = f" of protocol >= {min_protocol}" if min_protocol else ""
        raise PerfcastError(f"{str(ds.root)!r} has no ok records{more}; collect some with "
                            "`perfcast collect --out DIR`")
    return ds, df


def load_data(data=None, device: str | None = None, progress: bool = True, min_protocol: int = 0,
              asm: bool = False, jobs: int | None = None, measured_before: str | None = None):
    """(dataset, records DataFrame, ProgramFeatures) of the ok records of `data` (default: bundled); with
    `min_protocol`, only records timed under that measurement protocol or a newer one
    (`perfcast.data.schema.PROTOCOLS`); with `measured_before`, only records measured before that time (features
    are computed for those only); with `asm`, the features hold the assembly's too (`asm_cache`)."""
    from ..features.cache import dataset_features

    ds, df = open_records(data, device, min_protocol, measured_before)
    X = dataset_features(ds, df, jobs=jobs, progress=progress)
    if asm:
        from ..features.asm_cache import dataset_asm

        X.asm = dataset_asm(ds, df, jobs=jobs, progress=progress)
    return ds, df, X


def cache_features(data=None, device: str | None = None, asm: bool = False, jobs: int | None = None,
                   progress: bool = True, mca: bool = False) -> dict:
    """Compute and cache the features of `data`'s ok records (default: bundled; `device`: only its records), with
    `asm` their assembly's and with `mca` their innermost loops' llvm-mca columns (`features.mca`; hours for a large
    dataset; resumable: what is cached stays). Returns counts, seconds (this run's building and reading) and the
    cache directories."""
    import time

    from ..features.asm_cache import dataset_asm, tag
    from ..features.cache import cache_root, dataset_features

    ds, df = open_records(data, device)
    t0 = time.perf_counter()
    dataset_features(ds, df, jobs=jobs, progress=progress)
    out = {"data": str(ds.root), "records": len(df), "cache": [str(cache_root(ds))]}
    for kind in [k for k, on in (("asm", asm), ("mca", mca)) if on]:
        counts: dict = {}
        dataset_asm(ds, df, jobs=jobs, progress=progress, counts=counts, kind=kind)
        out.update({f"{kind}_{k}": counts[k] for k in ("built", "failed", "copied")})
        out["cache"].append(str(cache_root(ds, tag(kind))))
    return {**out, "seconds": round(time.perf_counter() - t0, 1)}


def make_split(df, split: str, seed: int, split_params: dict | None):
    return get_split(split, **(split_params or {}))(df, seed=seed)


def scores(df, y, pred, idx, networks=None) -> dict:
    """Overall metrics of rows `idx`, the same per network (rows of the network's tasks) and per measured device
    (`device_key`, when the frame has it); `networks` limits the per-network entries (a by_network split reports
    its held-out networks only)."""
    sub = df.iloc[idx]
    keys, weights = sub["workload_key"].to_numpy(), sub["task_weight"].to_numpy()
    out = {"overall": summarize(y[idx], pred, keys, weights), "per_network": {}}
    nets = sorted(networks) if networks else sorted({n for ns in sub["networks"] for n in ns})
    for net in nets:
        mask = sub["networks"].map(lambda ns, net=net: net in ns).to_numpy()
        out["per_network"][net] = summarize(y[idx][mask], pred[mask], keys[mask], weights[mask])
    if "device_key" in sub:
        dev = sub["device_key"].to_numpy()
        out["per_device"] = {d: summarize(y[idx][dev == d], pred[dev == d], keys[dev == d], weights[dev == d])
                             for d in sorted(set(dev))}
    return out


def train(data=None, model: str = "cdmpp", split: str = "by_network", out=None, params: dict | None = None,
          split_params: dict | None = None, seed: int = 0, progress: bool = True, loaded=None,
          transductive: bool = False, default_weight: float | None = None, min_protocol: int = 0,
          searched_weight: float | None = None, measured_before: str | None = None) -> dict:
    """Fit `model` on the split's training part (validation part for early stopping), score it on the test part,
    save it to `out` (when given). Returns {"model", "split", "sizes", "test": scores, "path"}.

    `transductive=True` also gives the model the test part's programs *without their latencies* (CDMPP's
    cross-model setting: the target networks' programs are known, their timings are not); with `cmd_alpha` > 0
    the cdmpp/mlp latents of training and target programs are aligned by CMD.

    `default_weight` weighs each TVM default-pipeline kernel in the training loss that many times a random
    schedule (`sample_weights`): a network compiled without tuning runs exactly those kernels, one per task among
    ~100 random schedules, so at weight 1 the loss hardly sees them (7 % of the bundled training records).
    None: `DEFAULT_WEIGHT`. `searched_weight` does the same for the programs a meta-schedule search found (records
    imported from tuning databases; a tuned network runs each task's best one); None: `SEARCHED_WEIGHT`.
    `min_protocol` trains and tests on records of that measurement protocol or newer only (the model remembers it,
    so `evaluate` scores it on the same records); so does `measured_before` (ISO 8601 UTC: records measured before
    it only), and the model records the latest time among the records it was split from as
    `info_["measured_through"]` (retraining with `measured_before` just after it reproduces its data and split).
    The model keeps prediction intervals fitted on the validation part (`perfcast.eval.intervals`) when it has at
    least `intervals.MIN_PROGRAMS` programs."""
    from ..models import get_model
    from .coverage import training_dtypes
    from .intervals import interval_coverage, validation_intervals

    params = dict(params or {})
    if "seed" not in params:
        params["seed"] = seed
    m = get_model(model, **params)  # a bad model name, parameter or weight fails before the data is loaded
    default_weight = DEFAULT_WEIGHT if default_weight is None else float(default_weight)
    searched_weight = SEARCHED_WEIGHT if searched_weight is None else float(searched_weight)
    check_loss_weight(default_weight)
    check_loss_weight(searched_weight, "searched")
    if measured_before is not None:
        from ..data.frame import parse_utc

        measured_before = parse_utc(measured_before).isoformat()  # a bad time fails before the data is loaded
    if loaded is None:
        ds, df, X = load_data(data, progress=progress, min_protocol=min_protocol, asm=m.needs_asm,
                              measured_before=measured_before)
    else:
        ds, df, X = loaded
        if measured_before is not None:
            from ..data.frame import measured_before as before

            keep = before(ds, df, measured_before)
            df, X = df.iloc[keep].reset_index(drop=True), X.take(keep.nonzero()[0])
    sp = make_split(df, split, seed, split_params)
    y = df["latency_s"].to_numpy()
    w = sample_weights(df.iloc[sp.train], default_weight, searched_weight)
    X_val, X_test = X.take(sp.val), X.take(sp.test)
    m.fit(X.take(sp.train), y[sp.train], X_val, y[sp.val], X_target=X_test if transductive else None,
          sample_weight=w, groups=rank_groups(df.iloc[sp.train]))
    pred = m.predict(X_test)
    intervals = validation_intervals(m, X_val, y[sp.val])
    result = {"model": model, "split": {"name": split, "params": sp.params, "seed": seed}, "sizes": sp.sizes(),
              "test": scores(df, y, pred, sp.test, sp.params.get("test_networks"))}
    m.info_ = {**getattr(m, "info_", {}), "data": str(Path(ds.root).resolve()),
               "data_is_bundled": Path(ds.root).resolve() == paths.bundled_dataset_dir().resolve(),
               "split": result["split"], "test_mape": result["test"]["overall"]["mape"],
               "transductive": transductive, "default_weight": float(default_weight),
               "searched_weight": float(searched_weight),
               "min_protocol": int(min_protocol),
               "measured_before": measured_before,
               "measured_through": _latest_time(ds, df),
               "train_devices": train_devices(df, sp.train),
               "train_networks": train_networks(df, sp.train),
               "train_dtypes": training_dtypes(ds, df, sp.train)}
    if intervals is not None:
        m.info_["intervals"] = intervals
        result["test"]["interval"] = interval_coverage(intervals, X_test, y[sp.test], pred)
    if out is not None:
        result["path"] = str(m.save(out))
    result["estimator"] = m
    return result


def _latest_time(ds, df) -> str | None:
    """The latest measurement time (ISO 8601 UTC) among the records of `df`, None for none."""
    from ..data.frame import record_times

    t = record_times(ds, df).max() if len(df) else None
    return None if t is None or pd.isna(t) else t.isoformat()


def check_loss_weight(weight: float, kind: str = "default") -> None:
    if not np.isfinite(weight) or weight <= 0:
        what = "default kernels" if kind == "default" else "searched programs"
        raise PerfcastError(f"{kind} weight {weight!r} must be a positive number (1 weighs {what} like any other "
                            "schedule)")


def sample_weights(df, default_weight: float = 1.0, searched_weight: float = 1.0):
    """(n,) training weights of the records in `df`: `default_weight` for TVM default-pipeline kernels,
    `searched_weight` for programs imported from meta-schedule tuning databases, 1 for random schedules; None when
    all weights are 1."""
    check_loss_weight(default_weight)
    check_loss_weight(searched_weight, "searched")
    if default_weight == 1.0 and searched_weight == 1.0:
        return None
    kind = df["schedule_kind"].to_numpy()
    return np.where(kind == "default", float(default_weight), np.where(kind == "imported", float(searched_weight), 1.0))


def rank_groups(df) -> np.ndarray:
    """(n,) labels of comparable records: the same task on the same device (a model's ranking term pairs them)."""
    return pd.factorize(df["workload_key"].astype(str) + "|" + df["device_key"].astype(str))[0]


def train_devices(df, idx) -> dict:
    """{device key: training records}: which devices a model has seen (`perfcast predict` warns on others)."""
    return {str(k): int(v) for k, v in df["device_key"].iloc[idx].value_counts().items()}


def train_networks(df, idx) -> dict:
    """{network: training records of its tasks} (a task two networks share counts for both; layer suites are
    networks too): whose programs a model has seen (`bench/unseen_networks.py` refuses to score those as unseen)."""
    counts = df["networks"].iloc[idx].explode().dropna().value_counts()
    return {str(k): int(v) for k, v in counts.items()}


def trained_on(model, keys) -> np.ndarray:
    """(n,) bool per device key of `keys`: the model trained on that device (its `info_["train_devices"]`); all True
    for a model that does not record its devices."""
    seen = (getattr(model, "info_", None) or {}).get("train_devices")
    keys = pd.Index(list(keys), dtype=object)
    return np.ones(len(keys), bool) if seen is None else keys.isin(list(seen))


def _default_split(model, ds) -> tuple[str, dict, int]:
    info = getattr(model, "info_", {}) or {}
    s = info.get("split")
    if s:
        params = {k: v for k, v in s["params"].items() if k != "seed"}
        return s["name"], params, s.get("seed", 0)
    return "by_network", {}, 0


def records_of_device(df, device: str) -> tuple[str, np.ndarray]:
    """(device key, row mask) of `df`'s records of `device`: a device key of the frame, or a device id (`local`:
    this machine's CPU, by `perfcast.devices.base.device_key`); a device without records is an error."""
    from ..devices import get_device
    from ..devices.base import device_key

    keys = set(df["device_key"])
    key = device if device in keys else device_key(get_device(device))
    if key not in keys:
        raise PerfcastError(f"the dataset has no records of device {key!r}; its devices: {', '.join(sorted(keys))}")
    return key, (df["device_key"] == key).to_numpy()


def trained_records(model, measured_before: str | None = None) -> dict:
    """`load_data`'s record filters for scoring a trained model: its `min_protocol`, and the measurement-time cut
    (ISO 8601 UTC) `measured_before`, else the model's own (`train(measured_before=)`); "all" or neither: None
    (every record)."""
    info = model.info_ or {}
    cut = info.get("measured_before") if measured_before is None else measured_before
    if cut == "all":
        cut = None
    if cut is not None:
        from ..data.frame import parse_utc

        cut = parse_utc(cut).isoformat()
    return {"min_protocol": int(info.get("min_protocol", 0)), "measured_before": cut}


def own_split(model=None, data=None, asm: bool | None = None):
    """(model, dataset, records, features, split name, split) of a trained model (default: bundled) on `data`
    (default: bundled), split the way the model was trained (its own test and training parts on its own data: the
    records of its `min_protocol` and `measured_before` cut, as `evaluate` reads them). `asm` loads the assembly
    features too (default: when the model reads them; True for another model that does)."""
    from ..models import load_model

    m = load_model(model)
    ds, df, X = load_data(data, progress=False, asm=m.needs_asm if asm is None else asm, **trained_records(m))
    name, params, seed = _default_split(m, ds)
    return m, ds, df, X, name, make_split(df, name, seed, params)


def _training_params(params: dict) -> dict:
    """A split's parameters that decide its training part (`eval_min_protocol` only filters val and test)."""
    return {k: v for k, v in params.items() if k != "eval_min_protocol"}


def evaluate(model=None, data=None, split: str | None = None, split_params: dict | None = None,
             baselines: tuple[str, ...] = (), seed: int | None = None, progress: bool = True, loaded=None,
             eval_min_protocol: int | None = None, measured_before: str | None = None) -> dict:
    """Score a trained model (default: bundled) on a split's test part of `data` (default: bundled), and train
    each baseline on the same training part in the same run, with the model's default-kernel weight. Returns
    {model name: scores, baseline: scores, ...}. `eval_min_protocol` (by_network; default: the model's) scores
    only test records of that measurement protocol or newer (0: all), from the same test tasks.
    `measured_before` (default: the model's, `train(measured_before=)`) uses only the records measured before that
    time, "all" every record; on the model's own dataset another cut than its own is refused unless the split holds
    out whole networks or devices (a seeded split of other records would score records it trained on)."""
    from ..models import get_model, load_model
    from .intervals import interval_coverage, model_intervals

    m = load_model(model)
    unfitted = [get_model(b, seed=0) for b in baselines]  # a bad baseline name fails before the data is loaded
    info = m.info_ or {}
    kept = trained_records(m, measured_before)
    cut = kept["measured_before"]
    ds, df, X = loaded if loaded is not None else load_data(data, progress=progress,
                                                            asm=any(e.needs_asm for e in [m, *unfitted]), **kept)
    name, params, s = _default_split(m, ds)
    if split is not None and (split != name or split_params):
        name, params = split, dict(split_params or {})
    if eval_min_protocol is not None:  # scores other records of the same test tasks; training part unchanged
        params = _training_params(params)
        if eval_min_protocol:
            params["eval_min_protocol"] = int(eval_min_protocol)
    seed = s if seed is None else seed
    trained = info.get("split") or {}
    is_bundled = Path(ds.root).resolve() == paths.bundled_dataset_dir().resolve()
    own_data = bool(trained) and (info.get("data") == str(Path(ds.root).resolve())
                                  or (info.get("data_is_bundled", False) and is_bundled))
    if own_data and trained.get("name") != name:
        raise PerfcastError(f"the model was trained on this dataset with split "
                            f"{trained['name']!r}; evaluating it with split {name!r} would score records it "
                            f"was trained on; omit --split or use --split {trained['name']}")
    if own_data and cut != info.get("measured_before") and name not in ("by_network", "by_device"):
        raise PerfcastError(f"the model was trained on this dataset's records measured before "
                            f"{info.get('measured_before') or 'any time'}; a {name} split of the records measured "
                            f"before {cut or 'any time'} would score records it was trained on; omit "
                            "--measured-before")
    sp = make_split(df, name, seed, params)
    if own_data and _training_params(sp.params) != _training_params(trained.get("params") or {}):
        # same split, other seed or parameters: the same leak (which records are scored does not matter)
        raise PerfcastError(f"the model was trained on this dataset with split {name} {trained.get('params')}; "
                            f"evaluating it with {sp.params} would score records it was trained on; omit --split "
                            "and --seed (and the split's options) to evaluate on its own test part")
    y = df["latency_s"].to_numpy()
    Xt = X.take(sp.test)
    out = {"split": {"name": name, "params": sp.params, "seed": seed}, "sizes": sp.sizes(),
           "data": str(ds.root), "model": m.name, "measured_before": cut}
    preds = {"_rows": df.iloc[sp.test], m.name: m.predict(Xt)}
    nets = sp.params.get("test_networks")
    out[m.name] = scores(df, y, preds[m.name], sp.test, nets)
    table = model_intervals(m)
    if table:
        out[m.name]["interval"] = interval_coverage(table, Xt, y[sp.test], preds[m.name])
    w = sample_weights(df.iloc[sp.train], float(info.get("default_weight", 1.0)),
                       float(info.get("searched_weight", 1.0)))  # the model's own recipe
    g = rank_groups(df.iloc[sp.train])
    for b in baselines:
        key = b if b != m.name else f"{b}_baseline"
        est = get_model(b, seed=seed).fit(X.take(sp.train), y[sp.train], X.take(sp.val), y[sp.val],
                                          sample_weight=w, groups=g)
        preds[key] = est.predict(Xt)
        out[key] = scores(df, y, preds[key], sp.test, nets)
    out["_predictions"] = preds  # not JSON: the test rows and each model's predictions, for plots
    return out


# ---- prediction ------------------------------------------------------------------------------------------------
def predict_programs(programs, model=None, device: str = "local") -> np.ndarray:
    """Predicted latency (s) of TIR programs (IRModules, PrimFuncs or TVMScript) on `device`. Programs in element
    types the model never trained on, or that repeat loop-invariant work (`perfcast.eval.coverage`), get a
    `UserWarning` saying so."""
    import warnings

    from ..features.base import as_primfunc
    from ..features.cache import features_of_programs
    from ..models import load_model
    from .coverage import dtype_warning, program_dtypes, recompute_warning, recomputed_share

    m = model if hasattr(model, "predict") else load_model(model)
    programs = list(programs)
    dtypes = [program_dtypes(p) for p in programs]  # (from a text as given: no printing)
    programs = [as_primfunc(p) if isinstance(p, str) else p for p in programs]  # a text is parsed once (~0.1 s)
    for warning in (dtype_warning(m, dtypes), recompute_warning([recomputed_share(p) for p in programs])):
        if warning:
            warnings.warn(warning, stacklevel=2)
    return m.predict(features_of_programs(programs, device, asm=m.needs_asm))


def predict_records(path, model=None, device: str = "local", speed_ratio: float | None = None) -> list[dict]:
    """Predictions for every record of a perfcast dataset (each on the device it was measured on), or every tuning
    record of a TVM meta-schedule JSON database (in `get_all_tuning_records()` order, on `device`), with the measured
    latency where known. `speed_ratio` (what `perfcast calibrate` measures for `device`: this machine today / its
    records) scales the predictions of `device`'s programs (a dataset's other devices' stay as they are; a dataset
    without records of `device` is an error); each scaled entry keeps the unscaled one as
    `uncalibrated_predicted_s`. A model with prediction intervals (`perfcast.eval.intervals`) gives every entry
    of a device it trained on `predicted_low_s` and `predicted_high_s` (scaled alike). An entry whose program uses
    element types the model's training programs never used has them as `unseen_dtypes`; in a database, an entry
    whose program repeats loop-invariant work has `recomputes` (its `recomputed_share`; `perfcast.eval.coverage`)
    and no interval (such programs err far beyond it)."""
    from ..collect.calibrate import check_ratio
    from ..data.importer import database_records
    from ..devices import get_device
    from ..devices.base import device_key
    from ..models import load_model
    from .coverage import record_dtypes
    from .intervals import interval_factors, model_intervals, program_regions

    p = Path(path)
    kind = records_kind(p)
    ratio = None if speed_ratio is None else check_ratio(speed_ratio)
    m = load_model(model)
    if kind == "database":
        out, X = _predict_database(p, m, device, database_records)
        scaled = np.ones(len(out), bool)
    else:
        ds, df, X = load_data(p, progress=True, asm=m.needs_asm)
        scaled = records_of_device(df, device)[1] if ratio is not None else None  # (no such records: an error)
        pred = m.predict(X)
        out = [{"record_id": r, "task_name": t, "device_id": d, "predicted_s": float(ps), "measured_s": float(ms)}
               for r, t, d, ps, ms in zip(df["record_id"], df["task_name"], df["device_id"], pred, df["latency_s"])]
        _mark_unseen_dtypes(out, m, record_dtypes(ds, df))
    table = model_intervals(m)
    if table and out:  # not on a device the model never measured: its errors on the others do not hold there
        known = trained_on(m, [device_key(get_device(device))] * len(out) if kind == "database" else df["device_key"])
        for e, lo, hi, k in zip(out, *interval_factors(table, program_regions(X)), known):
            if k and "recomputes" not in e:  # (nor for a program the model cannot judge: its errors are others')
                e["predicted_low_s"], e["predicted_high_s"] = e["predicted_s"] * lo, e["predicted_s"] * hi
    if ratio is not None:
        for e in (e for e, s in zip(out, scaled) if s):
            e["uncalibrated_predicted_s"] = e["predicted_s"]
            for key in ("predicted_s", "predicted_low_s", "predicted_high_s"):
                if key in e:
                    e[key] = e[key] * ratio
    return out


def records_kind(p: Path) -> str:
    """'database' (a meta-schedule JSON database) or 'dataset' (a perfcast dataset) for `predict_records`; anything
    else is a one-line error."""
    from ..data.importer import RECORD_FILE

    if (p / RECORD_FILE).exists():
        return "database"
    if (p / paths.MARKER).exists():
        return "dataset"
    raise PerfcastError(f"{str(p)!r} is neither a perfcast dataset ({paths.MARKER}) nor a meta-schedule JSON "
                        f"database ({RECORD_FILE}); pass one of those directories")


def check_calibratable(path, device: str) -> None:
    """Before `perfcast predict-records --calibrate` measures anything: a perfcast dataset at `path` must have records
    of `device` (the ones the speed ratio scales); a meta-schedule database passes."""
    if records_kind(Path(path)) == "dataset":
        records_of_device(open_records(path)[1], device)


def _predict_database(p: Path, m, device: str, database_records) -> tuple[list[dict], object]:
    """(entries in `get_all_tuning_records()` order, the programs' features or None for an empty database)."""
    from ..features.cache import features_of_programs
    from .coverage import RECOMPUTE_SHARE, program_dtypes, recomputed_share

    rows = database_records(str(p))  # (loads the x86 intrinsics the traces may tensorize with)
    progs = [r.program() for r in rows]
    X = features_of_programs(progs, device, asm=m.needs_asm) if progs else None
    pred = m.predict(X) if progs else []
    out = []
    for i, (r, ps, prog) in enumerate(zip(rows, pred, progs)):
        e = {"index": i, "predicted_s": float(ps)}
        if r.measured:
            e["measured_s"] = r.measured_s
        share = recomputed_share(prog)
        if share >= RECOMPUTE_SHARE:
            e["recomputes"] = round(share, 4)
        out.append(e)
    per_workload: dict = {}  # TVM objects hash by identity: one script per workload object the database holds
    for r in rows:
        if r.workload_mod not in per_workload:
            per_workload[r.workload_mod] = program_dtypes(r.workload_mod)
    _mark_unseen_dtypes(out, m, [per_workload[r.workload_mod] for r in rows])
    return out, X


def _mark_unseen_dtypes(entries: list[dict], m, dtypes: list) -> None:
    """`unseen_dtypes` on every entry whose program uses element types the model never trained on."""
    from .coverage import unseen_dtypes

    for e, d in zip(entries, dtypes):
        bad = unseen_dtypes(m, d)
        if bad:
            e["unseen_dtypes"] = bad


def save_json(obj, path) -> None:
    Path(path).write_text(json.dumps(obj, indent=1, default=float))
