"""A CPU the bundled model never saw: how few measured tasks bring it to the error of the CPUs it trained on?

    python bench/new_cpu.py --target-data DIR --measure-out DIR [--device local] [--model DIR] [--ks 10,20,50]
                            [--methods proxy,proxy:then=cmd,cmd,lottery] [--random-seeds 3]
                            [--programs-per-task 8] [--json FILE]

`bench/cross_device.py` holds a device of the bundled data out and plays its records back as the measurements;
this bench is the user's case on a machine whose CPU is in none of the bundled data (see `perfcast devices`):

1. `--target-data`: that CPU's records of networks the bundled model holds out (collect them first, e.g.
   `perfcast collect -n resnet50 -n mobilenet_v2 -n bert_tiny -n resnet18 --device local --programs-per-task 8
   --out DIR`); they are only scored, never learned from. (znver5's, used for the README's figures of 2026-11-30,
   joined the bundled data that evening: commit c075dd0 has them in `data/znver5-2026-11-30/` and the bundled
   model that never saw the CPU.)
2. For each K, sampler (`kmeans`: seed 0; `random`: seeds 0..N-1) the bundled model picks K tasks among the bundled
   networks' tasks as `perfcast adapt` does, and the collector measures them on the device for real into
   `--measure-out` (a task measured by an earlier run or pick is read back, not measured again: the runs share
   their measurements, and a killed run resumes).
3. Each method adapts the model to those measurements (as `perfcast adapt`; `proxy:then=cmd` is `--method proxy
   --param then=cmd`), and is scored on the target records of the tasks not measured: MAPE, the median of
   predicted / measured, per held-out network, and the share inside the 80 % interval `perfcast adapt` fits
   (`crossfit_intervals`, over the measured tasks) and inside the base model's (fitted on its own devices).

Prints a table per K (kmeans / random mean) with the measuring time the K tasks cost (recorded build + run seconds
of the records used) and, last, the figure: the best method's MAPE at each K against the model without adaptation.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target-data", required=True, help="the new CPU's records of held-out networks (scored only)")
    ap.add_argument("--measure-out", required=True, help="dataset directory for the K tasks' measurements (reused)")
    ap.add_argument("--device", default="local")
    ap.add_argument("--model", default=None, help="base model directory (default: bundled)")
    ap.add_argument("--ks", default="10,20,50")
    ap.add_argument("--methods", default="proxy,proxy:then=cmd,cmd,lottery")
    ap.add_argument("--random-seeds", type=int, default=3)
    ap.add_argument("--programs-per-task", type=int, default=8)
    ap.add_argument("--json", default=None, help="write every run here")
    a = ap.parse_args()

    from perfcast.adapt.workflow import (AdaptConfig, _measure, adapt_model, crossfit_intervals, load_for_adapt,
                                         proxy_of, recorded_seconds, select_tasks)
    from perfcast.eval.intervals import interval_coverage, model_intervals
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.eval.workflow import load_data
    from perfcast.models import load_model

    from cross_device import _method_spec

    spec = get_device(a.device)
    dkey = device_key(spec)
    base = load_model(a.model)
    t0 = time.time()
    ds, df, X, net_rows, in_pool, src = load_for_adapt(None, dkey, base.needs_asm, 0, progress=False)
    if (df["device_key"] == dkey).any():
        raise SystemExit(f"the bundled data has records of {dkey}: this bench is for a CPU it has none of; "
                         "use bench/cross_device.py")
    y = df["latency_s"].to_numpy()
    _, tdf, tX = load_data(a.target_data, device=None, progress=False, asm=base.needs_asm)
    tsel = np.flatnonzero(tdf["device_key"].to_numpy() == dkey)
    if not len(tsel):
        raise SystemExit(f"{a.target_data} has no record of {dkey}; collect them with `perfcast collect "
                         f"--device {a.device} --out {a.target_data}` (networks the model holds out)")
    tdf, tX = tdf.iloc[tsel].reset_index(drop=True), tX.take(tsel)
    ty = tdf["latency_s"].to_numpy()
    tnet = tdf["networks"].map(lambda ns: sorted(ns)[0]).to_numpy()
    print(f"{dkey}: {len(tdf)} target records of {tdf['workload_key'].nunique()} tasks "
          f"({', '.join(sorted(set(tnet)))}); source data ready in {time.time() - t0:.0f} s", flush=True)
    cfg = AdaptConfig(device=a.device, programs_per_task=a.programs_per_task, seed=0)  # seed 0: the same programs

    src_table = model_intervals(base)  # the base's intervals: its errors on the devices it trained on

    def score(m, held, table=None) -> dict:
        p = m.predict(tX.take(held))
        r = p / ty[held]
        nets = {n: float(np.mean(np.abs(r[tnet[held] == n] - 1))) for n in sorted(set(tnet[held]))}
        out = {"mape": float(np.mean(np.abs(r - 1))), "median_ratio": float(np.median(r)), "by_network": nets}
        for name, t in (("inside_base_interval", src_table), ("inside_crossfit_interval", table)):
            if t is not None:
                out[name] = interval_coverage(t, tX.take(held), ty[held], p)["coverage"]
        return out

    runs = []
    first = score(base, np.arange(len(tdf)))
    print(f"no adaptation: MAPE {first['mape']:.1%}, median predicted / measured {first['median_ratio']:.2f}"
          + (f", inside the model's interval {first['inside_base_interval']:.0%}" if src_table else ""))
    ks = [int(k) for k in a.ks.split(",")]
    methods = a.methods.split(",")
    for k in ks:
        for sampler, seed in [("kmeans", 0)] + [("random", s) for s in range(a.random_seeds)]:
            chosen = select_tasks(base, df[in_pool], X, spec.feature_vector(), k, sampler, seed)
            have = set()
            if Path(a.measure_out, "perfcast_dataset.json").exists():  # tasks an earlier pick or run measured
                have = set(records_frame(Dataset(a.measure_out))["workload_key"])
            todo = [t for t in chosen if t not in have]
            if todo:
                _measure(ds, net_rows, todo, cfg, a.measure_out, log=lambda m: None, progress=False)
            _, mdf, mX = load_data(a.measure_out, progress=False, asm=base.needs_asm)
            mk = mdf["workload_key"].to_numpy()
            ok = mdf["device_key"].to_numpy() == dkey
            meas = np.concatenate([np.flatnonzero(ok & (mk == t))[: a.programs_per_task] for t in chosen])
            if not len(meas):
                print(f"  K={k} {sampler} seed {seed}: no program of the chosen tasks ran; skipped")
                continue
            held = np.flatnonzero(~tdf["workload_key"].isin(chosen).to_numpy())
            secs = recorded_seconds(mdf, meas)
            before = score(base, held)
            for method in methods:
                t1 = time.time()
                name, mparams = _method_spec(method, {})
                my = mdf["latency_s"].to_numpy()
                m = adapt_model(base, name, mX.take(meas), my[meas], X.take(src), y[src], mparams, seed=seed)
                adapt_s = time.time() - t1
                px = proxy_of(m, df, X, dkey)
                by_task = {t: (mX.take(meas[mk[meas] == t]), my[meas[mk[meas] == t]]) for t in set(mk[meas])}
                table = crossfit_intervals(base, name, by_task, X.take(src), y[src], mparams, seed)  # as adapt does
                runs.append({"k": k, "sampler": sampler, "seed": seed, "method": method, "tasks": chosen,
                             "programs": int(len(meas)), "held_out": int(len(held)), "measure_s": round(secs, 1),
                             "adapt_s": round(adapt_s, 1), "before": before, "after": score(m, held, table),
                             **({"proxy": px["device_key"], "proxy_scale": px["scale"]} if px else {})})
                r = runs[-1]
                iv = (f"; inside the cross-fitted interval {r['after']['inside_crossfit_interval']:.0%}, the base's "
                      f"{r['after']['inside_base_interval']:.0%}" if table is not None and src_table else "")
                print(f"  K={k:3d} {sampler:6s} seed {seed}  {method:16s} MAPE {before['mape']:.1%} -> "
                      f"{r['after']['mape']:.1%} (median pred/meas {r['after']['median_ratio']:.2f}; "
                      f"{r['programs']} programs, measuring {secs:.0f} s, adapting {r['adapt_s']:.0f} s"
                      + (f"; proxy {px['device_key'].split('@')[-1]} x{px['scale']:.2f}" if px else "") + iv + ")",
                      flush=True)
    _summary(runs, ks, methods, first)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device_key": dkey, "target_records": len(tdf), "no_adaptation": first, "runs": runs}, f,
                      indent=1)


def _mean(runs, key="mape", **sel) -> float:
    v = [r["after"][key] for r in runs if all(r[k] == w for k, w in sel.items())]
    return float(np.mean(v)) if v else float("nan")


def _summary(runs, ks, methods, first) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"new CPU: MAPE on held-out networks' records after adaptation, kmeans / random mean "
                    f"(no adaptation {first['mape']:.1%})")
    t.add_column("method")
    for k in ks:
        secs = np.mean([r["measure_s"] for r in runs if r["k"] == k] or [np.nan])
        t.add_column(f"K={k} ({secs:.0f} s)")
    for m in methods:
        t.add_row(m, *[f"{_mean(runs, method=m, k=k, sampler='kmeans'):.1%} / "
                       f"{_mean(runs, method=m, k=k, sampler='random'):.1%}" for k in ks])
    Console().print(t)
    for k in ks:
        cf = [r["after"].get("inside_crossfit_interval") for r in runs if r["k"] == k]
        cf = [c for c in cf if c is not None]
        if cf:
            print(f"K={k}: held-out programs inside the cross-fitted 80 % interval: mean {np.mean(cf):.0%} "
                  f"(range {min(cf):.0%}-{max(cf):.0%} over {len(cf)} runs)")
    for k in ks:
        best = min(methods, key=lambda m: _mean(runs, method=m, k=k, sampler="kmeans"))
        print(f"K={k}: best {best} {_mean(runs, method=best, k=k, sampler='kmeans'):.1%} (kmeans), "
              f"{_mean(runs, method=best, k=k, sampler='random'):.1%} (random mean); without adaptation "
              f"{first['mape']:.1%}")


if __name__ == "__main__":
    main()
