"""`perfcast collect`: turn networks into tasks, sample programs, measure them in isolation, store records.

Order of work: in passes (10, 30, 60, then N programs per task) so that an interrupted collection still covers every
task. Each task's first program is TVM's default kernel. Every record goes to an fsync'd journal before the next
program starts; a rerun after a kill recovers the journal and skips every program already recorded, so nothing
measured is lost and nothing is recorded twice.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import platform
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Callable

from .. import __version__
from ..data.schema import MeasureRecord
from ..data.store import Dataset
from ..devices import DeviceSpec, get_device
from ..devices.base import device_key, device_key_of_json
from ..errors import PerfcastError
from .base import Runner
from .load import LoadMonitor, own_cpus
from .measure import MeasureConfig
from .space import default_program, random_programs, stable_seed
from .tasks import Task, extract, network_label, network_rows, task_from_record, task_record

PASSES = (10, 30, 60)
FLUSH_EVERY = 500
MAX_BUILDERS = 8  # worker processes (~0.4 GB each) building programs in parallel


@dataclass(frozen=True)
class CollectConfig:
    networks: tuple[str, ...]
    device: str = "local"
    programs_per_task: int = 100
    batch_size: int = 1
    seed: int = 0
    input_shape: str | None = None
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    check_load: bool = True
    max_tasks: int | None = None  # only the first N tasks (by network order) - for quick runs and tests
    only_tasks: tuple[str, ...] = ()  # only tasks whose workload key equals, or whose name contains, one of these


@dataclass
class CollectResult:
    out: str
    measured: int = 0
    by_status: Counter = field(default_factory=Counter)
    skipped_existing: int = 0
    recovered: int = 0
    tasks: int = 0
    seconds: float = 0.0
    pauses: int = 0
    worker_restarts: int = 0
    host_gate: dict = field(default_factory=dict)  # `HostGate.stats()` of a local runner: rounds the host slowed


def record_id(workload_key: str, device_id: str, program_hash: str, protocol: int = 1) -> str:
    """The dedup key of one program on one device (device key) under one measurement protocol (a re-measurement
    under a newer protocol is a new record; readers keep the newest: `perfcast.data.frame.latest_protocol`)."""
    suffix = f"|p{protocol}" if protocol >= 2 else ""  # protocols 0 and 1: the ids records always had
    return hashlib.sha1(f"{workload_key}|{device_id}|{program_hash}{suffix}".encode()).hexdigest()[:24]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _load_tasks(ds: Dataset, cfg: CollectConfig, target, log) -> tuple[dict[str, Task], dict[str, list[str]]]:
    """Tasks of every requested network, reusing the dataset's task table when the network was extracted before."""
    net_tbl = ds.read("networks").to_pylist()
    task_tbl = {r["workload_key"]: r for r in ds.read("tasks").to_pylist()}
    tasks: dict[str, Task] = {}
    nets_of: dict[str, list[str]] = defaultdict(list)
    for net in cfg.networks:
        label = network_label(net)
        rows = [r for r in net_tbl if r["network"] == label and r["batch_size"] == cfg.batch_size]
        if rows and all(r["workload_key"] in task_tbl for r in rows):
            items = [task_from_record(task_tbl[r["workload_key"]], r["weight"]) for r in rows]
        else:  # (the stored task rows stay: a network later in the list may share tasks with this one)
            t0 = time.time()
            nt = extract(net, target, cfg.batch_size, cfg.input_shape)
            ds.add_tasks([task_record(t) for t in nt.tasks])
            ds.add_network_tasks(network_rows(nt))
            items = list(nt.tasks)
            log(f"{label}: {len(items)} tasks extracted in {time.time() - t0:.1f} s")
        for t in items:
            if t.workload_key in tasks:
                old = tasks[t.workload_key]
                tasks[t.workload_key] = Task(old.workload_key, old.task_name, old.mod, old.weight + t.weight)
            else:
                tasks[t.workload_key] = t
            nets_of[t.workload_key].append(label)
    if cfg.only_tasks:
        tasks = {k: t for k, t in tasks.items()
                 if any(sel == k or sel in t.task_name for sel in cfg.only_tasks)}
        if not tasks:
            raise PerfcastError(f"no task matches --task {', '.join(cfg.only_tasks)}; see the task names with "
                                "`perfcast data summary` or drop --task")
    if cfg.max_tasks is not None:
        keep = list(tasks)[: cfg.max_tasks]
        tasks = {k: tasks[k] for k in keep}
    return tasks, nets_of


