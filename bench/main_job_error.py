"""Why is the main job's prediction off on this host today? Its error split into the factors that make it.

`perfcast predict NET --device local --calibrate --measure` multiplies three things: the model's prediction of each
kernel alone (as the records' labels were timed), the speed ratio `perfcast calibrate` measures on 40 stored
programs of other tasks (how much slower this host runs today than when it was labelled), and the device's
in-network context fit (how much slower a kernel runs inside the network than alone, `perfcast.e2e.context`). This
bench measures each factor's true value for the network itself at one sitting: it calibrates as the main job does,
times every kernel of the network alone now and inside the compiled network (`measure_context`: the in-network
times add up to the network's own measured time), and reads the kernels' stored labels of this device (TVM's
default kernels; a network whose tasks the device's records lack gets no label factor). Time-weighted (calls x
time, summed over the kernels with a label):

- model / labels: the model against the labels it learned or, for a held-out network, was tested on;
- speed ratio: `calibrate`'s against the network's own (its kernels alone now / their labels);
- context: the fit's in-network / isolated on the calibrated predictions against today's in-network / alone;
- the product of the three against predicted / measured for all kernels (they differ by the kernels without a
  label and by how the fit's byte term falls on each).

It measures (about 1.5 min a network): keep the machine quiet.

    python bench/main_job_error.py [--networks resnet18] [--device local] [--also default/time] [--json]
"""

from __future__ import annotations

import argparse
import json


def decompose(network: str, device: str = "local", also: tuple = ()) -> dict:
    import numpy as np

    from perfcast.collect.calibrate import calibrate
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.e2e.context import measure_context
    from perfcast.e2e.predict import predict_network
    from perfcast.paths import bundled_dataset_dir

    cal = calibrate(device)
    others = {f"{'+'.join(kinds)}/{draw}": calibrate(device, kinds=kinds, draw=draw) for kinds, draw in also}
    samples = measure_context(network, device=device)
    pred = predict_network(network, device=device, speed_ratio=cal.speed_ratio)
    key = device_key(get_device(device))
    df = records_frame(Dataset(bundled_dataset_dir()), device=key)
    labels = df[df["schedule_kind"] == "default"].groupby("workload_key")["latency_s"].min()
    kern = {k["workload_key"]: k for k in pred["kernels"]}
    rows = []
    for s in samples:
        k = kern.get(s.workload_key)
        if k is None:
            continue
        iso = k.get("isolated_predicted_s", k["predicted_s"])  # calibrated, alone
        rows.append((s.calls, labels.get(s.workload_key, np.nan), iso / cal.speed_ratio, iso, k["predicted_s"],
                     s.isolated_s, s.in_network_s))
    a = np.array(rows, float)  # calls, label, model alone, calibrated alone, calibrated in-network, alone now, in-net
    c = a[:, 0:1]
    tot = (c * a[:, 1:]).sum(0)
    lab = np.isfinite(a[:, 1])
    lt = (c[lab] * a[lab, 1:]).sum(0)
    out = {"network": network, "device_key": key, "kernels": len(a), "kernels_with_label": int(lab.sum()),
           "speed_ratio": cal.speed_ratio, "speed_ratio_p25": cal.ratio_p25, "speed_ratio_p75": cal.ratio_p75,
           "predicted_s": tot[3], "measured_s": tot[5], "error": tot[3] / tot[5] - 1,
           "uncalibrated_error": pred["uncalibrated_predicted_s"] / tot[5] - 1,
           "context_fit": pred.get("context")}
    if lab.any():
        own = lt[4] / lt[0]
        out.update(labels_s=lt[0], model_over_labels=lt[1] / lt[0], own_speed_ratio=own,
                   speed_ratio_over_own=cal.speed_ratio / own,
                   fit_context=lt[3] / lt[2], today_context=lt[5] / lt[4],
                   context_over_today=(lt[3] / lt[2]) / (lt[5] / lt[4]))
        out["product"] = out["model_over_labels"] * out["speed_ratio_over_own"] * out["context_over_today"]
        out["labelled_predicted_over_measured"] = lt[3] / lt[5]
        out["other_calibrations"] = {k: {"speed_ratio": c.speed_ratio, "over_own": c.speed_ratio / own,
                                         "measure_s": c.measure_s, "programs": c.programs} for k, c in others.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", default="resnet18", help="comma-separated zoo networks (TVM default kernels)")
    ap.add_argument("--device", default="local", help="a device of this machine (`perfcast devices`)")
    ap.add_argument("--also", action="append", default=[], metavar="KINDS/DRAW",
                    help="also calibrate with these references (e.g. default/time: `calibrate(kinds=, draw=)`) and "
                         "compare their ratio with the network's own (repeatable)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    also = tuple((tuple(x.split("/")[0].split("+")), x.split("/")[1]) for x in a.also)
    res = []
    for net in a.networks.split(","):
        r = decompose(net, a.device, also)
        res.append(r)
        if a.json:
            continue
        print(f"{net}: predicted {r['predicted_s'] * 1e3:,.1f} ms vs measured {r['measured_s'] * 1e3:,.1f} ms "
              f"(sum of its kernels in the network): {r['error']:+.1%} calibrated, {r['uncalibrated_error']:+.1%} "
              f"uncalibrated; speed ratio {r['speed_ratio']:.3f} (quartiles {r['speed_ratio_p25']:.3f}-"
              f"{r['speed_ratio_p75']:.3f})")
        if "product" not in r:
            print(f"  no stored default-kernel label of {r['device_key']} for its kernels: no split")
            continue
        print(f"  {r['kernels_with_label']} of {r['kernels']} kernels have a label ({r['labels_s'] * 1e3:,.1f} ms):"
              f" model / labels {r['model_over_labels']:.3f}; speed ratio {r['speed_ratio']:.3f} against the "
              f"network's own {r['own_speed_ratio']:.3f} ({r['speed_ratio_over_own']:.3f}); context fit "
              f"{r['fit_context']:.3f} against today's {r['today_context']:.3f} ({r['context_over_today']:.3f}); "
              f"product {r['product']:.3f} = predicted / measured on those kernels "
              f"{r['labelled_predicted_over_measured']:.3f}")
        for k, c in r["other_calibrations"].items():
            print(f"  references {k}: speed ratio {c['speed_ratio']:.3f} against the network's own "
                  f"{r['own_speed_ratio']:.3f} ({c['over_own']:.3f}; {c['programs']} programs, {c['measure_s']:.0f} s)")
    if a.json:
        print(json.dumps(res, default=float))


if __name__ == "__main__":
    main()
