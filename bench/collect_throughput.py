"""Collection throughput: programs measured per minute for the ResNet-50 3x3 conv task (64 ch, 56x56) on this
machine, through the real collector with isolation on (programs built in parallel worker processes, one per
CPU, and timed one at a time), and, as the in-process baseline in the same run, the same kind of programs built
and timed one after another in this process (what a plain loop over TVM gets). With --mixed-tasks N, also the
collector's rate over the first N tasks of resnet18 (4 programs each: small and large kernels mixed).

    python bench/collect_throughput.py [--programs 60] [--device local] [--mixed-tasks 15] [--runs 3]

Prints one line per run and mode, then the medians and their ratio. The runs alternate the two modes: a shared
host's speed drifts over minutes (single runs of the same code gave 109 to 140 programs/min on the znver4 host on
2026-11-28). Keep the machine quiet while it runs (the collector pauses if not).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

TASK = "conv2d3"  # ResNet-50 layer1 3x3 conv: input (1,64,56,56), weight (64,64,3,3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=60)
    ap.add_argument("--device", default="local")
    ap.add_argument("--mixed-tasks", type=int, default=15, help="0 skips the mixed-task run")
    ap.add_argument("--runs", type=int, default=3,
                    help="isolated and in-process runs, alternated; the figures are their medians (default 3)")
    a = ap.parse_args()
    if a.runs < 1 or a.programs < 2:
        from perfcast.errors import PerfcastError

        raise PerfcastError(f"--runs {a.runs} --programs {a.programs}: need at least 1 run of 2 programs, e.g. "
                            "--runs 3 --programs 60")

    import statistics

    import tvm

    from perfcast._tvm.util import arg_shapes, main_func
    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.collect.measure import MeasureConfig, make_args, time_function
    from perfcast.collect.space import default_program, random_programs, stable_seed
    from perfcast.collect.tasks import extract
    from perfcast.devices import get_device

    spec = get_device(a.device)
    # the in-process baseline's programs: same task, same kind of programs, same timing rounds, no worker process
    nt = extract("resnet50", spec.target())
    task = next(t for t in nt.tasks if t.task_name == TASK)
    cfg, dev, target = MeasureConfig(), tvm.cpu(0), tvm.target.Target(json.loads(spec.target_json))
    args = make_args(arg_shapes(main_func(task.mod)), dev)
    progs = [default_program(task.mod)]
    for p in random_programs(task.mod, spec.target(), stable_seed(1, task.workload_key)):
        progs.append(p)
        if len(progs) >= a.programs:
            break

    def isolated() -> float:  # the real collector (extraction is outside the timed part: collect() times measuring)
        with tempfile.TemporaryDirectory() as out:
            res = collect(CollectConfig(networks=("resnet50",), device=a.device, programs_per_task=a.programs,
                                        only_tasks=(TASK,)), out, log=lambda m: None, progress=False)
        rate = 60 * res.measured / res.seconds
        print(f"isolated (collector, {_workers()} build workers): {res.measured} programs in {res.seconds:.1f} s "
              f"= {rate:.0f} programs/min (statuses {dict(res.by_status)}, load pauses {res.pauses})", flush=True)
        return rate

    def in_process() -> float:
        t0, n = time.time(), 0
        for p in progs:
            try:
                lib = tvm.build(p.mod, target=target)
                f = lib["main"]
                for _ in range(cfg.rounds):  # the collector's timing rounds, back to back
                    time_function(lambda k, r: lib.time_evaluator("main", dev, number=k, repeat=r)(*args).results,
                                  lambda: f(*args), cfg)
            except Exception:  # noqa: BLE001 - a failing program still costs its time
                pass
            n += 1
        rate = 60 * n / (time.time() - t0)
        print(f"in-process baseline: {n} programs = {rate:.0f} programs/min", flush=True)
        return rate

    iso, base = [], []
    for _ in range(a.runs):  # alternated, so that a slow spell of the host weighs on both
        iso.append(isolated())
        base.append(in_process())
    if a.mixed_tasks:
        with tempfile.TemporaryDirectory() as out:
            res = collect(CollectConfig(networks=("resnet18",), device=a.device, programs_per_task=4,
                                        max_tasks=a.mixed_tasks), out, log=lambda m: None, progress=False)
            print(f"mixed tasks (resnet18, first {res.tasks}): {res.measured} programs in {res.seconds:.1f} s = "
                  f"{60 * res.measured / res.seconds:.0f} programs/min (load pauses {res.pauses})")
    m_iso, m_base = statistics.median(iso), statistics.median(base)
    print(f"programs_per_minute_isolated={m_iso:.0f} ratio_vs_in_process={m_iso / m_base:.2f} "
          f"(medians of {a.runs} runs; target >= 120/min)")


def _workers() -> int:
    from perfcast.collect.collector import build_workers
    from perfcast.collect.load import own_cpus

    return build_workers(own_cpus())


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