def _make_runner(spec: DeviceSpec, mcfg: MeasureConfig, cpus: frozenset[int] | None) -> Runner:
    if spec.rpc_key:
        from .rpc import RPCRunner

        return RPCRunner(spec, mcfg)
    from .worker import IsolatedRunner

    return IsolatedRunner(spec.threads, mcfg, workers=build_workers(cpus))


def build_workers(cpus: frozenset[int] | None) -> int:
    """One worker per CPU this process may use: building is single-threaded, timing is never concurrent."""
    usable = len(cpus) if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(usable, MAX_BUILDERS))


def collect(cfg: CollectConfig, out: str, log: Callable[[str], None] = print, progress: bool = True) \
        -> CollectResult:
    import tvm

    if cfg.programs_per_task < 1:
        raise PerfcastError(f"--programs-per-task {cfg.programs_per_task} makes no sense; use N >= 1")
    if not cfg.networks:
        raise PerfcastError("no network given; pass --network NAME|FILE.onnx|file.py:factory "
                            "(see `perfcast collect --help`)")
    spec = get_device(cfg.device)
    cpus = own_cpus()
    if not spec.rpc_key and cpus is not None and spec.threads > len(cpus):
        raise PerfcastError(f"device {spec.device_id} runs {spec.threads} threads but this process may use only "
                            f"CPUs {sorted(cpus)}; widen the affinity (taskset) or use local:threads={len(cpus)}")
    target = spec.target()
    ds = Dataset(out, create=True)
    res = CollectResult(out=str(out))
    res.recovered = ds.recover()
    if res.recovered:
        log(f"recovered {res.recovered} records from an interrupted run")
    tasks, nets_of = _load_tasks(ds, cfg, target, log)
    res.tasks = len(tasks)
    runner = _make_runner(spec, cfg.measure, cpus)  # before anything is written: an unreachable tracker fails here

    # a program is measured once per device *and machine*: `local` on another CPU is another device (device_key)
    dkey = device_key(spec)
    # ... and under a protocol at least as good as this runner's (older measurements are measured again)
    protocol = runner.protocol
    existing = ds.read("records", ["workload_key", "program_hash", "device_spec_json", "protocol"]).to_pydict()
    keys = {j: device_key_of_json(j) for j in set(existing["device_spec_json"])}
    have = {(k, h) for k, h, j, p in zip(existing["workload_key"], existing["program_hash"],
                                         existing["device_spec_json"], existing["protocol"])
            if keys[j] == dkey and p >= protocol}
    count = Counter(k for k, _ in have)
    n = cfg.programs_per_task
    todo = sum(max(0, n - count[k]) for k in tasks)
    info = {"started": _now(), "config": {**asdict(cfg), "measure": asdict(cfg.measure)},
            "device": json.loads(spec.to_json()), "host": platform.node(), "python": platform.python_version(),
            "tvm_version": tvm.__version__, "perfcast_version": __version__, "tasks": len(tasks)}
    if not spec.rpc_key:  # measured here: keep the exact CPU with the data
        from ..devices.local import probe

        info["cpu_probe"] = {k: v for k, v in probe().items() if k != "flags"} | {"flags": " ".join(probe()["flags"])}
    info_path = ds.write_collection_info({**info, "status": "running"})
    monitor = LoadMonitor(enabled=cfg.check_load)

    def quiet(measure_all: Callable[[], list[dict]]) -> list[dict]:
        """Time a batch of built programs; when other processes loaded the CPU meanwhile, wait for quiet and time
        them again."""
        while True:
            monitor.mark()
            rs = measure_all()
            if not any(r["status"] == "ok" for r in rs) or not monitor.was_loaded():
                return rs
            res.pauses += 1
            monitor.wait_until_quiet(lambda m: bar.console.print(f"[yellow]warning:[/] {m}"))

    _stop_on_sigterm()
    journal = ds.journal()
    spec_json, target_json = spec.to_json(), spec.target_json
    tvm_version = tvm.__version__

    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[rate]:.0f}/min"), TimeElapsedColumn(), TextColumn("ETA"),
                   TimeRemainingColumn(), disable=not progress, transient=False,
                   console=Console(stderr=True))  # its warnings too: stdout is for results (`--json`)
    completed = False
    t_start = time.time()
    try:
        runner.start()
        t_start = time.time()  # measuring time only (task extraction and starting the workers are set-up)
        if hasattr(runner, "host"):  # say once why timing waits (the host gate, `perfcast.collect.sentinel`)
            runner.on_host_slow = lambda m: bar.console.print(f"[yellow]warning:[/] {m}")
        with bar:
            bar_task = bar.add_task("collecting", total=todo, rate=0.0)
            exhausted: set[str] = set()
            streams: dict = {}
            passes = sorted({min(p, n) for p in PASSES} | {n})
            for goal in passes:
                for key, task in tasks.items():
                    need = goal - count[key]
                    if need <= 0 or key in exhausted:
                        continue
                    bar.update(bar_task, description=f"{task.task_name[:40]:40s}")
                    # one program stream per task for the whole run: later passes continue it
                    if key not in streams:
                        streams[key] = _programs(task, target, cfg.seed)
                    programs = streams[key]
                    while need > 0:
                        # up to `slots` new programs of this task: built in parallel, timed one by one
                        batch = []
                        for prog in programs:
                            if (key, prog.program_hash) in have:
                                res.skipped_existing += 1
                                continue
                            batch.append(prog)
                            if len(batch) >= min(need, runner.slots):
                                break
                        if not batch:
                            break
                        results = runner.run_batch([tvm.ir.save_json(p.mod) for p in batch], target_json, quiet)
                        for prog, r in zip(batch, results):
                            rec = _record(record_id(key, dkey, prog.program_hash, protocol), key, task, prog, spec,
                                          spec_json, target_json, nets_of[key], r, tvm_version)
                            journal.append(rec)
                            have.add((key, prog.program_hash))
                            count[key] += 1
                            need -= 1
                            res.measured += 1
                            res.by_status[rec.status] += 1
                        el = max(time.time() - t_start, 1e-9)
                        bar.update(bar_task, advance=len(batch), rate=60.0 * res.measured / el)
                        if len(journal.pending) >= FLUSH_EVERY:
                            journal.flush_to_parquet()
                    # the task's space is exhausted short of the goal: no later pass will find more
                    if need > 0:
                        exhausted.add(key)
                        bar.update(bar_task, total=bar.tasks[0].total - (n - count[key]))
        completed = True
    finally:
        journal.close()
        runner.close()
        res.seconds = time.time() - t_start
        res.worker_restarts = getattr(runner, "restarts", 0)
        res.host_gate = runner.host.stats() if hasattr(runner, "host") else {}
        info.update(status="finished" if completed else "interrupted", finished=_now(), measured=res.measured,
                    by_status=dict(res.by_status), seconds=round(res.seconds, 1), load_pauses=res.pauses,
                    worker_restarts=res.worker_restarts, host_gate=res.host_gate)
        ds.write_collection_info(info, info_path)
    return res


