"""In-network context: how much slower a network's kernels run inside it than alone, and how well a context fit on
training networks carries over to held-out ones (`perfcast.e2e.context`).

For every network and schedule set (TVM's default kernels, and `tuned` where `--*-tuned-dir/NETWORK` holds a
meta-schedule database), every distinct kernel is timed alone (the collector's isolated runner, protocol 2) and
inside the compiled network (the VM's per-kernel profile), at the same sitting (`measure_context`). The context
is fitted on the training networks only, then, per held-out network, with the kernels' *measured* alone times
(so the kernel model's own error is out of the picture):
- alone: the sum of calls x alone time, against the sum of calls x in-network time (what a whole-network prediction
  from perfect isolated predictions misses);
- context: the fit applied to the alone times;
- one factor: the alone sum times the training networks' overall in-network / alone ratio (a one-number baseline).

    python bench/context.py [--train resnet18,mobilenet_v3_small,bert_mini] [--train-tuned-dir DIR]
                            [--test resnet50,mobilenet_v2,bert_tiny] [--test-tuned-dir DIR]
                            [--samples FILE] [--write-fit FILE] [--score-fit FILE] [--json]

`--score-fit FILE` (repeatable) also scores this machine's fit from an existing context file (e.g. the bundled one,
`perfcast/e2e/bundled/context.json`) on the same measurements, one more column each. `--samples FILE` reuses (or,
when FILE does not exist, writes) the measurements; `--write-fit FILE` saves the training fit (what `perfcast
predict --context FILE` applies; the bundled one is `perfcast/e2e/bundled/context.json`).
Keep the machine quiet: it measures (about a minute per network and schedule set).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def runs(nets: str, tuned_dir: str | None) -> list[tuple[str, str]]:
    out = []
    for n in [x for x in nets.split(",") if x]:
        out.append((n, "default"))
        if tuned_dir and os.path.exists(os.path.join(tuned_dir, n, "database_tuning_record.json")):
            out.append((n, f"tuned:{os.path.join(tuned_dir, n)}"))
    return out


def totals(samples) -> tuple[float, float]:
    return (sum(s.calls * s.isolated_s for s in samples), sum(s.calls * s.in_network_s for s in samples))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", default="resnet18,mobilenet_v3_small,bert_mini")
    ap.add_argument("--train-tuned-dir", default=None)
    ap.add_argument("--test", default="resnet50,mobilenet_v2,bert_tiny")
    ap.add_argument("--test-tuned-dir", default=None)
    ap.add_argument("--samples", default=None, help="measurements file to reuse, or to write when missing")
    ap.add_argument("--write-fit", default=None, help="save the training networks' fit to this context file")
    ap.add_argument("--score-fit", action="append", default=[],
                    help="a context file whose fit for this machine is scored beside (repeatable)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.e2e.context import (fit_context, load_context, measure_context, network_errors, run_name,
                                      samples_from_json, samples_to_json, save_context)
    from perfcast.errors import PerfcastError

    key = device_key(get_device("local"))
    scored = {}
    for f in a.score_fit:
        fits = load_context(f)
        if key not in fits:
            raise PerfcastError(f"context file {f!r} has no fit for this machine ({key}; its fits: "
                                f"{', '.join(fits) or 'none'}); write one with `--write-fit FILE`")
        scored[f] = fits[key]

    train, test = runs(a.train, a.train_tuned_dir), runs(a.test, a.test_tuned_dir)
    if a.samples and Path(a.samples).exists():
        got = samples_from_json(json.loads(Path(a.samples).read_text()))
    else:
        got = []
        for net, sch in train + test:
            got += measure_context(net, sch)
            if not a.json:
                al, nw = totals([s for s in got if (s.network, s.schedules) == (net, sch)])
                print(f"measured {net} {sch}: alone {al * 1e3:.3f} ms, in the network {nw * 1e3:.3f} ms", flush=True)
        if a.samples:
            Path(a.samples).write_text(json.dumps(samples_to_json(got), indent=1))
    by_run = {}
    for s in got:
        by_run.setdefault((s.network, s.schedules), []).append(s)
    tr = [s for r in train for s in by_run.get(r, [])]
    fit = fit_context(tr, key)
    al, nw = totals(tr)
    factor = nw / al
    if a.write_fit:
        save_context(fit, a.write_fit)
    out = {"fit": fit.to_json(), "train_factor": factor, "scored_fits": {f: v.to_json() for f, v in scored.items()},
           "runs": {}}
    errors = network_errors(fit, got)  # run name -> error of the network's total, per fit
    scored_errors = {f: network_errors(v, got) for f, v in scored.items()}
    for run in train + test:
        ss = by_run.get(run)
        if not ss:
            continue
        al, nw = totals(ss)
        name = run_name(ss[0])
        out["runs"][name] = {
            "part": "train" if run in train else "test", "kernels": len(ss), "alone_s": al, "in_network_s": nw,
            "alone_error": al / nw - 1, "context_error": errors[name], "one_factor_error": al * factor / nw - 1,
            "scored_fit_errors": {f: e[name] for f, e in scored_errors.items()}}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"fit on {fit.kernels} kernels of {', '.join(fit.networks)}: in-network = {fit.describe()} (networks' "
          f"totals within {fit.fit_error:.1%} on average); one factor {factor:.3f}")
    for j, (f, v) in enumerate(scored.items()):
        print(f"scored fit {j + 1}: {f}: in-network = {v.describe()} (fitted on {', '.join(v.networks)})")
    print(f"{'network/schedules':28s} {'part':5s} {'kernels':>7s} {'alone ms':>10s} {'in-net ms':>10s} "
          f"{'alone err':>9s} {'context':>8s} {'1 factor':>8s}" + "".join(f" {f'fit {j + 1}':>8s}"
                                                                      for j in range(len(scored))))
    for k, r in out["runs"].items():
        print(f"{k:28s} {r['part']:5s} {r['kernels']:7d} {r['alone_s'] * 1e3:10.3f} {r['in_network_s'] * 1e3:10.3f} "
              f"{r['alone_error']:+9.1%} {r['context_error']:+8.1%} {r['one_factor_error']:+8.1%}"
              + "".join(f" {e:+8.1%}" for e in r["scored_fit_errors"].values()))
    test = [r for r in out["runs"].values() if r["part"] == "test"]
    if test:
        line = f"held-out mean |error|: alone {sum(abs(r['alone_error']) for r in test) / len(test):.1%}, context "
        line += f"{sum(abs(r['context_error']) for r in test) / len(test):.1%}"
        for j, f in enumerate(scored):
            line += f", fit {j + 1} {sum(abs(r['scored_fit_errors'][f]) for r in test) / len(test):.1%}"
        print(line + f" ({len(test)} runs)")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
