"""Whole-network latency, predicted vs measured on this machine (TVM default schedules, batch 1).

For each network: `perfcast.e2e.predict_network(..., measure=True)` — every fused kernel predicted once by the model
(default: bundled), replayed on one CPU unit (CDMPP Algorithm 2; with one unit this is the plain sum, printed beside
as a check), and the whole network compiled with `tvm.compile` and timed in the Relax VM (median of repeats).

    python bench/e2e.py [--networks resnet50,mobilenet_v2,bert_tiny] [--model DIR] [--json]

Keep the machine quiet: it measures.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", default="resnet50,mobilenet_v2,bert_tiny")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--model", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.e2e import predict_network

    out = {}
    for net in a.networks.split(","):
        r = predict_network(net, a.batch_size, "local", a.model, measure=True)
        plain = sum(k["total_predicted_s"] for k in r["kernels"])
        out[net] = {"predicted_s": r["predicted_s"], "plain_sum_s": plain, "measured_s": r["measured_s"],
                    "measured_cv": r["measured_cv"], "error": r["error"], "kernels": len(r["kernels"]),
                    "measured_kernels_sum_s": r["measured_kernels_sum_s"],
                    "worst_kernel": r["outliers"][0] if r["outliers"] else None}
        if not a.json:
            o = out[net]
            print(f"{net:14s} {o['kernels']:3d} kernels  predicted {o['predicted_s'] * 1e3:9.2f} ms (plain sum "
                  f"{o['plain_sum_s'] * 1e3:9.2f})  measured {o['measured_s'] * 1e3:9.2f} ms (CV "
                  f"{o['measured_cv']:.1%})  error {o['error']:+.1%}  [kernels timed in the network sum to "
                  f"{o['measured_kernels_sum_s'] * 1e3:.2f} ms]", flush=True)
            if o["worst_kernel"]:
                w = o["worst_kernel"]
                print(f"{'':14s} most time lost: {w['name']} measured {w['ratio']:.1f}x its prediction "
                      f"({w['excess_s'] * 1e3:.2f} ms per run)", flush=True)
    errs = [abs(o["error"]) for o in out.values()]
    if not a.json:
        print(f"mean |error| {sum(errs) / len(errs):.1%} over {len(errs)} networks (target: <= 10% each)")
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
