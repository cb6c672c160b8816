from __future__ import annotations

import json
from typing import List, Optional

import typer

HELP = ("Measure real tensor programs of networks on a device: per task, TVM's default kernel plus N random "
        "meta-schedule programs, each built and timed in an isolated worker. Resumable: rerun the same command "
        "after an interruption and it continues where it stopped. Timing waits while other processes load the "
        "CPU, and re-times a round while the host itself runs slow (a fixed kernel timed around every round; "
        "check a host first with `python bench/host_contention.py`).")
EXAMPLE = "Example: perfcast collect --network resnet18 --network model.onnx --device local --programs-per-task 20 --out runs/r18"


def collect(
    network: List[str] = typer.Option(..., "--network", "-n", help="zoo name, FILE.onnx or file.py:factory (repeatable)"),
    device: str = typer.Option("local", help="device id, e.g. local or local:mcpu=haswell,threads=1 (see `perfcast devices`)"),
    programs_per_task: int = typer.Option(100, help="programs per task (the default kernel counts as one)"),
    out: str = typer.Option(..., help="dataset directory (created if missing; reused to resume)"),
    batch_size: int = typer.Option(1, help="batch size of the networks"),
    input_shape: Optional[str] = typer.Option(None, help="shapes of dynamic ONNX inputs, NAME:1x3x224x224;NAME2:1x128"),
    seed: int = typer.Option(0, help="seed of the random schedules"),
    max_tasks: Optional[int] = typer.Option(None, help="only the first N tasks (quick runs)"),
    task: List[str] = typer.Option([], "--task", help="only tasks whose name contains this (or workload key); repeatable"),
    no_load_check: bool = typer.Option(False, "--no-load-check", help="measure even when other processes load the CPU"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..collect.collector import CollectConfig, collect as run

    cfg = CollectConfig(networks=tuple(network), device=device, programs_per_task=programs_per_task,
                        batch_size=batch_size, seed=seed, input_shape=input_shape, check_load=not no_load_check,
                        max_tasks=max_tasks, only_tasks=tuple(task))
    res = run(cfg, out, progress=not json_out, log=(lambda m: None) if json_out else print)
    summary = {"out": res.out, "measured": res.measured, "by_status": dict(res.by_status), "tasks": res.tasks,
               "skipped_existing": res.skipped_existing, "recovered": res.recovered,
               "seconds": round(res.seconds, 1), "programs_per_minute": round(60 * res.measured / max(res.seconds, 1e-9), 1),
               "load_pauses": res.pauses, "worker_restarts": res.worker_restarts, "host_gate": res.host_gate}
    if json_out:
        print(json.dumps(summary))
    else:
        st = ", ".join(f"{k} {v}" for k, v in sorted(res.by_status.items())) or "nothing new"
        print(f"measured {res.measured} programs of {res.tasks} tasks in {res.seconds:.0f} s ({st}); "
              f"{res.skipped_existing} already recorded; dataset: {res.out}")
        if res.host_gate.get("retimed"):
            from ..collect.sentinel import summary

            print(f"the host ran slow meanwhile (other tenants of its cores): {summary(res.host_gate)}")


CALIBRATE_HELP = ("Measure how fast this machine is today compared with when its records were measured: rebuild "
                  "and time PROGRAMS stored programs of the device now (the collector's timing protocol) and print "
                  "the median ratio now / stored (> 1: slower today). `perfcast predict --calibrate` multiplies its "
                  "predictions by it (against default-kernel references for --schedules default, the kind it "
                  "predicts). Keep the machine quiet while it runs (about 0.5 s per program).")
CALIBRATE_EXAMPLE = ("Example: perfcast calibrate --device local --programs 40 --json; the ratio `perfcast predict "
                     "--calibrate` applies to TVM's default kernels: perfcast calibrate --kinds default")


def calibrate(
    device: str = typer.Option("local", help="a device of this machine: local or local:mcpu=NAME,threads=N"),
    data: Optional[str] = typer.Option(None, help="dataset with the device's records (default: bundled)"),
    programs: int = typer.Option(40, help="reference programs to time"),
    seed: int = typer.Option(0, help="which references are drawn"),
    kinds: str = typer.Option("default,random", help="schedule kinds of the references, comma-separated: default "
                                                     "(TVM's default kernels), random (random schedules)"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..collect.calibrate import REFERENCE_KINDS
    from ..collect.calibrate import calibrate as run

    chosen = tuple(k.strip() for k in kinds.split(",") if k.strip())
    c = run(device, data, programs, seed, kinds=None if set(chosen) == set(REFERENCE_KINDS) else chosen)
    if json_out:
        print(json.dumps(c.to_dict()))
        return
    from rich.console import Console

    Console().print(f"{c.device_key}: speed ratio [bold]{c.speed_ratio:.3f}[/] (now / stored, median of "
                    f"{c.programs} programs; quartiles {c.ratio_p25:.3f}-{c.ratio_p75:.3f}) in {c.measure_s:.0f} s"
                    + (f"; {c.failed} failed" if c.failed else ""))
    if c.note:
        Console().print(f"note: {c.note}")
