"""Two timers of the same programs: a meta-schedule database's run_secs against perfcast's collector.

The operators of `bench/outside_zoo.py` (and `perfcast predict-records DB`) are scored against the run_secs that
meta-schedule's LocalRunner wrote into the tuning database, while every label the model learned from was timed by
perfcast's collector (protocol 2: the isolated worker, a calibrated inner loop of at least 5 ms per repeat, three
rounds, the lowest round median, the launching thread kept off the pool's cores). When the two timers disagree, a
model can be right about its own labels and still miss the database's. This script re-times every measured record
of each database with the collector and prints, per database and per latency band (of the collector's time), the
median ratio run_secs / collector, and the model's (default: bundled) prediction / collector and prediction / run_secs
(which of the two timers the model agrees with); per database also Kendall τ between the two timers (how far the
database's order of its programs is resolved at all: a model scored against run_secs cannot expect more, e.g. issue
#3's τ ≥ 0.6 on a log-sum-exp whose programs the two timers ordered alike to .59 and .68) and the model's against
each.

    python bench/timers.py DB_DIR [DB_DIR ...] [--limit 64] [--model DIR] [--device local]
                           [--spin-count N] [--no-pin] [--no-host-gate] [--json]

`--spin-count N`, `--no-pin` and `--no-host-gate` change three knobs of the collector's protocol
(`perfcast.collect.measure.MeasureConfig`: TVM_THREAD_POOL_SPIN_COUNT of the worker, 30000; keeping the launching
thread off the pool's cores, on; timing a round again while the host is slow, on) to see which one a disagreement
comes from.

A DB_DIR is a meta-schedule JSON database directory (e.g. `bench/outside_zoo.py --work DIR` keeps one per operator
in DIR/NAME). `--limit` re-times at most that many records per database (evenly spread over its records). Keep the
machine quiet: it measures (32 programs: ~20 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

BANDS = ((0.0, 10e-6, "< 10 µs"), (10e-6, 100e-6, "10-100 µs"), (100e-6, 1e-3, "0.1-1 ms"),
         (1e-3, float("inf"), ">= 1 ms"))


def _ratios(rows: list[dict], num: str, den: str) -> float:
    return statistics.median(r[num] / r[den] for r in rows) if rows else float("nan")


def by_band(rows: list[dict]) -> dict:
    """Per band of the collector's time: programs, median run_secs / collector and the model's ratios."""
    out = {}
    for lo, hi, name in ((0.0, float("inf"), "all"),) + BANDS:
        rs = [r for r in rows if lo <= r["collector_s"] < hi]
        if not rs:
            continue
        out[name] = {"programs": len(rs), "run_secs_over_collector": _ratios(rs, "run_secs_s", "collector_s"),
                     "predicted_over_collector": _ratios(rs, "predicted_s", "collector_s"),
                     "predicted_over_run_secs": _ratios(rs, "predicted_s", "run_secs_s")}
    return out


def rank_agreement(rows: list[dict]) -> dict:
    """Kendall τ between the two timers (how far a database's order of its programs is resolved at all: the
    ceiling for a model scored against one of them) and between the model and each timer."""
    from scipy.stats import kendalltau

    col = {k: [r[k] for r in rows] for k in ("run_secs_s", "collector_s", "predicted_s")}
    tau = (lambda a, b: float(kendalltau(col[a], col[b])[0])) if len(rows) >= 2 else (lambda a, b: float("nan"))
    return {"run_secs_vs_collector": tau("run_secs_s", "collector_s"),
            "predicted_vs_run_secs": tau("predicted_s", "run_secs_s"),
            "predicted_vs_collector": tau("predicted_s", "collector_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("databases", nargs="+", help="meta-schedule JSON database directories")
    ap.add_argument("--limit", type=int, default=64, help="re-time at most this many records per database")
    ap.add_argument("--model", default=None, help="the model that predicts every program (default: bundled)")
    ap.add_argument("--device", default="local")
    ap.add_argument("--spin-count", type=int, default=None, help="the worker's TVM_THREAD_POOL_SPIN_COUNT")
    ap.add_argument("--no-pin", action="store_true", help="let the launching thread run on any core")
    ap.add_argument("--no-host-gate", action="store_true", help="keep rounds timed while the host is slow")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import numpy as np
    import tvm

    from perfcast.collect.calibrate import time_modules
    from perfcast.collect.collector import build_workers
    from perfcast.collect.load import own_cpus
    from perfcast.collect.measure import MeasureConfig
    from perfcast.collect.sentinel import summary
    from perfcast.collect.worker import IsolatedRunner
    from perfcast.data.importer import database_records
    from perfcast.devices import get_device, require_local
    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import predict_programs
    from perfcast.models import load_model

    if a.limit < 1:
        raise PerfcastError(f"--limit {a.limit}: re-time at least one record per database (e.g. --limit 64)")
    spec = get_device(a.device)
    require_local(spec, "bench/timers.py")
    model = load_model(a.model)
    knobs = {}
    if a.spin_count is not None:
        knobs["spin_count"] = a.spin_count
    if a.no_pin:
        knobs["pin_launcher"] = False
    if a.no_host_gate:
        knobs["host_gate"] = None
    cfg = MeasureConfig(**knobs)
    picked = {}
    for db in a.databases:  # every database read before any measuring (a bad directory: a one-line error)
        recs = [r for r in database_records(db) if r.measured]
        if not recs:
            raise PerfcastError(f"{db}: no measured tuning record to re-time; tune first (`perfcast tune`)")
        pick = sorted({int(i) for i in np.linspace(0, len(recs) - 1, min(a.limit, len(recs)))})
        picked[db] = [(recs[i], recs[i].program()) for i in pick]  # (record, its program)
    out = {}
    with IsolatedRunner(spec.threads, cfg, workers=build_workers(own_cpus())) as run:
        timed = {db: time_modules(run, [tvm.ir.save_json(m) for _, m in rm], spec.target_json)
                 for db, rm in picked.items()}
        gate = run.host.stats()
    for db, rm in picked.items():
        ok = [(r, m, float(t)) for (r, m), t in zip(rm, timed[db]) if np.isfinite(t)]  # (NaN: failed to run)
        rows = [{"run_secs_s": r.measured_s, "collector_s": t} for r, _, t in ok]
        pred = predict_programs([m for _, m, _ in ok], model=model, device=a.device)
        for row, p in zip(rows, pred):
            row["predicted_s"] = float(p)
        out[Path(db).name] = {"database": db, "timed": len(rows), "picked": len(rm), "bands": by_band(rows),
                              "kendall_tau": rank_agreement(rows), "measure_config": knobs, "programs": rows}
    if a.json:
        print(json.dumps({**out, "host_gate": gate}, indent=1))
        return
    print(summary(gate))
    for name, o in out.items():
        t = o["kendall_tau"]
        print(f"{name}: {o['timed']} of {o['picked']} programs re-timed by the collector; Kendall τ run_secs vs "
              f"collector {t['run_secs_vs_collector']:.2f} (the ceiling), the model vs run_secs "
              f"{t['predicted_vs_run_secs']:.2f}, vs collector {t['predicted_vs_collector']:.2f}")
        for band, b in o["bands"].items():
            print(f"  {band:10s} {b['programs']:4d} programs  run_secs / collector {b['run_secs_over_collector']:.2f}"
                  f"  predicted / collector {b['predicted_over_collector']:.2f}, predicted / run_secs "
                  f"{b['predicted_over_run_secs']:.2f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
