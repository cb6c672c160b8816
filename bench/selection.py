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
The sigma that minimises the mean |log ratio| over the `--train` networks (`perfcast.e2e.selection.fit_sigma`) is
printed; `--test` networks are scored with it, with the model's stored one and with `SELECTION_SIGMA`. `--save`
stores the fitted sigma in the model (its model.json), where `perfcast predict` reads it. No measuring: the samples
are the measurements.

    python bench/selection.py --samples FILE [--train resnet18,bert_mini] [--test resnet50,mobilenet_v2,bert_tiny]
                              [--sigmas 0,0.05,0.1,0.15,0.2,0.25,0.3,0.4] [--model DIR] [--save] [--json]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from perfcast.e2e.selection import SIGMA_GRID  # numpy only


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", required=True, help="context samples JSON (perfcast context --samples-out)")
    ap.add_argument("--train", default="resnet18,bert_mini", help="networks that fit sigma (training networks)")
    ap.add_argument("--test", default="resnet50,mobilenet_v2,bert_tiny", help="networks scored with it ('' none)")
    ap.add_argument("--sigmas", default=",".join(f"{x:g}" for x in SIGMA_GRID))
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--device", default="local")
    ap.add_argument("--save", action="store_true", help="store the fitted sigma in the model's model.json")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast import paths
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.e2e.selection import SELECTION_SIGMA, fit_sigma, model_sigma, save_sigma, tuned_ratios
    from perfcast.models import load_model

    model, spec = load_model(a.model), get_device(a.device)
    stored = model_sigma(model)
    sigmas = sorted({float(x) for x in a.sigmas.split(",")} | {SELECTION_SIGMA, stored})
    rows = json.load(open(a.samples))
    train, test = [n for n in a.train.split(",") if n], [n for n in a.test.split(",") if n]
    best, out = fit_sigma(rows, train, model, spec, sigmas)
    out.update(tuned_ratios(rows, test, model, spec, sigmas))
    summary = {"fitted_sigma": best, "stored_sigma": stored, "default_sigma": SELECTION_SIGMA}
    for part, nets in (("train", train), ("test", test)):
        for key in ("kept", best, stored, SELECTION_SIGMA):
            if nets:
                summary[f"{part}_mean_abs_log_{key}"] = float(np.mean([abs(math.log(out[n][key])) for n in nets]))
    if a.save:
        save_sigma(a.model or paths.bundled_model_dir(), best, train, device_key(spec))
        summary["saved_to"] = str(a.model or paths.bundled_model_dir())
    if a.json:
        print(json.dumps({"networks": {n: {str(k): v for k, v in r.items()} for n, r in out.items()},
                          "summary": summary}, indent=1))
        return
    print("time-weighted predicted / measured of each network's kernels alone (1.00 = unbiased)")
    print(f"{'network':20s} {'part':5s} tuned  kept  " + " ".join(f"s={sg:<5g}" for sg in sigmas))
    for net, r in out.items():
        print(f"{net:20s} {'train' if net in train else 'test':5s} {r['tuned_kernels']:2d}/{r['kernels']:<3d} "
              f"{r['kept']:5.2f} " + " ".join(f"{r[sg]:7.3f}" for sg in sigmas))
    print(f"sigma fitted on the train networks: {best:g} (the model's stored sigma {stored:g}, perfcast's default "
          f"{SELECTION_SIGMA:g})" + (f"; saved to {summary['saved_to']}" if a.save else ""))
    for part, nets in (("train", train), ("test", test)):
        if nets:
            print(f"{part}: mean |log ratio| kept {summary[f'{part}_mean_abs_log_kept']:.3f}, "
                  + ", ".join(f"sigma {k:g} {summary[f'{part}_mean_abs_log_{k}']:.3f}"
                              for k in dict.fromkeys((best, stored, SELECTION_SIGMA))))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
