"""Is this host running at its own speed? Other tenants of a cloud VM's physical cores slow it for seconds at a
time, invisibly to the VM's load figures (no steal time): run this before collecting.

For `--seconds`, over and over: a fixed scalar loop (pure Python, ~1 ms) on each core this process may use, in
turn, and the collector's host sentinel (`perfcast.collect.sentinel`: its CPU part, L1-resident vector
multiply-adds, and its cache part, a sweep of 200 KB per thread, on the device's threads, the launching thread
pinned as the collector pins it). Prints per core the fastest loop, the share of samples over 1.3x it and the slow
spells (runs of such samples: how many, how long); for each sentinel part the same, and how often the CPU part
agrees with the loops (slow when some core is slow; the cache part answers to other tenants' use of the caches,
which the loops do not see). No model: only the host.

With `--db DIR` (a meta-schedule database) it also times the database's fastest program each sample (the median of
3 means over `--number` calls, as `time_evaluator` gives them), and prints how its slow samples line up with the
sentinel's: each part's ratio to its fastest when the program is slow (over 1.3x its fastest) and when it is not,
and the correlation of their ratios. That is the check that a part follows what a real kernel suffers (the cache
part and a 2 x 400 KB RMSNorm, 2026-12-01: correlation 0.83, 1.67x vs 1.09x).

    python bench/host_contention.py [--seconds 30] [--device local] [--db DIR [--number 500]] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

SLOW = 1.3  # a sample over 1.3x the fastest of its series is a slow one


def scalar_loop_ms(n: int = 50_000) -> float:
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return (time.perf_counter() - t) * 1e3


def spells(slow: np.ndarray, times: np.ndarray) -> dict:
    """Runs of consecutive slow samples: how many, and their lengths in seconds (first to last sample + one gap)."""
    gap = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    lengths, start = [], None
    for k, s in enumerate(list(slow) + [False]):
        if s and start is None:
            start = k
        elif not s and start is not None:
            lengths.append(float(times[k - 1] - times[start]) + gap)
            start = None
    return {"slow_share": float(np.mean(slow)) if len(slow) else 0.0, "spells": len(lengths),
            "spell_median_s": float(np.median(lengths)) if lengths else 0.0,
            "spell_max_s": float(max(lengths)) if lengths else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--device", default="local", help="whose sentinel (target and threads) to time")
    ap.add_argument("--db", help="a meta-schedule database whose fastest program is timed beside the sentinel")
    ap.add_argument("--number", type=int, default=500, help="calls per mean when timing the --db program")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.seconds <= 0:
        raise SystemExit(f"--seconds {a.seconds}: give a positive duration (30 is enough to see spells)")
    if a.number < 1:
        raise SystemExit(f"--number {a.number}: give at least 1 call per mean (500 suits a few-us program)")

    import tvm

    from perfcast.collect.affinity import LauncherPin
    from perfcast.collect.measure import MeasureConfig
    from perfcast.collect.sentinel import Sentinel
    from perfcast.devices import get_device

    spec = get_device(a.device)
    os.environ.setdefault("TVM_NUM_THREADS", str(spec.threads))  # before the runtime's pool exists, and as the
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(MeasureConfig().spin_count))  # collector's workers
    cores = sorted(os.sched_getaffinity(0))
    sentinel = Sentinel(spec.target_json, spec.threads, tvm.cpu())
    program = _program(a.db, spec, a.number) if a.db else None
    rows, times = [], []
    with LauncherPin() as pin:
        pin.apply()  # the pool exists now (the sentinel's burn-in ran): keep the launcher off its cores
        launcher = set(os.sched_getaffinity(0))
        t0 = time.time()
        while time.time() - t0 < a.seconds:
            time.sleep(0.1)  # first: the pool threads stop spinning after the sentinel (~20 ms), off the loops' cores
            loops = []
            for c in cores:
                os.sched_setaffinity(0, {c})
                loops.append(min(scalar_loop_ms() for _ in range(2)))
            os.sched_setaffinity(0, launcher)
            rows.append([x * 1e6 for x in sentinel.seconds()] + loops + ([program()] if program else []))
            times.append(time.time() - t0)
    r, times = np.array(rows), np.array(times)
    best = r.min(0)
    slow = r > SLOW * best
    if program is not None:  # the last column
        q, slow_p = r / best, slow[:, -1]
        prog = {"db": a.db, "best_us": round(float(best[-1]), 2), **spells(slow_p, times)}
        for k, name in enumerate(("cpu", "cache")):
            prog[f"{name}_ratio_when_slow"] = round(float(np.median(q[slow_p, k])), 3) if slow_p.any() else None
            prog[f"{name}_ratio_when_fast"] = round(float(np.median(q[~slow_p, k])), 3) if (~slow_p).any() else None
            prog[f"{name}_corr"] = round(float(np.corrcoef(q[:, -1], q[:, k])[0, 1]), 3) if len(r) > 2 else None
        r, best, slow = r[:, :-1], best[:-1], slow[:, :-1]
    out = {"samples": len(r), "seconds": round(float(times[-1]), 1), "threads": spec.threads,
           "sentinel_cpu": {"best_us": round(float(best[0]), 2), **spells(slow[:, 0], times),
                            "agrees_with_cores": float(np.mean(slow[:, 0] == slow[:, 2:].any(1)))},
           "sentinel_cache": {"best_us": round(float(best[1]), 2), **spells(slow[:, 1], times)},
           "cores": {str(c): {"best_ms": round(float(best[k + 2]), 3), **spells(slow[:, k + 2], times)}
                     for k, c in enumerate(cores)}}
    if program is not None:
        out["program"] = prog
    if a.json:
        print(json.dumps(out))
        return
    print(f"{out['samples']} samples over {out['seconds']} s; slow = over {SLOW}x the fastest sample")
    for name, g in [("cpu part", out["sentinel_cpu"]), ("cache part", out["sentinel_cache"])] + \
            [(f"core {c}", g) for c, g in out["cores"].items()]:
        fastest = f"{g['best_us']} us" if "best_us" in g else f"{g['best_ms']} ms"
        print(f"{name:10s} fastest {fastest:10s} slow {100 * g['slow_share']:5.1f} % of the time, "
              f"{g['spells']} spells (median {g['spell_median_s']:.1f} s, longest {g['spell_max_s']:.1f} s)")
    print(f"the CPU part is slow exactly when some core is: {100 * out['sentinel_cpu']['agrees_with_cores']:.0f} % "
          "of samples")
    if program is not None:
        g = out["program"]
        print(f"{'program':10s} fastest {g['best_us']} us, slow {100 * g['slow_share']:5.1f} % of the time, "
              f"{g['spells']} spells (median {g['spell_median_s']:.1f} s, longest {g['spell_max_s']:.1f} s)")
        for name in ("cpu", "cache"):
            print(f"  {name} part: {g[f'{name}_ratio_when_slow']}x its fastest when the program is slow, "
                  f"{g[f'{name}_ratio_when_fast']}x when not; correlation of the ratios {g[f'{name}_corr']}")


def _program(db: str, spec, number: int):
    """A function timing the database's fastest record (built for the device's target) in microseconds."""
    import tvm

    from perfcast._tvm.util import arg_shapes, main_func
    from perfcast.collect.measure import make_args
    from perfcast.data.importer import database_records

    recs = database_records(db)  # fastest first
    if not recs:
        raise SystemExit(f"--db {db}: the database has no tuning records; tune into it first or drop --db")
    mod = recs[0].program()
    lib = tvm.build(mod, target=spec.target())
    args = make_args(arg_shapes(main_func(mod)), tvm.cpu())
    lib["main"](*args)  # burn-in
    ev = lib.time_evaluator("main", tvm.cpu(), number=number, repeat=3)
    return lambda: float(np.median(ev(*args).results)) * 1e6


if __name__ == "__main__":
    main()
