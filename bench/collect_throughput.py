"""Collection throughput: programs measured per minute for the ResNet-50 3x3 conv task (64 ch, 56x56) on this
machine, through the real collector with isolation on (programs built in parallel worker processes, one per
CPU, and timed one at a time), and, as the in-process baseline in the same run, the same kind of programs built
and timed one after another in this process (what a plain loop over TVM gets). With --mixed-tasks N, also the
collector's rate over the first N tasks of resnet18 (4 programs each: small and large kernels mixed).

    python bench/collect_throughput.py [--programs 60] [--device local] [--mixed-tasks 15]

Prints one line per mode and the ratio. Keep the machine quiet while it runs (the collector pauses if not).
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
    a = ap.parse_args()

    import tvm

    from perfcast._tvm.util import arg_shapes, main_func
    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.collect.measure import MeasureConfig, make_args, time_function
    from perfcast.collect.space import default_program, random_programs, stable_seed
    from perfcast.collect.tasks import extract
    from perfcast.devices import get_device

    spec = get_device(a.device)
    with tempfile.TemporaryDirectory() as out:
        # isolated: the real collector (extraction is outside the timed part: collect() times only measuring)
        res = collect(CollectConfig(networks=("resnet50",), device=a.device, programs_per_task=a.programs,
                                    only_tasks=(TASK,)), out, log=lambda m: None, progress=False)
        iso = 60 * res.measured / res.seconds
        print(f"isolated (collector, {_workers()} build workers): {res.measured} programs in {res.seconds:.1f} s "
              f"= {iso:.0f} programs/min (statuses {dict(res.by_status)}, load pauses {res.pauses})")
    if a.mixed_tasks:
        with tempfile.TemporaryDirectory() as out:
            res = collect(CollectConfig(networks=("resnet18",), device=a.device, programs_per_task=4,
                                        max_tasks=a.mixed_tasks), out, log=lambda m: None, progress=False)
            print(f"mixed tasks (resnet18, first {res.tasks}): {res.measured} programs in {res.seconds:.1f} s = "
                  f"{60 * res.measured / res.seconds:.0f} programs/min (load pauses {res.pauses})")

    # in-process baseline: same task, same kind of programs, same timing rounds, no worker process
    nt = extract("resnet50", spec.target())
    task = next(t for t in nt.tasks if t.task_name == TASK)
    cfg, dev, target = MeasureConfig(), tvm.cpu(0), tvm.target.Target(json.loads(spec.target_json))
    args = make_args(arg_shapes(main_func(task.mod)), dev)
    progs = [default_program(task.mod)]
    for p in random_programs(task.mod, spec.target(), stable_seed(1, task.workload_key)):
        progs.append(p)
        if len(progs) >= a.programs:
            break
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
    base = 60 * n / (time.time() - t0)
    print(f"in-process baseline: {n} programs = {base:.0f} programs/min")
    print(f"programs_per_minute_isolated={iso:.0f} ratio_vs_in_process={iso / base:.2f} (target >= 120/min)")


def _workers() -> int:
    from perfcast.collect.collector import build_workers
    from perfcast.collect.load import own_cpus

    return build_workers(own_cpus())


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
