"""perfcast as the cost model of TVM meta-schedule's search, against TVM's own (XGBoost), on operators from outside
the zoo (`bench/outside_zoo.py`'s four: no network of the training data has them).

For each operator and cost model, `ms.tune_tir` runs the evolutionary search with the same seed, trial budget and
rounds of 16 measured candidates (meta-schedule's LocalRunner; perfcast's isolated builder, as `perfcast tune`).
XGBoost starts untrained and learns from the search's measurements; the perfcast model is pre-trained and fixed
(`perfcast`) or corrected per task from the search's measurements (`perfcast-online`, `--arms`). Afterwards the best
program each search found is timed again by the collector's timer (`perfcast.collect`), all cost models' bests of an
operator in alternation, two passes, median: so the comparison does not depend on when each search ran on this noisy
machine. Prints, per operator: the best time after each round (the search's own measurements), the re-timed best,
each arm / xgb (< 1: that search found the faster program), tuning wall time and what the perfcast model cost
(`perfcast.search.SearchStats`); overall the geometric means.

    python bench/search.py [--model DIR] [--trials 32] [--xgb-trials N] [--arms perfcast,perfcast-online]
                           [--ops NAME,...] [--seeds 0] [--work DIR] [--json]

`--model` (default: the bundled search model) must be a model without assembly features (a search scores ~2,500
candidates per round; a model reading assembly builds each with LLVM first, ~0.7 s per program here): e.g.
`perfcast train --model lgbm --param features=program --param target_scale=work --default-weight 30 --split
by_network --out DIR` (8 min), which is how the bundled search model was made.
Keep the machine quiet: tuning measures real kernels.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def best_per_round(work_dir: str, per_round: int) -> list[float]:
    """Best median run time after each round of `per_round` measured candidates, in the order the search committed
    them (`committed_run_secs`)."""
    import numpy as np

    from perfcast.data.importer import committed_run_secs

    times = []
    for secs in committed_run_secs(work_dir):
        t = float(np.median(secs)) if secs else math.inf
        times.append(t if t < 1e9 else math.inf)  # a failed run is stored as 1e10 s
    out, best = [], math.inf
    for i, t in enumerate(times, 1):
        best = min(best, t)
        if i % per_round == 0 or i == len(times):
            out.append(best)
    return out


def best_script(db, mod) -> str:
    """TVMScript of the database's fastest program of `mod`."""
    import numpy as np
    from tvm.s_tir import Schedule

    recs = [r for r in db.get_all_tuning_records() if r.run_secs]
    r = min(recs, key=lambda r: float(np.median([float(s) for s in r.run_secs])))
    sch = Schedule(mod)
    r.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod.script()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="perfcast model directory without assembly features "
                    "(default: the bundled search model)")
    ap.add_argument("--trials", type=int, default=32, help="measured candidates per search (rounds of 16)")
    ap.add_argument("--xgb-trials", type=int, default=None, help="XGBoost's budget (default: --trials); twice "
                    "--trials gives it about the wall time the perfcast-steered search takes")
    ap.add_argument("--arms", default="perfcast", help="comma-separated perfcast cost models run beside xgb: "
                    "perfcast (fixed), perfcast-online (corrected per task from the search's measurements)")
    ap.add_argument("--ops", default="batch_matmul,depthwise7x7,conv1d,rms_norm")
    ap.add_argument("--seeds", default="0", help="comma-separated search seeds")
    ap.add_argument("--work", default=None, help="keep the databases in this new (or empty) directory")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import numpy as np

    from outside_zoo import operators, stdout_to_stderr, tune
    from perfcast import paths
    from perfcast.collect.calibrate import time_stored
    from perfcast.collect.worker import IsolatedRunner
    from perfcast.devices import get_device
    from perfcast.errors import PerfcastError
    from perfcast.models import load_model
    from perfcast.search import search_cost_model

    arms_names = a.arms.split(",")
    bad = [n for n in arms_names if n not in ("perfcast", "perfcast-online")]
    if bad:
        raise PerfcastError(f"unknown --arms {bad}; known: perfcast, perfcast-online")
    model = load_model(a.model or paths.bundled_search_model_dir())
    if model.needs_asm:
        raise PerfcastError(f"--model {a.model!r} reads assembly features: too slow inside a search (~0.7 s per "
                            "candidate); train one without (see this script's docstring)")
    ops = operators()
    unknown = [o for o in a.ops.split(",") if o not in ops]
    if unknown:
        raise PerfcastError(f"unknown --ops {unknown}; known: {', '.join(ops)}")
    spec = get_device("local")
    if a.work and os.path.isdir(a.work) and os.listdir(a.work):  # meta-schedule would resume from its records
        raise PerfcastError(f"--work {a.work!r} is not empty: give a new directory")
    work = a.work or tempfile.mkdtemp(prefix="perfcast-search-")
    rows = []
    for seed in (int(s) for s in a.seeds.split(",")):
        for op in a.ops.split(","):
            arms = {}
            for name in ("xgb", *arms_names):
                cm = search_cost_model(name, model if name != "xgb" else None)
                t0 = time.perf_counter()
                wd = os.path.join(work, f"{op}-{name}-s{seed}")
                trials = (a.xgb_trials or a.trials) if name == "xgb" else a.trials
                with stdout_to_stderr():  # meta-schedule logs to stdout: keep it for results
                    db = tune(ops[op], wd, trials, cost_model=cm, seed=seed)
                arms[name] = {"tune_s": time.perf_counter() - t0, "best_per_round_s": best_per_round(wd, 16),
                              "script": best_script(db, ops[op]),
                              "stats": cm.stats.summary() if name != "xgb" else None}
            names = list(arms)
            scripts = [arms[n]["script"] for n in names]
            with IsolatedRunner(spec.threads) as run:  # both bests, alternating, two passes
                passes = [time_stored(run, scripts, spec.target_json, order)
                          for order in (range(len(scripts)), reversed(range(len(scripts))))]
            for i, n in enumerate(names):
                arms[n]["retimed_s"] = float(np.median([p[i] for p in passes]))
                del arms[n]["script"]
            rows.append({"op": op, "seed": seed, "trials": a.trials, "xgb_trials": a.xgb_trials or a.trials, **arms,
                         "ratio": {n: arms[n]["retimed_s"] / arms["xgb"]["retimed_s"] for n in arms_names}})
            r = rows[-1]  # progress (on stderr with --json)
            print(f"{op:13s} seed {seed}: " + "; ".join(
                f"{n} best per round " + " ".join(f"{1e6 * t:.1f}" for t in r[n]["best_per_round_s"])
                + f" us, re-timed {1e6 * r[n]['retimed_s']:.1f} us, tuning {r[n]['tune_s']:.0f} s"
                + (f" ({r[n]['stats']['programs_scored']} programs scored in {r[n]['stats']['predict_s']:.0f} s,"
                   f" {r[n]['stats']['online_fits']} online fits; / xgb {r['ratio'][n]:.3f})" if n != "xgb" else "")
                for n in names), file=sys.stderr if a.json else sys.stdout, flush=True)
    out = {"model": a.model or "bundled search model", "trials": a.trials, "xgb_trials": a.xgb_trials or a.trials,
           "rows": rows, "searches": len(rows), "arms": {}}
    for n in arms_names:
        first = [r[n]["best_per_round_s"][0] / r["xgb"]["best_per_round_s"][0] for r in rows]
        out["arms"][n] = {"geomean_ratio_retimed": float(np.exp(np.mean(np.log([r["ratio"][n] for r in rows])))),
                          "geomean_ratio_first_round": float(np.exp(np.mean(np.log(first)))),
                          "better_than_xgb": sum(r["ratio"][n] < 1 for r in rows)}
    if len(arms_names) > 1:  # the arms against each other, on the same re-timing
        for x, y in zip(arms_names, arms_names[1:]):
            rr = [r[y]["retimed_s"] / r[x]["retimed_s"] for r in rows]
            out["arms"][f"{y} / {x}"] = {"geomean_ratio_retimed": float(np.exp(np.mean(np.log(rr)))),
                                          "better": sum(v < 1 for v in rr)}
    if a.json:
        print(json.dumps(out))
        return
    print(f"{a.trials} trials per perfcast arm against {out['xgb_trials']} by XGBoost")
    for n, o in out["arms"].items():
        if "/" in n:
            print(f"{n}: geometric mean {o['geomean_ratio_retimed']:.3f} ({o['better']} of {len(rows)} better)")
        else:
            print(f"geometric mean {n} / xgb: after the first round of 16 {o['geomean_ratio_first_round']:.3f}, "
                  f"final best re-timed {o['geomean_ratio_retimed']:.3f} ({o['better_than_xgb']} of {len(rows)} "
                  f"searches found a faster program with {n})")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
