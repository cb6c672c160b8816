"""Is the host gate worth its waiting? Time a sample of this machine's programs with the sentinel read around every
round but nothing timed again (the gate at infinity), in `--rounds` rounds each, and ask whether the rounds the
gate would have re-timed (a sentinel part over `--gate` x its baseline) were the slow ones.

For every round: its excess, the round's median over the program's lowest round median, and the sentinel ratios
(per part, as `perfcast.collect.sentinel.HostGate` judges them). Prints the rank correlation of excess with each
part's ratio; the median excess and the share over 10 % among flagged and unflagged rounds, per part and for the
gating parts (GATED_PARTS); how many programs a part flags in every round (then it reads the program, not the
host); and the label each program would get (the lowest round) from all rounds vs from the rounds the gate passes
only — what the gate changes about a label, short of the re-timing itself. Keep the machine quiet; no model.

    python bench/host_gate_value.py [--data DIR | --db DB] [--n 60] [--rounds 5] [--gate 1.5] [--seed 4]
                                    [--max-latency-us US] [--json]

`--db DB` times a meta-schedule database's programs (e.g. the RMSNorm database `bench/outside_zoo.py` tunes: the
L2-resident microsecond kernels the cache part was made for).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--db", default=None, help="time a meta-schedule database's programs instead of the dataset's")
    ap.add_argument("--n", type=int, default=60, help="programs to time")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per program")
    ap.add_argument("--gate", type=float, default=1.5, help="the gate whose verdicts are scored")
    ap.add_argument("--device", default="local")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--max-latency-us", type=float, default=None,
                    help="only programs whose stored label is below this (e.g. 20: the L2-resident kernels)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.n < 2 or a.rounds < 2 or a.gate <= 1:
        raise SystemExit(f"--n {a.n} --rounds {a.rounds} --gate {a.gate}: need at least 2 programs, 2 rounds and a "
                         "gate above 1 (e.g. --n 60 --rounds 5 --gate 1.5)")

    import tvm
    import tvm.script
    from scipy.stats import spearmanr

    from perfcast import paths
    from perfcast._tvm.util import load_x86_intrinsics
    from perfcast.collect.measure import MeasureConfig
    from perfcast.collect.sentinel import GATED_PARTS, PARTS
    from perfcast.collect.worker import IsolatedRunner
    from perfcast.data.store import Dataset
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key, device_key_of_json

    spec = get_device(a.device)
    dkey = device_key(spec)
    load_x86_intrinsics()
    if a.db:
        from perfcast.data.importer import database_records

        recs = [r for r in database_records(a.db) if r.measured]
        if a.max_latency_us is not None:
            recs = [r for r in recs if r.measured_s < a.max_latency_us * 1e-6]
        if not recs:
            raise SystemExit(f"--db {a.db}: no measured tuning record{' that fast' if a.max_latency_us else ''}")
        pick = np.random.default_rng(a.seed).permutation(len(recs))[:a.n]
        mods = [tvm.ir.save_json(recs[i].program()) for i in pick]
    else:
        ds = Dataset(a.data or paths.bundled_dataset_dir())
        cols = ["record_id", "device_spec_json", "tir_script", "status", "protocol", "latency_s"]
        t = ds.read("records", cols).to_pandas()
        t = t[(t["status"] == "ok") & (t["protocol"] == 2) & (t["device_spec_json"].map(device_key_of_json) == dkey)]
        if a.max_latency_us is not None:
            t = t[t["latency_s"] < a.max_latency_us * 1e-6]
        if t.empty:
            raise SystemExit(f"no ok protocol-2 record of {dkey!r} in {str(ds.root)!r}: collect some here first")
        t = t.drop_duplicates("record_id").sample(min(a.n, len(t)), random_state=a.seed)
        mods = [tvm.ir.save_json(tvm.script.from_source(s)) for s in t["tir_script"]]
    cfg = dataclasses.replace(MeasureConfig(), rounds=a.rounds, host_gate=math.inf)  # read, never wait
    results = []
    with IsolatedRunner(spec.threads, cfg, workers=2, per_worker=6) as run:
        for i in range(0, len(mods), run.slots):
            results += run.run_batch(mods[i:i + run.slots], spec.target_json)
        base = run.host.stats()["sentinel_baseline_us"]
    ok = [r for r in results if r["status"] == "ok" and len(r["host_parts"]) == len(r["round_latencies_s"])]
    excess = np.concatenate([np.array(r["round_latencies_s"]) / min(r["round_latencies_s"]) for r in ok])
    parts = np.concatenate([np.array(r["host_parts"]) for r in ok])  # rounds x PARTS
    gating = [k for k, p in enumerate(PARTS) if p in GATED_PARTS]
    flagged = parts[:, gating].max(1) > a.gate  # what the gate re-times
    out = {"device_key": dkey, "programs": len(ok), "rounds": len(excess), "gate": a.gate,
           "sentinel_baseline_us": base, "flagged_rounds": int(flagged.sum()),
           "flagged_by": {p: int((parts[:, k] > a.gate).sum()) for k, p in enumerate(PARTS)},
           "spearman_excess": {p: float(spearmanr(excess, parts[:, k])[0]) for k, p in enumerate(PARTS)}}
    def excess_of(m: np.ndarray) -> dict:
        return {"rounds": int(m.sum()), "median_excess": float(np.median(excess[m])) if m.any() else None,
                "share_over_10pct": float(np.mean(excess[m] > 1.1)) if m.any() else None}

    out["by_part"] = {p: {"flagged": excess_of(parts[:, k] > a.gate), "unflagged": excess_of(parts[:, k] <= a.gate)}
                      for k, p in enumerate(PARTS)}
    out["flagged"], out["unflagged"] = excess_of(flagged), excess_of(~flagged)
    # the label from all rounds vs from the unflagged ones (programs with at least one unflagged round)
    moved = []
    for r in ok:
        keep = [x for x, p in zip(r["round_latencies_s"], r["host_parts"]) if max(p[k] for k in gating) <= a.gate]
        if keep:
            moved.append(min(keep) / min(r["round_latencies_s"]))
    moved = np.array(moved)
    # programs some part flags in every round: that part read slow because of the program, not the host
    lat = np.array([min(r["round_latencies_s"]) for r in ok])
    every = np.array([all(max(p) > a.gate for p in r["host_parts"]) for r in ok])
    out["programs_flagged_every_round"] = {"programs": int(every.sum()),
                                           "median_latency_us": float(np.median(lat[every]) * 1e6) if every.any()
                                           else None, "others_median_latency_us": float(np.median(lat[~every]) * 1e6)}
    out["label_unflagged_over_all"] = {"programs": len(moved), "changed": int(np.sum(moved > 1)),
                                       "median": float(np.median(moved)), "max": float(moved.max())}
    if a.json:
        print(json.dumps(out))
        return
    print(f"{out['programs']} programs {'of ' + a.db if a.db else 'of ' + dkey}, {out['rounds']} rounds; "
          f"sentinel baseline {base} us")
    print(f"rounds over the gate {a.gate}x: {out['flagged_rounds']} ({out['flagged_by']})")
    print("rank correlation of a round's excess with its sentinel ratio: "
          + ", ".join(f"{p} {v:.3f}" for p, v in out["spearman_excess"].items()))
    for label, d in [(f"{p} part", out["by_part"][p]) for p in PARTS] + [(f"gate ({', '.join(GATED_PARTS)})", out)]:
        for name in ("flagged", "unflagged"):
            g = d[name]
            if g["median_excess"] is not None:
                print(f"{label:12s} {name:9s} {g['rounds']:5d} rounds: median excess {g['median_excess']:.3f}, "
                      f"over 10 % slow {100 * g['share_over_10pct']:.1f} %")
    g = out["programs_flagged_every_round"]
    print(f"programs some part flags in every round: {g['programs']} (median latency {g['median_latency_us']} us; the "
          f"others' {g['others_median_latency_us']:.1f} us)")
    g = out["label_unflagged_over_all"]
    print(f"labels from unflagged rounds only / from all: changed {g['changed']} of {g['programs']}, "
          f"median {g['median']:.4f}, max {g['max']:.3f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
