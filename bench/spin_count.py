"""Does the collector's worker setting TVM_THREAD_POOL_SPIN_COUNT=30000 (instead of TVM's 300000) change measured
latencies? The same programs (per task of resnet50's first 12: the default kernel and 3 random schedules) are timed
in an isolated worker with each setting, twice, alternating; prints the run-to-run noise of each setting and the
difference between the settings (median |relative difference| and mean signed difference of the medians).

    python bench/spin_count.py [--tasks 12] [--spin 30000]

Keep the machine quiet: it measures.
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--spin", type=int, default=30_000)
    a = ap.parse_args()

    import numpy as np
    import tvm

    from perfcast.collect.measure import MeasureConfig
    from perfcast.collect.space import default_program, random_programs
    from perfcast.collect.tasks import extract
    from perfcast.collect.worker import IsolatedRunner
    from perfcast.devices import get_device

    spec = get_device("local")
    progs = []
    for t in extract("resnet50", spec.target()).tasks[: a.tasks]:
        progs.append(tvm.ir.save_json(default_program(t.mod).mod))
        for _, p in zip(range(3), random_programs(t.mod, spec.target(), 3)):
            progs.append(tvm.ir.save_json(p.mod))
    lat = {None: [], a.spin: []}
    for _ in range(2):
        for sc in lat:
            with IsolatedRunner(spec.threads, MeasureConfig(spin_count=sc)) as r:
                lat[sc].append([o.get("latency_s", np.nan) for o in (r.run(p, spec.target_json) for p in progs)])
    d, s = np.array(lat[None]), np.array(lat[a.spin])

    def diff(x, y):
        rel = x / y - 1
        return f"median |diff| {100 * np.nanmedian(np.abs(rel)):.2f} %, mean {100 * np.nanmean(rel):+.2f} %"

    print(f"{len(progs)} programs")
    print(f"noise, TVM default spin (run 1 vs 2): {diff(d[0], d[1])}")
    print(f"noise, spin {a.spin} (run 1 vs 2):     {diff(s[0], s[1])}")
    print(f"spin {a.spin} vs default (mean of 2 runs): {diff(s.mean(0), d.mean(0))}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
