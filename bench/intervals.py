"""Prediction intervals (`perfcast.eval.intervals`): fitted on a model's validation programs, checked on its test ones.

The model (default: the bundled one) predicts its own split's validation and test programs; the split-conformal
bounds per program region are fitted on the validation programs (or read from the model with `--stored`), and the
share of test programs whose measurement falls inside is printed per region and per held-out network beside the
nominal level, with the interval's width (high / low). On a `by_network` split the test programs are unseen
networks' tasks: the coverage that matters to a user predicting a new network. `--save` stores the fitted table in
the model's model.json, where `perfcast predict` reads it. No measuring: the records are the measurements.

    python bench/intervals.py [--model DIR] [--levels 0.5,0.8,0.9] [--save] [--stored] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--levels", default="0.5,0.8,0.9", help="comma-separated nominal levels to check")
    ap.add_argument("--save", action="store_true",
                    help="store the table of perfcast.eval.intervals.INTERVAL_LEVEL in the model's model.json")
    ap.add_argument("--stored", action="store_true", help="check the model's stored table instead of refitting")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast import paths
    from perfcast.errors import PerfcastError
    from perfcast.eval.intervals import (INTERVAL_LEVEL, check_level, fit_intervals, inside, interval_factors,
                                         model_intervals, program_regions, save_intervals)
    from perfcast.eval.workflow import own_split

    levels = [check_level(x) for x in a.levels.split(",")]
    m, ds, df, X, name, sp = own_split(a.model)
    y = df["latency_s"].to_numpy()
    parts = {}
    for part in ("val", "test"):
        idx = getattr(sp, part)
        if len(idx) == 0:
            raise PerfcastError(f"the model's {name} split has no {part} programs; intervals need both")
        Xt = X.take(idx)
        parts[part] = (y[idx], m.predict(Xt), program_regions(Xt), df.iloc[idx])
    yv, pv, gv, _ = parts["val"]
    yt, pt, gt, rows = parts["test"]
    nets = sp.params.get("test_networks") or []
    out = {"model": str(a.model or paths.bundled_model_dir()), "split": name, "val": len(yv), "test": len(yt),
           "levels": {}}
    stored = model_intervals(m)
    if a.stored and stored is None:
        raise PerfcastError("the model stores no interval table; run without --stored (or with --save)")
    for lv in ([stored["level"]] if a.stored else levels):
        table = stored if a.stored else fit_intervals(yv, pv, gv, lv)
        if table is None:
            raise PerfcastError(f"{len(yv)} validation programs are too few for an interval")
        lo, hi = interval_factors(table, gt)
        held = inside(table, gt, yt, pt)
        entry = {"table": table, "coverage": float(held.mean()), "median_width": float(np.median(hi / lo)),
                 "regions": {}, "networks": {}}
        for r in np.unique(gt):
            sel = gt == r
            entry["regions"][str(int(r))] = {"n": int(sel.sum()), "coverage": float(held[sel].mean()),
                                             "low": float(lo[sel][0]), "high": float(hi[sel][0])}
        for net in nets:
            sel = rows["networks"].map(lambda ns, net=net: net in ns).to_numpy()
            if sel.any():
                entry["networks"][net] = {"n": int(sel.sum()), "coverage": float(held[sel].mean())}
        out["levels"][f"{table['level']:g}"] = entry
        if a.save and abs(lv - INTERVAL_LEVEL) < 1e-12 and not a.stored:
            save_intervals(a.model or paths.bundled_model_dir(), {**table, "fitted_on": "validation"})
            out["saved_to"] = str(a.model or paths.bundled_model_dir())
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['model']}: {name} split, intervals fitted on {len(yv)} validation programs, checked on {len(yt)} "
          "test programs")
    names = {"0": "no parallel, no vector loop", "1": "vector loop only", "2": "parallel loop only",
             "3": "parallel and vector loops"}
    for lv, e in out["levels"].items():
        print(f"level {lv}: coverage {e['coverage']:.3f} (nominal {float(lv):.2f}), "
              f"median width x{e['median_width']:.2f}")
        for r, s in e["regions"].items():
            print(f"  region {r} ({names.get(r, r)}): {s['n']} programs, [{s['low']:.3f}, {s['high']:.3f}] x "
                  f"predicted, coverage {s['coverage']:.3f}")
        for net, s in e["networks"].items():
            print(f"  {net}: {s['n']} programs, coverage {s['coverage']:.3f}")
    if "saved_to" in out:
        print(f"saved the level-{INTERVAL_LEVEL:g} table to {out['saved_to']}")


if __name__ == "__main__":
    main()
