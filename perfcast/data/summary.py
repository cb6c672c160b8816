"""`perfcast data summary`: counts, latency spread and a latency histogram of a dataset.

Only the small columns of the records table are read (its TIR and trace columns are large).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from .. import paths
from ..errors import PerfcastError
from .store import Dataset

_COLUMNS = ["workload_key", "device_id", "program_hash", "status", "schedule_kind", "latency_s", "latency_cv",
            "remeasured", "protocol"]


def _num(x) -> float | None:
    """A float for JSON: None for NaN/inf."""
    x = float(x)
    return x if math.isfinite(x) else None


def _spread(counts) -> dict:
    """Tasks, and min / p10 / median / p90 / max of the ok programs per task, of one device's per-task counts."""
    import numpy as np

    q = np.percentile(counts, [10, 50, 90])
    return {"tasks": int(len(counts)), "min": int(counts.min()), "p10": _num(q[0]), "median": _num(q[1]),
            "p90": _num(q[2]), "max": int(counts.max())}


def _by_device(per_task_dev) -> dict:
    """{device: `_spread`} of a (workload_key, device_id) -> ok programs Series."""
    return {str(d): _spread(g.to_numpy()) for d, g in per_task_dev.groupby(level="device_id", sort=True)}


def _of_tasks(per_task_dev, keys) -> object:
    """The entries of a (workload_key, device_id) -> ok programs Series whose task is in `keys`."""
    return per_task_dev[per_task_dev.index.get_level_values("workload_key").isin(set(keys))]


def _by_device_and_batch(per_task_dev, net_rows) -> dict:
    """{device: {batch size: `_spread`}} over the tasks of `net_rows` (network rows) at each batch size."""
    out: dict = {}
    for b, g in net_rows.groupby("batch_size", sort=True):
        for d, v in _by_device(_of_tasks(per_task_dev, g["workload_key"])).items():
            out.setdefault(d, {})[str(int(b))] = v
    return {d: out[d] for d in sorted(out)}


def _journal_lines(root: Path) -> int:
    n = 0
    for jp in sorted(paths.journal_dir(root).glob("*.jsonl")) if paths.journal_dir(root).exists() else []:
        try:
            with open(jp, "rb") as fh:
                n += sum(1 for line in fh if line.strip())
        except OSError:
            pass  # a journal removed by a flushing collector in between
    return n


def _open(root: str | None) -> tuple[Dataset, bool]:
    bundled = paths.bundled_dataset_dir()
    if root is None:
        if not paths.marker(bundled).exists():
            raise PerfcastError("the bundled dataset is missing: reinstall perfcast")
        return Dataset(bundled), True
    is_bundled = Path(root).exists() and Path(root).resolve() == bundled.resolve()
    return Dataset(root), is_bundled


