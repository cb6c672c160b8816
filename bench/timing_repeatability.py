"""How repeatable is the ground truth? Re-time a sample of a dataset's programs of this machine twice, minutes
apart, with the collector's runner, and compare the two passes with each other and with the stored labels.

    python bench/timing_repeatability.py [--data DIR] [--n 200] [--device local] [--protocol 2] [--seed 1]
                                         [--host-gate on|off|both] [--min-label-us X] [--max-label-us Y]
                                         [--csv OUT.csv] [--json]

The programs are drawn from the dataset's ok records of `--device` on this CPU (its device key); each is rebuilt
from its stored TVMScript. Pass B times them in reverse order, so a program meets other neighbours and, as often
as not, another worker process. `--protocol 1` times like perfcast did before the launching thread was pinned
and rounds were introduced (one round, thread free): the before/after comparison of the same programs in one run.
Prints, per comparison, the median and 90th/99th percentile of |log(a/b)| and the MAPE of one as a prediction of
the other (pass B for pass A: the noise floor of any model's MAPE on such labels). Keep the machine quiet.
`--host-gate off` times without the host gate (`perfcast.collect.sentinel`: rounds timed while other tenants slow
the host are timed again); `both` runs four passes, gated A, ungated A, ungated B, gated B, and compares the gated
pair and the ungated pair (the same programs, interleaved in time), with what the gate cost.

`--min-label-us` / `--max-label-us` draw only programs whose stored label lies in that range (the microsecond,
cache-resident kernels the host's slow cache state slows most). Each pass also reads, per program, the host gate's
cache-part sentinel in its kept round; the stored labels are compared with each gated pass overall (median
stored / now: the labels' bias against today) and split by that reading: at most 1.3x the lowest reading of the run
("quiet cache") or above ("slow cache"); and pass B / pass A is split by pass A's latency (a change of host state
between the passes shows most in the shortest programs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math

import numpy as np


BUCKET_EDGES_US = (0, 3, 6, 10, 20, 100, 1000, math.inf)  # pass A's latency buckets for the pass B / A medians


def agreement(a: np.ndarray, b: np.ndarray) -> dict:
    """|log ratio| percentiles and MAPE of `b` as a prediction of `a` over pairs where both are finite."""
    m = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    lr = np.abs(np.log(a[m] / b[m]))
    return {"pairs": int(m.sum()), "median_abs_log_ratio": float(np.median(lr)),
            "p90_abs_log_ratio": float(np.percentile(lr, 90)), "p99_abs_log_ratio": float(np.percentile(lr, 99)),
            "share_over_10pct": float(np.mean(lr > math.log(1.1))), "mape": float(np.mean(np.abs(b[m] / a[m] - 1)))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--n", type=int, default=200, help="programs to re-time")
    ap.add_argument("--device", default="local")
    ap.add_argument("--protocol", type=int, default=2, choices=(1, 2))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--host-gate", default="on", choices=("on", "off", "both"))
    ap.add_argument("--min-label-us", type=float, default=0.0, help="only programs stored at least this slow")
    ap.add_argument("--max-label-us", type=float, default=math.inf, help="only programs stored at most this slow")
    ap.add_argument("--csv", default=None, help="write every program's latencies here")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import dataclasses

    import pandas as pd

    from perfcast import paths
    from perfcast.collect.calibrate import time_stored
    from perfcast.collect.measure import MeasureConfig
    from perfcast.collect.sentinel import summary
    from perfcast.collect.worker import IsolatedRunner
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.errors import PerfcastError

    spec = get_device(a.device)
    dkey = device_key(spec)
    ds = Dataset(a.data or paths.bundled_dataset_dir())
    # the labels models train on (`records_frame`: a program re-timed under a newer protocol is that record only)
    t = records_frame(ds, device=dkey)
    t = t[t["latency_s"].between(a.min_label_us * 1e-6, a.max_label_us * 1e-6)]
    if t.empty:
        raise PerfcastError(f"no ok record of {dkey!r} with a label of {a.min_label_us}-{a.max_label_us} us: widen "
                         "--min-label-us / --max-label-us")
    t = t.sample(min(a.n, len(t)), random_state=a.seed)
    text = ds.read("records", ["record_id", "tir_script"]).to_pandas().drop_duplicates("record_id")
    scripts = list(t[["record_id"]].merge(text, on="record_id", how="left")["tir_script"])
    # protocol 1: one round of 5 repeats (2 above 1 s), launching thread free, one program per worker
    if a.protocol == 1 and a.host_gate != "off":
        raise PerfcastError("--protocol 1 times as perfcast did before 2026-11-25, without the host gate: add "
                         "--host-gate off")
    cfg = MeasureConfig() if a.protocol == 2 else dataclasses.replace(
        MeasureConfig(), rounds=1, repeats=5, very_slow_repeats=2, pin_launcher=False, host_gate=None)
    fwd, rev = list(range(len(scripts))), list(reversed(range(len(scripts))))
    runs = {"on": [("gated", cfg)], "off": [("ungated", dataclasses.replace(cfg, host_gate=None))]}
    runs["both"] = runs["on"] + runs["off"]
    per_worker = 6 if a.protocol == 2 else 1
    passes: dict[str, np.ndarray] = {}
    cache: dict[str, np.ndarray] = {}
    gates: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        runners = {name: stack.enter_context(IsolatedRunner(spec.threads, c, workers=2, per_worker=per_worker))
                   for name, c in runs[a.host_gate]}
        names = list(runners)
        for name, order in [(n, fwd) for n in names] + [(n, rev) for n in reversed(names)]:  # A's, then B's
            key = f"{name}_{'a' if order is fwd else 'b'}"
            cache[key] = np.full(len(scripts), np.nan)
            passes[key] = time_stored(runners[name], scripts, spec.target_json, order, cache_s=cache[key])
        gates = {name: r.host.stats() for name, r in runners.items()}
    stored = t["latency_s"].to_numpy(float)
    out = {"device_key": dkey, "programs": len(scripts), "protocol": a.protocol,
           "stored_protocols": {str(k): int(v) for k, v in t["protocol"].value_counts().items()}}
    for name in names:
        out[f"{name}: pass_b_vs_pass_a"] = agreement(passes[f"{name}_a"], passes[f"{name}_b"])
        out[f"{name}: stored_vs_pass_a"] = agreement(passes[f"{name}_a"], stored)
    out["host_gate"] = gates
    lowest = np.nanmin(np.concatenate(list(cache.values()))) if any(np.isfinite(c).any() for c in cache.values()) \
        else math.nan
    for key, now in passes.items():
        if not np.isfinite(cache[key]).any():
            continue
        quiet, slow = cache[key] <= 1.3 * lowest, cache[key] > 1.3 * lowest  # (a program that failed is neither)
        ratio = stored / now
        out[f"{key}: stored_over_now"] = {
            "median": float(np.nanmedian(ratio)), "cache_part_median_us": float(np.nanmedian(cache[key]) * 1e6),
            "quiet_cache": {"programs": int(quiet.sum()), "median": float(np.nanmedian(ratio[quiet]))
                            if quiet.any() else None,
                            "share_stored_over_1.2x": float(np.mean(ratio[quiet] > 1.2)) if quiet.any() else None},
            "slow_cache": {"programs": int(slow.sum()), "median": float(np.nanmedian(ratio[slow]))
                           if slow.any() else None}}
    out["cache_part_lowest_us"] = float(lowest * 1e6)
    for name in names:  # how much slower pass B ran than pass A, by how long the program runs
        a_s, b_s = passes[f"{name}_a"], passes[f"{name}_b"]
        out[f"{name}: pass_b_over_a_by_latency"] = {
            f"{lo:g}-{hi:g} us": {"programs": int(m.sum()), "median": float(np.median(b_s[m] / a_s[m]))}
            for lo, hi in zip(BUCKET_EDGES_US[:-1], BUCKET_EDGES_US[1:])
            for m in [(a_s >= lo * 1e-6) & (a_s < hi * 1e-6) & np.isfinite(b_s)] if m.any()}
    if a.csv:
        pd.DataFrame({"record_id": t["record_id"], "task_name": t["task_name"], "schedule_kind": t["schedule_kind"],
                      "stored_s": stored, **{f"{k}_s": v for k, v in passes.items()},
                      **{f"{k}_cache_part_s": v for k, v in cache.items()}}).to_csv(a.csv, index=False)
    if a.json:
        print(json.dumps(out))
        return
    print(f"{out['programs']} programs of {dkey}, timed twice with protocol {a.protocol} "
          f"(stored labels: protocols {out['stored_protocols']})")
    for k in [k for k in out if k.endswith("_vs_pass_a")]:
        g = out[k]
        print(f"{k:27s} |log ratio| median {g['median_abs_log_ratio']:.3f} p90 {g['p90_abs_log_ratio']:.3f} "
              f"p99 {g['p99_abs_log_ratio']:.3f}; {100 * g['share_over_10pct']:.1f} % differ by > 10 %; "
              f"MAPE {100 * g['mape']:.1f} %")
    for k in [k for k in out if k.endswith("stored_over_now")]:
        g = out[k]
        print(f"{k:27s} median {g['median']:.3f} (cache part median {g['cache_part_median_us']:.2f} us, lowest "
              f"{out['cache_part_lowest_us']:.2f}); quiet cache {g['quiet_cache']['programs']} programs: "
              f"{g['quiet_cache']['median'] or math.nan:.3f} (stored over 1.2x: "
              f"{100 * (g['quiet_cache']['share_stored_over_1.2x'] or math.nan):.1f} %); slow cache "
              f"{g['slow_cache']['programs']}: "
              f"{g['slow_cache']['median'] or math.nan:.3f}")
    for k in [k for k in out if k.endswith("_by_latency")]:
        print(f"{k}: " + "; ".join(f"{b} {g['median']:.3f} ({g['programs']})" for b, g in out[k].items()))
    for name, g in gates.items():
        if g["gate"] is not None:
            print(f"{name} runner: {summary(g)}; sentinel baseline {g['sentinel_baseline_us']} us")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
