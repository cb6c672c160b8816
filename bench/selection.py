"""The winner's curse of tuned kernels, and the selection-aware correction (`perfcast.e2e.selection`), against
kernels measured alone.

For every network whose tuned kernels were timed alone with the collector's isolated runner (a context samples
file: `perfcast context NET@tuned:DB ... --samples-out FILE`, or `bench/context.py --samples FILE`), each tuned
kernel is predicted
- as the program the search kept (`kept`: the model's prediction of the program that runs), and
- as the fastest of the candidates the search measured, for each sigma (`perfcast predict --selection-sigma`),
and compared with its measured isolated time, weighted by calls and time: sum(calls x predicted) / sum(calls x
measured) over the network's kernels (the kernels the database did not tune count with their plain prediction in
both). 1.00 is unbiased; a whole-network prediction inherits this ratio before the in-network context.
The sigma that minimises the mean |log ratio| over the `--train` networks is printed; `--test` networks are scored
with it and with `SELECTION_SIGMA`. No measuring: the samples are the measurements.

    python bench/selection.py --samples FILE [--train resnet18,bert_mini] [--test resnet50,mobilenet_v2,bert_tiny]
                              [--sigmas 0,0.1,0.15,0.2,0.25,0.3,0.4] [--model DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np


def network_ratios(net: str, samples: list, model, spec, sigmas: list[float]) -> dict:
    """{"kept": ratio, sigma: ratio, ..., "kernels", "tuned_kernels"} of one network's tuned samples."""
    from perfcast.e2e.predict import lower_network
    from perfcast.e2e.selection import candidate_predictions, fastest_of
    from perfcast.features.cache import features_of_programs

    sched = samples[0]["schedules"]
    low = lower_network(net, 1, spec, sched)
    keys = [s["workload_key"] for s in samples]
    kept = model.predict(features_of_programs([low.programs[k] for k in keys], spec, asm=model.needs_asm))
    per_cand = candidate_predictions(keys, sched.partition(":")[2], spec, model)
    calls = np.array([s["calls"] for s in samples], float)
    meas = (calls * np.array([s["isolated_s"] for s in samples])).sum()
    out = {"kernels": len(keys), "tuned_kernels": len(per_cand), "kept": float((calls * kept).sum() / meas)}
    for sg in sigmas:
        p = [fastest_of(per_cand[k], sg) if k in per_cand else kept[i] for i, k in enumerate(keys)]
        out[sg] = float((calls * np.array(p)).sum() / meas)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", required=True, help="context samples JSON (perfcast context --samples-out)")
    ap.add_argument("--train", default="resnet18,bert_mini", help="networks that fit sigma (training networks)")
    ap.add_argument("--test", default="resnet50,mobilenet_v2,bert_tiny", help="networks scored with it")
    ap.add_argument("--sigmas", default="0,0.1,0.15,0.2,0.25,0.3,0.4")
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--device", default="local")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.devices import get_device
    from perfcast.e2e.selection import SELECTION_SIGMA
    from perfcast.models import load_model

    sigmas = sorted({float(x) for x in a.sigmas.split(",")} | {SELECTION_SIGMA})
    model, spec = load_model(a.model), get_device(a.device)
    rows = json.load(open(a.samples))
    train, test = [n for n in a.train.split(",") if n], [n for n in a.test.split(",") if n]
    out = {}
    for net in train + test:
        mine = [s for s in rows if s["network"] == net and s["schedules"].startswith("tuned:")]
        if not mine:
            raise SystemExit(f"{a.samples!r} has no tuned kernels of {net!r}; measure them with `perfcast context "
                             f"{net}@tuned:DB --out FILE --samples-out {a.samples}`")
        out[net] = network_ratios(net, mine, model, spec, sigmas)
    score = {sg: float(np.mean([abs(math.log(out[n][sg])) for n in train])) for sg in sigmas}
    best = min(sigmas, key=lambda sg: score[sg])
    summary = {"fitted_sigma": best, "default_sigma": SELECTION_SIGMA}
    for part, nets in (("train", train), ("test", test)):
        for key in ("kept", best, SELECTION_SIGMA):
            summary[f"{part}_mean_abs_log_{key}"] = float(np.mean([abs(math.log(out[n][key])) for n in nets]))
    if a.json:
        print(json.dumps({"networks": {n: {str(k): v for k, v in r.items()} for n, r in out.items()},
                          "summary": summary}, indent=1))
        return
    print("time-weighted predicted / measured of each network's kernels alone (1.00 = unbiased)")
    print(f"{'network':20s} {'part':5s} tuned  kept  " + " ".join(f"s={sg:<5g}" for sg in sigmas))
    for net, r in out.items():
        print(f"{net:20s} {'train' if net in train else 'test':5s} {r['tuned_kernels']:2d}/{r['kernels']:<3d} "
              f"{r['kept']:5.2f} " + " ".join(f"{r[sg]:7.3f}" for sg in sigmas))
    print(f"sigma fitted on the train networks: {best:g} (mean |log ratio| {score[best]:.3f}; "
          f"perfcast's default {SELECTION_SIGMA:g})")
    for part in ("train", "test"):
        print(f"{part}: mean |log ratio| kept {summary[f'{part}_mean_abs_log_kept']:.3f}, sigma {best:g} "
              f"{summary[f'{part}_mean_abs_log_{best}']:.3f}, sigma {SELECTION_SIGMA:g} "
              f"{summary[f'{part}_mean_abs_log_{SELECTION_SIGMA}']:.3f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
