"""Whole-network latency, predicted vs measured on this machine (batch 1), with TVM default and tuned schedules.

For each network and schedule set: `perfcast.e2e.predict_network(..., measure=True)` — every fused kernel predicted
once by the model (default: bundled), replayed on one CPU unit (CDMPP Algorithm 2; with one unit this is the plain
sum, printed beside as a check), and the whole network compiled and timed in the Relax VM (median of repeats), each
kernel also timed inside the network. With default schedules the layerwise method is printed beside (the layerwise
paper's per-layer-type regressors for conv2d / dense / pooling kernels, the model for the rest; `--layerwise-model`,
default bundled), against the same measurement. `tuned` uses a meta-schedule database per network, `--tuned-dir/NETWORK`,
created with `perfcast.e2e.schedules.tune_network` (`--trials` per network) when missing. `--calibrate` times 40
stored programs of this machine just before each network (`perfcast.collect.calibrate`) and scales the predictions
by today's speed ratio; the uncalibrated error is printed beside. When the bundled in-network context file has a fit
for this machine (`perfcast.e2e.context`, `bench/context.py`), predictions are the kernels' in-network times and the
error of the kernels' isolated predictions alone is printed beside; `--no-context` sums the isolated predictions.
Tuned kernels are predicted as the fastest of their search's candidates (`perfcast.e2e.selection`); the error from
the kept programs' own predictions is printed beside (`kept_error`).
`--compare DIR` (repeatable) predicts the same compiled network with another model (e.g. the bundled one before a
retraining), with the same speed ratio, against the same measurement: the host's speed drifts between runs, so two
models are only comparable this way. `--compare-context FILE` (repeatable) does the same with the same model and
another in-network context file (e.g. a fit candidate written by `bench/context.py --write-fit`).
`--sittings N` (default 1) times every network N times: after the pass above, N - 1 more passes over all cases,
each lowering and timing the network again (without the per-kernel profile), minutes apart. It reports each case's
sittings and their spread (max / min) and the error against their median (`error_median`, also per `--compare`
model). On the 2-core znver4 host the tuned (multi-threaded) networks moved by up to 1.8x between sittings while
the default-schedule ones held within 3 % (docs/measured-figures.md, 2026-11-27 21:58).

    python bench/e2e.py [--networks resnet50,mobilenet_v2,bert_tiny] [--schedules default,tuned]
                        [--tuned-dir runs/e2e-tuned] [--trials 16xTASKS] [--model DIR]
                        [--layerwise-model DIR] [--calibrate] [--no-context] [--compare DIR]
                        [--compare-context FILE] [--sittings N] [--json]

Keep the machine quiet: it measures (and tunes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from perfcast.errors import PerfcastError


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", default="resnet50,mobilenet_v2,bert_tiny")
    ap.add_argument("--schedules", default="default,tuned")
    ap.add_argument("--tuned-dir", default="runs/e2e-tuned")
    ap.add_argument("--trials", type=int, default=0, help="tuning trials per network (default: 16 per task)")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--model", default=None)
    ap.add_argument("--layerwise-model", default=None)
    ap.add_argument("--calibrate", action="store_true", help="scale by today's speed ratio, measured per network")
    ap.add_argument("--no-context", action="store_true", help="sum the kernels' isolated predictions")
    ap.add_argument("--compare", action="append", default=[],
                    help="another model directory, scored on the same measurements (repeatable)")
    ap.add_argument("--compare-context", action="append", default=[],
                    help="another in-network context file, scored with the same model on the same measurements")
    ap.add_argument("--sittings", type=int, default=1,
                    help="time every network this many times, in passes minutes apart (spread; median error)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.sittings < 1:
        raise PerfcastError(f"--sittings {a.sittings}: time each network at least once (e.g. --sittings 3)")

    from perfcast.collect.calibrate import calibrate, schedule_reference_kinds
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.e2e import predict_network
    from perfcast.e2e.context import load_context

    here = device_key(get_device("local"))
    for cf in a.compare_context:  # before any measuring: a file without this machine's fit compares nothing
        if here not in load_context(cf):
            raise PerfcastError(f"--compare-context {cf!r} has no in-network context fit for this machine ({here}); "
                                "write one with `python bench/context.py ... --write-fit FILE`")
    # label -> (model, context) of every other prediction of the same compiled network
    others = {**{cm: (cm, not a.no_context) for cm in a.compare},
              **{f"context:{cf}": (a.model, cf) for cf in a.compare_context}}
    from perfcast.e2e.schedules import tune_network

    out = {}
    for net in a.networks.split(","):
        for sched in a.schedules.split(","):
            spec = sched
            if sched == "tuned":
                db = os.path.join(a.tuned_dir, net)
                if not os.path.exists(os.path.join(db, "database_tuning_record.json")):
                    from perfcast.collect.tasks import extract

                    n_tasks = len(extract(net, get_device("local").target(), a.batch_size).tasks)
                    tune_network(net, db, a.trials or 16 * n_tasks, batch_size=a.batch_size)
                spec = f"tuned:{db}"
            ratio = None
            if a.calibrate:
                cal = calibrate("local", kinds=schedule_reference_kinds(spec))
                ratio = cal.speed_ratio
                if cal.note:
                    print(f"note: {cal.note}", file=sys.stderr)
            r = predict_network(net, a.batch_size, "local", a.model, measure=True, schedules=spec, speed_ratio=ratio,
                                context=not a.no_context)
            plain = sum(k["total_predicted_s"] for k in r["kernels"])
            o = out[f"{net}/{sched}"] = {
                "predicted_s": r["predicted_s"], "plain_sum_s": plain, "measured_s": r["measured_s"],
                "measured_cv": r["measured_cv"], "error": r["error"], "kernels": len(r["kernels"]),
                "scheduled_kernels": r["scheduled_kernels"], "measured_kernels_sum_s": r["measured_kernels_sum_s"],
                "worst_kernel": r["outliers"][0] if r["outliers"] else None, "memory": r["memory"]}
            if r["context"]:  # the in-network context fit was applied (perfcast.e2e.context); without it:
                o["context"] = r["context"]
                o["isolated_error"] = r["isolated_predicted_s"] / r["measured_s"] - 1
            if r.get("selection", {}).get("kernels"):  # tuned: without the selection-aware correction
                o["selection"] = r["selection"]
                o["kept_error"] = r["selection"]["kept_predicted_s"] / r["measured_s"] - 1
            if r.get("interval"):  # the model's prediction interval (perfcast.eval.intervals): does it hold?
                iv = r["interval"]
                o["interval"] = {**iv, "holds": iv["low_s"] <= r["measured_s"] <= iv["high_s"]}
            if ratio is not None:
                o["speed_ratio"] = ratio
                o["uncalibrated_error"] = r["uncalibrated_predicted_s"] / r["measured_s"] - 1
            o["schedules_spec"] = spec
            o["compare"] = {}
            for label, (model, ctx) in others.items():
                c = predict_network(net, a.batch_size, "local", model, schedules=spec, speed_ratio=ratio, context=ctx)
                o["compare"][label] = {"predicted_s": c["predicted_s"], "error": c["predicted_s"] / r["measured_s"] - 1}
            if sched == "default":
                try:
                    lw = predict_network(net, a.batch_size, "local", a.model, schedules=spec, method="layerwise",
                                         layerwise_model=a.layerwise_model, speed_ratio=ratio,
                                         context=not a.no_context)
                except PerfcastError as e:  # e.g. the layerwise model has no data of this CPU: say so, go on
                    o["layerwise_skipped"] = str(e)
                else:
                    o["layerwise"] = {"predicted_s": lw["predicted_s"],
                                      "error": lw["predicted_s"] / r["measured_s"] - 1,
                                      "share": lw["layerwise"]["share"], "kernels": lw["layerwise"]["kernels"]}
            if not a.json:
                print(f"{net:13s} {sched:8s} {o['kernels']:3d} kernels ({o['scheduled_kernels']:3d} scheduled)  "
                      f"predicted {o['predicted_s'] * 1e3:9.2f} ms (plain sum {o['plain_sum_s'] * 1e3:9.2f})  "
                      f"measured {o['measured_s'] * 1e3:9.2f} ms (CV {o['measured_cv']:.1%})  error "
                      f"{o['error']:+.1%}  [kernels timed in the network: {o['measured_kernels_sum_s'] * 1e3:.2f} ms]",
                      flush=True)
                if "interval" in o:
                    iv = o["interval"]
                    print(f"{'':22s} {iv['level']:.0%} interval {iv['low_s'] * 1e3:.2f} – {iv['high_s'] * 1e3:.2f} "
                          f"ms: {'holds' if iv['holds'] else 'misses'} the measurement", flush=True)
                if "isolated_error" in o:
                    print(f"{'':22s} in-network context applied; the kernels' predictions alone sum to an error of "
                          f"{o['isolated_error']:+.1%}", flush=True)
                if "kept_error" in o:
                    print(f"{'':22s} {o['selection']['kernels']} tuned kernels predicted as the fastest of their "
                          f"search's candidates; the kept programs' own predictions: error {o['kept_error']:+.1%}",
                          flush=True)
                if ratio is not None:
                    print(f"{'':22s} speed ratio today {ratio:.3f}; uncalibrated error {o['uncalibrated_error']:+.1%}",
                          flush=True)
                for cm, c in o["compare"].items():
                    print(f"{'':22s} --compare {cm}: predicted {c['predicted_s'] * 1e3:9.2f} ms, error "
                          f"{c['error']:+.1%}", flush=True)
                if "layerwise_skipped" in o:
                    print(f"{'':22s} layerwise: skipped ({o['layerwise_skipped'].split(';')[0]})", flush=True)
                if "layerwise" in o:
                    w = o["layerwise"]
                    print(f"{'':22s} layerwise: predicted {w['predicted_s'] * 1e3:9.2f} ms, error {w['error']:+.1%} "
                          f"({w['kernels']} layer kernels, {w['share']:.0%} of the prediction)", flush=True)
                if o["worst_kernel"]:
                    w = o["worst_kernel"]
                    print(f"{'':22s} most time lost: {w['name']} measured {w['ratio']:.1f}x its prediction "
                          f"({w['excess_s'] * 1e3:.2f} ms per run)", flush=True)
                m = o["memory"]
                print(f"{'':22s} memory: liveness peak {m['peak_bytes'] / 2**20:.1f} MiB, VM allocated "
                      f"{m['measured_bytes'] / 2**20:.1f} MiB; layerwise estimators {m['two_largest_bytes'] / 2**20:.1f}"
                      f" / {m['twice_mean_bytes'] / 2**20:.1f} MiB", flush=True)
    if a.sittings > 1:
        more_sittings(out, a)
    errs = [abs(o["error"]) for o in out.values()]
    lw_errs = [abs(o["layerwise"]["error"]) for o in out.values() if "layerwise" in o]
    if a.json:
        print(json.dumps(out))
    else:
        print(f"mean |error| {sum(errs) / len(errs):.1%} over {len(errs)} network/schedule pairs "
              f"(target: <= 10% each)")
        kept = [abs(o.get("kept_error", o["error"])) for o in out.values()]
        print(f"without the selection-aware correction of tuned kernels: mean |error| {sum(kept) / len(kept):.1%}")
        held = [o["interval"]["holds"] for o in out.values() if "interval" in o]
        if held:
            print(f"the model's interval held {sum(held)} of {len(held)} measured networks")
        if a.calibrate:
            un = [abs(o["uncalibrated_error"]) for o in out.values()]
            print(f"uncalibrated: mean |error| {sum(un) / len(un):.1%}")
        for cm in others:
            ce = [abs(o["compare"][cm]["error"]) for o in out.values()]
            print(f"--compare {cm}: mean |error| {sum(ce) / len(ce):.1%}")
        if lw_errs:
            print(f"layerwise method: mean |error| {sum(lw_errs) / len(lw_errs):.1%} over {len(lw_errs)} networks "
                  "(default schedules)")
        if a.sittings > 1:
            print(f"against the median of {a.sittings} sittings:")
            for case, o in out.items():
                ms = ", ".join(f"{x * 1e3:.2f}" for x in o["measured_sittings_s"])
                cmp = "".join(f"; {cm}: {c['error_median']:+.1%}" for cm, c in o["compare"].items())
                print(f"  {case:22s} sittings {ms} ms (max / min {o['sittings_spread']:.2f})  error "
                      f"{o['error_median']:+.1%}{cmp}")
            med = [abs(o["error_median"]) for o in out.values()]
            print(f"  mean |error| {sum(med) / len(med):.1%}")


def more_sittings(out: dict, a) -> None:
    """Time every case's network `a.sittings - 1` more times, one pass over all cases per sitting; per case add
    the sittings' measured seconds, their spread (max / min) and the errors against their median."""
    from perfcast.devices import get_device
    from perfcast.e2e.predict import lower_network, measure_network

    spec = get_device("local")
    for o in out.values():
        o["measured_sittings_s"] = [o["measured_s"]]
    for _ in range(a.sittings - 1):
        for case, o in out.items():
            net = case.split("/")[0]
            low = lower_network(net, a.batch_size, spec, o["schedules_spec"])
            o["measured_sittings_s"].append(
                measure_network(net, a.batch_size, spec, kernels=False, fused=low.applied)["measured_s"])
    for o in out.values():
        t = o["measured_sittings_s"]
        o["sittings_spread"] = max(t) / min(t)
        med = statistics.median(t)
        o["error_median"] = o["predicted_s"] / med - 1
        for c in o["compare"].values():
            c["error_median"] = c["predicted_s"] / med - 1


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
