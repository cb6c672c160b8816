"""Does learning from a search's own measurements help the perfcast cost model? Replayed on meta-schedule databases,
without measuring anything.

Each database's records are taken in the order the search committed them (its record file). After the first `n`
measured programs, `perfcast.search.OnlineCorrection` (what `--cost-model perfcast-online` fits inside a search) is
fitted on them, and the programs the search measured later are scored three ways: the fixed model (`prior`), the
model times the correction (`online`), and a model of the same kind trained on those `n` programs alone (`scratch`,
what a cost model that starts untrained, like TVM's XGBoost, knows by then). Prints per `n`: Kendall tau between
predicted and measured time of the later programs (mean over databases), their MAPE, and the regret: the measured
time of the program each ranks first among them over the fastest of them (geometric mean; 1 = it picks the best).

The later programs were chosen by whichever cost model steered that search, so this replays what a correction
would have known, not the search it would have steered (`bench/search.py` runs real searches).

    python bench/search_replay.py DB_DIR... [--model DIR] [--n 16,32] [--device local] [--json]

DB_DIR: meta-schedule JSON databases of one task each, e.g. the directories `bench/search.py --work W` and
`bench/outside_zoo.py --work W` leave (W/*). `--model` (default: the bundled search model).
"""

from __future__ import annotations

import argparse
import json
import time


def committed_records(db_dir: str) -> list:
    """The database's measured records in the order the search committed them (`committed_run_secs`), matched to
    `database_records` by their run times. A bad directory is a one-line error from `database_records`."""
    from perfcast.data.importer import committed_run_secs, database_records

    key = lambda secs: tuple(round(float(s), 12) for s in secs)  # noqa: E731
    by_secs = {key(r.run_secs): r for r in database_records(db_dir) if r.measured}
    return [by_secs[key(secs)] for secs in committed_run_secs(db_dir) if key(secs) in by_secs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dbs", nargs="+", help="meta-schedule database directories")
    ap.add_argument("--model", default=None, help="perfcast model directory (default: the bundled search model)")
    ap.add_argument("--n", default="16,32", help="comma-separated numbers of measured programs to learn from")
    ap.add_argument("--device", default="local", help="device the databases were measured on")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import lightgbm as lgb
    import numpy as np
    from scipy.stats import kendalltau

    from perfcast import paths
    from perfcast.errors import PerfcastError
    from perfcast.features.cache import features_of_programs
    from perfcast.models import load_model
    from perfcast.models.gbdt import program_matrix
    from perfcast.search.cost_model import ONLINE_PARAMS, OnlineCorrection, signed_log1p

    model = load_model(a.model or paths.bundled_search_model_dir())
    ns = [int(v) for v in a.n.split(",")]
    scores: dict = {}
    fit_s = []
    for db in a.dbs:
        rows = committed_records(db)
        y = np.array([r.measured_s for r in rows])
        X = features_of_programs([r.program() for r in rows], a.device, asm=model.needs_asm)
        prior, A = np.asarray(model.predict(X), np.float64), program_matrix(X)
        for n in ns:
            if len(y) - n < 8:  # too few later programs to rank
                continue
            corr = OnlineCorrection(min_measured=n)
            t0 = time.perf_counter()
            corr.add("task", A[:n], prior[:n], y[:n])
            fit_s.append(time.perf_counter() - t0)
            scratch = lgb.LGBMRegressor(**ONLINE_PARAMS, random_state=0).fit(signed_log1p(A[:n]), np.log(y[:n]))
            later = y[n:]
            preds = {"prior": prior[n:], "online": prior[n:] * corr.factor("task", A[n:]),
                     "scratch": np.exp(scratch.predict(signed_log1p(A[n:])))}
            for k, p in preds.items():
                d = scores.setdefault(n, {}).setdefault(k, {"tau": [], "mape": [], "regret": []})
                d["tau"].append(float(kendalltau(p, later).statistic))
                d["mape"].append(float(np.mean(np.abs(p / later - 1))))
                d["regret"].append(float(later[np.argmin(p)] / later.min()))
    out = {str(n): {k: {"databases": len(d["tau"]), "kendall_tau": float(np.nanmean(d["tau"])),
                        "mape": float(np.mean(d["mape"])),
                        "regret_geomean": float(np.exp(np.mean(np.log(d["regret"]))))}
                    for k, d in by.items()} for n, by in scores.items()}
    if not out:
        raise PerfcastError(f"no database has {min(ns)} + 8 measured programs; give larger ones or a smaller --n")
    # one correction fit, as inside a search (the first also imports LightGBM, so the median)
    out["correction_fit_s"] = {"median": float(np.median(fit_s)), "max": float(np.max(fit_s)), "fits": len(fit_s)}
    if a.json:
        print(json.dumps(out))
        return
    f = out.pop("correction_fit_s")
    for n, by in out.items():
        for k, o in by.items():
            print(f"after {n:>3} measured: {k:8s} {o['databases']:3d} databases  Kendall tau {o['kendall_tau']:.3f}  "
                  f"MAPE {o['mape']:.1%}  regret {o['regret_geomean']:.3f}")
    print(f"a correction fit: median {f['median']:.3f} s, max {f['max']:.3f} s over {f['fits']} fits")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
