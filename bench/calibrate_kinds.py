"""Which stored programs make a good speed reference on a device whose labels predate measurement protocol 2?

`perfcast calibrate` times stored programs now and takes the median of now / stored. For a device with only
protocol-1 labels it uses TVM's default kernels (`perfcast.collect.calibrate`): the protocol-1 worker could time a
parallel random schedule on a core its own pool thread shared, and on znver4 those labels were 22 % off the same
programs' protocol-2 ones while the default kernels' agreed (1.008). This bench calibrates the device against each
kind of reference in turn, with several seeds (different programs), alternating kinds, and prints the ratios and
their quartiles: when the kinds disagree by more than their seeds do, the choice of reference matters. It measures:
run it alone on the machine (~1 min per calibration).

    python bench/calibrate_kinds.py [--device local] [--programs 40] [--seeds 2] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="local", help="a device of this machine (`perfcast devices`)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--programs", type=int, default=40, help="reference programs per calibration")
    ap.add_argument("--seeds", type=int, default=2, help="calibrations per kind, each on other programs")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.collect.calibrate import REFERENCE_KINDS, calibrate

    runs: dict[str, list[dict]] = {k: [] for k in REFERENCE_KINDS}
    for seed in range(a.seeds):
        for kind in REFERENCE_KINDS:  # alternated, so a drift during the bench touches both kinds alike
            c = calibrate(a.device, data=a.data, programs=a.programs, seed=seed, kinds=(kind,))
            runs[kind].append(c.to_dict())
            if not a.json:
                print(f"{kind:8s} seed {seed}: ratio {c.speed_ratio:.3f} (quartiles {c.ratio_p25:.3f}-"
                      f"{c.ratio_p75:.3f}), {c.programs} programs of protocol >= {c.reference_protocol}, "
                      f"{c.measure_s:.0f} s", flush=True)
    summary = {k: {"median_ratio": float(np.median([r["speed_ratio"] for r in v])),
                   "seed_spread": float(np.ptp([r["speed_ratio"] for r in v]))} for k, v in runs.items()}
    if a.json:
        print(json.dumps({"device": a.device, "programs": a.programs, "runs": runs, "summary": summary}, indent=1))
        return
    for k, s in summary.items():
        print(f"{k:8s} median over seeds {s['median_ratio']:.3f}, seeds span {s['seed_spread']:.3f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