class Stopped(KeyboardInterrupt):
    """SIGTERM: stop like Ctrl-C, so the journal is flushed and the run's info is written."""


def _stop_on_sigterm() -> None:
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            raise Stopped()

        signal.signal(signal.SIGTERM, handler)


def _programs(task: Task, target, seed: int):
    yield default_program(task.mod)
    yield from random_programs(task.mod, target, stable_seed(seed, task.workload_key))


def _record(rid, key, task, prog, spec, spec_json, target_json, networks, r, tvm_version) -> MeasureRecord:
    ok = r["status"] == "ok"
    nan = math.nan
    return MeasureRecord(
        record_id=rid, workload_key=key, task_name=task.task_name, program_hash=prog.program_hash,
        schedule_kind=prog.schedule_kind, trace_json=prog.trace_json, tir_script=prog.mod.script(),
        device_id=spec.device_id, device_spec_json=spec_json, target_json=target_json,
        task_weight=int(task.weight), networks=tuple(sorted(set(networks))), status=r["status"],
        error=r.get("error", ""), latencies_s=tuple(r.get("latencies_s", ())) if ok else (),
        latency_s=r["latency_s"] if ok else nan, latency_min_s=r["latency_min_s"] if ok else nan,
        latency_max_s=r["latency_max_s"] if ok else nan, latency_cv=r["latency_cv"] if ok else nan,
        number=int(r.get("number", 0)), remeasured=bool(r.get("remeasured", False)),
        build_s=float(r.get("build_s", nan)), measure_s=float(r.get("measure_s", nan)),
        tvm_version=tvm_version, perfcast_version=__version__, timestamp=_now(),
        protocol=int(r.get("protocol", 1)), round_latencies_s=tuple(r.get("round_latencies_s", ())) if ok else (),
        round_sentinel_cpu_s=tuple(float(x[0]) for x in r.get("round_sentinel_s", ())) if ok else (),
        round_sentinel_cache_s=tuple(float(x[1]) for x in r.get("round_sentinel_s", ())) if ok else (),
    )