def summarize(root: str | None, plot: str | None = None) -> dict:
    """Summary of the dataset at `root` (None: the bundled one) as a JSON-able dict; writes a latency histogram."""
    import numpy as np

    ds, is_bundled = _open(root)
    label = "the bundled dataset" if root is None else f"dataset {str(root)!r}"
    df = ds.read("records", _COLUMNS + ["device_spec_json"]).to_pandas()
    from ..devices.base import device_key_of_json

    keys = {j: device_key_of_json(j) for j in df["device_spec_json"].unique()}
    df["device_id"] = df["device_spec_json"].map(keys)  # `local` of two machines is two devices
    pending = _journal_lines(ds.root)
    if len(df) == 0:
        extra = (f" ({pending} records wait in its journal: a collection is running or was interrupted; "
                 "rerun `perfcast collect` to recover them)") if pending else ""
        raise PerfcastError(f"{label} has no records{extra}; add some with `perfcast collect --out DIR` or "
                            "`perfcast data import DB --out DIR`")

    # a program re-measured under a newer protocol counts once, as that record (`records_frame` does the same)
    dup_counts = df.groupby(["workload_key", "device_id", "program_hash", "protocol"]).size()
    from .frame import latest_protocol

    all_protocols = Counter(df["protocol"].astype(int))
    n_all = len(df)
    df = latest_protocol(df.rename(columns={"device_id": "device_key"})).rename(columns={"device_key": "device_id"})
    ok = df[df["status"] == "ok"]
    lat = ok["latency_s"].to_numpy(dtype=float)
    lat = lat[np.isfinite(lat) & (lat > 0)]

    nets = ds.read("networks", ["network", "batch_size", "workload_key"]).to_pandas()
    task_keys = set(ds.read("tasks", ["workload_key"]).column("workload_key").to_pylist())
    ok_per_key = Counter(ok["workload_key"].tolist())
    per_network = {}
    for net, g in nets.groupby("network", sort=True):
        keys = set(g["workload_key"])
        per_network[str(net)] = {
            "batch_sizes": sorted(int(b) for b in set(g["batch_size"])),
            "tasks": len(keys),
            "tasks_with_records": sum(1 for k in keys if ok_per_key[k] > 0),
            "ok_records": int(sum(ok_per_key[k] for k in keys)),
        }

    per_task_dev = ok.groupby(["workload_key", "device_id"]).size()
    zoo = nets[~nets["network"].str.startswith("layers:")]  # network rows without the layer suites
    per_task = per_task_dev.to_numpy()
    device_ids = sorted(set(df["device_id"]))
    q = (np.percentile(lat, [0, 5, 25, 50, 75, 95, 100]) if len(lat) else [math.nan] * 7)
    cv = ok["latency_cv"].to_numpy(dtype=float)
    cv = cv[np.isfinite(cv)]

    out = {
        "root": str(ds.root),
        "bundled": is_bundled,
        "records": int(len(df)),
        "ok_records": int(len(ok)),
        "by_status": {str(k): int(v) for k, v in sorted(Counter(df["status"]).items())},
        "by_schedule_kind": {str(k): int(v) for k, v in sorted(Counter(ok["schedule_kind"]).items())},
        "journal_pending": pending,
        "record_partitions": len(ds._parts("records")),  # `perfcast data compact` rewrites many small ones
        "record_bytes": sum(p.stat().st_size for p in ds._parts("records")),
        "networks": len(per_network),
        "network_names": sorted(per_network),
        "tasks": int(len(ok_per_key)),
        "tasks_total": len(task_keys),
        "devices": len(device_ids),
        "device_ids": device_ids,
        "ok_records_by_device": {d: int(v) for d, v in sorted(Counter(ok["device_id"]).items())},
        "duplicates": int((dup_counts[dup_counts > 1] - 1).sum()),
        "superseded": int(n_all - len(df)),  # records of a program re-measured under a newer protocol
        "records_by_protocol": {str(k): int(v) for k, v in sorted(all_protocols.items())},
        "programs_per_task": {
            "median": _num(np.median(per_task)) if len(per_task) else None,
            "min": int(per_task.min()) if len(per_task) else None,
            "max": int(per_task.max()) if len(per_task) else None,
        },
        # per measured device: how deep its tasks are sampled (the data engine aims at about 100 per task); all
        # tasks, then only the tasks of networks (zoo, ONNX, file.py) without the layer suites' one-kernel layers
        "programs_per_task_by_device": _by_device(per_task_dev),
        "network_programs_per_task_by_device": _by_device(_of_tasks(per_task_dev, zoo["workload_key"])),
        # the same per batch size the networks were lowered at (a task shared by two batch sizes counts in both)
        "network_programs_per_task_by_device_and_batch": _by_device_and_batch(per_task_dev, zoo),
        "latency_s": dict(zip(("min", "p5", "p25", "median", "p75", "p95", "max"), (_num(v) for v in q))),
        "cv_median": _num(np.median(cv)) if len(cv) else None,
        "remeasured": _num(ok["remeasured"].astype(bool).mean()) if len(ok) else None,
        "per_network": per_network,
    }
    if plot:
        plot_path = Path(plot)
    elif is_bundled:
        plot_path = paths.cache_dir() / "bundled_latency_hist.png"
    else:
        plot_path = paths.summary_dir(ds.root) / "latency_hist.png"
    out["plot"] = _histogram(ok, plot_path, out) if len(lat) else None
    return out


def _histogram(ok, path: Path, s: dict) -> str:
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    logs = {}
    for dev, g in ok.groupby("device_id", sort=True):
        v = g["latency_s"].to_numpy(dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        if len(v):
            logs[str(dev)] = np.log10(v)
    allv = np.concatenate(list(logs.values()))
    lo, hi = float(allv.min()), float(allv.max())
    if hi - lo < 1e-6:
        lo, hi = lo - 0.5, hi + 0.5
    bins = np.linspace(lo, hi, int(min(60, max(10, math.sqrt(len(allv))))) + 1)

    fig = Figure(figsize=(8, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for dev, v in logs.items():
        ax.hist(v, bins=bins, alpha=0.55 if len(logs) > 1 else 0.85, label=f"{dev} (n={len(v)})")
    ax.set_xlabel("log10(latency / s)  (median of repeats)")
    ax.set_ylabel("programs")
    ax.set_title(f"Latency of {s['ok_records']} ok programs: {s['tasks']} tasks, {s['devices']} device"
                 f"{'s' if s['devices'] != 1 else ''}, {s['networks']} networks")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    except OSError as e:
        raise PerfcastError(f"cannot write the histogram to {str(path)!r} ({e.strerror}); "
                            "choose another file with --plot FILE.png") from None
    return str(path)


__all__ = ["summarize"]
