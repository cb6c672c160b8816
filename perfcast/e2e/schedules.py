"""Which schedule each kernel of a network runs with: `default`, `tuned:DB` or `random:SEED`.

- `default`: TVM's default CPU pipeline kernel, the fused PrimFunc unscheduled (what `tvm.compile` runs).
- `tuned:DB`: the best record of a meta-schedule JSON database (`database_workload.json` +
  `database_tuning_record.json`, e.g. from `ms.tune_tir` / `ms.relax_integration.tune_relax` on the fused
  module); kernels the database lacks keep the default kernel (`compile_relax` would give those DLight schedules,
  which perfcast has no records of; `untuned_kernels` says how many).
- `random:SEED`: one random schedule per task from meta-schedule's design space (the data engine's sampler).

`apply_schedules(fused, target, spec)` returns the fused module with every scheduled kernel substituted (same
names, same calls), so the program that is predicted is exactly the program that is compiled and measured.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..errors import PerfcastError


def parse_schedules(spec: str) -> tuple[str, str | None]:
    """("default", None) | ("tuned", DB_DIR) | ("random", SEED)."""
    kind, _, arg = spec.partition(":")
    if kind == "default" and not arg:
        return "default", None
    if kind == "tuned" and arg:
        p = Path(arg)
        if not (p / "database_tuning_record.json").exists() or not (p / "database_workload.json").exists():
            raise PerfcastError(f"--schedules tuned:{arg}: {arg!r} is not a meta-schedule JSON database (needs "
                                "database_workload.json and database_tuning_record.json); tune with TVM "
                                "meta-schedule first")
        return "tuned", str(p)
    if kind == "random" and arg.isdigit():
        return "random", arg
    raise PerfcastError(f"--schedules {spec!r} is not one of default, tuned:DB_DIR, random:SEED "
                        "(e.g. --schedules random:0)")


def apply_schedules(fused, target, spec: str, allow_untuned: bool = False) -> tuple[object, dict]:
    """(module with scheduled kernels substituted, {"schedules", "scheduled_kernels", "untuned_kernels"}).
    A tuned database with no record of any kernel is an error, unless `allow_untuned` (`perfcast sweep`: a database
    tuned at batch 1 has none of batch 4's kernels, which then keep TVM's defaults)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from .._tvm.util import load_x86_intrinsics, main_func, normalize_primfunc, structural_key

    kind, arg = parse_schedules(spec)
    if kind == "default":
        return fused, {"schedules": "default", "scheduled_kernels": 0, "untuned_kernels": 0}
    load_x86_intrinsics()
    tasks = ms.relax_integration.extract_tasks(fused, target)
    by_key: dict = {}  # task key -> scheduled PrimFunc
    db = ms.database.JSONDatabase(work_dir=arg) if kind == "tuned" else None
    for t in tasks:
        task_mod = t.dispatched[0] if t.dispatched else t.mod
        key = structural_key(normalize_primfunc(main_func(task_mod)))
        if key in by_key:
            continue
        if kind == "tuned":
            best = db.query_ir_module(task_mod, target, t.task_name)
            if best is not None:
                by_key[key] = main_func(best)
        else:
            from ..collect.space import random_programs, stable_seed

            program = next(iter(random_programs(task_mod, target, stable_seed(arg, key))), None)
            if program is not None:
                by_key[key] = main_func(program.mod)
    funcs, n = {}, 0
    for gv, f in fused.functions_items():
        s = by_key.get(structural_key(f)) if isinstance(f, tvm.tirx.PrimFunc) else None
        if s is not None:
            if "global_symbol" in (s.attrs or {}):  # tuned/sampled programs are named "main"; the kernel is private
                s = s.without_attr("global_symbol")
            for k, v in (f.attrs or {}).items():
                s = s.with_attr(k, v)
            n += 1
        funcs[gv] = f if s is None else s
    out = tvm.IRModule(funcs, attrs=fused.attrs)
    untuned = sum(isinstance(f, tvm.tirx.PrimFunc) for f in funcs.values()) - n
    info = {"schedules": spec, "scheduled_kernels": n, "untuned_kernels": untuned}
    if kind == "tuned" and n == 0 and not allow_untuned:
        raise PerfcastError(f"--schedules {spec}: the database has no record of any kernel of this network "
                            "(was it tuned for this network, batch size and target?)")
    return out, info


@contextlib.contextmanager
def isolated_builder(timeout_s: float = 60.0):
    """`with isolated_builder() as builder:` a meta-schedule builder that builds each candidate in a long-lived child
    process (`perfcast.collect.worker`) with a timeout: a candidate whose LLVM build hangs or crashes (an inception_v3
    avg-pool candidate built for over 6 minutes) becomes a failed build result and the worker is restarted, instead
    of stopping the search.
    The stock LocalBuilder isolates too but starts new workers per batch, each re-importing every backend's tensor
    intrinsics (seconds each on this machine); this one starts one worker and keeps it until the block ends."""
    import json
    import os
    import tempfile

    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    from .._tvm.util import load_x86_intrinsics, plain
    from ..collect.measure import MeasureConfig
    from ..collect.worker import _Worker

    load_x86_intrinsics()  # the search applies tensorizing schedule rules in this process
    worker = _Worker(1, MeasureConfig(build_timeout_s=timeout_s))

    @derived_object
    class IsolatedBuilder(PyBuilder):
        def build(self, build_inputs):
            out = []
            for inp in build_inputs:
                path = os.path.join(tempfile.mkdtemp(prefix="perfcast-build-"), "lib.so")
                try:
                    res = worker.export(tvm.ir.save_json(inp.mod), json.dumps(plain(inp.target.export())), path)
                except Exception as e:  # noqa: BLE001 - e.g. a module that does not serialize
                    res = {"status": "build_error", "error": str(e)}
                ok = res["status"] == "ok"
                out.append(BuilderResult(path if ok else None, None if ok else f"{res['status']}: {res['error']}"))
            return out

    try:
        yield IsolatedBuilder()
    finally:
        worker.close()


def pinned_run_evaluator(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """meta-schedule's `run_evaluator_common` with the launching thread kept off the core of TVM's pool thread while
    it times (`perfcast.collect.affinity`: otherwise a candidate is now and then timed 2x slow, and the search and
    its database's run_secs see that noise). A LocalRunner's `f_run_evaluator`."""
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    from ..collect.affinity import LauncherPin

    with LauncherPin() as pin:
        if repeated_args:
            rt_mod[rt_mod.entry_name](*repeated_args[0])  # creates TVM's thread pool, then pin
        pin.apply()
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)


TUNING_EVALUATOR = dict(number=3, repeat=5, min_repeat_ms=20)  # meta-schedule's EvaluatorConfig of our searches


def tuning_runner():
    """The meta-schedule LocalRunner perfcast's searches measure with (`perfcast tune`, `bench/outside_zoo.py`):
    `TUNING_EVALUATOR`, the launching thread pinned (`pinned_run_evaluator`). Its run_secs are what a tuning
    database records: on znver5 (2026-12-05) it read 40 calibration references 1.05-1.17x slower than the
    collector in the same sitting (README, Two timers)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(**TUNING_EVALUATOR),
                                 f_run_evaluator=pinned_run_evaluator)


def tune_network(network: str, db_dir, trials: int, device: str = "local", batch_size: int = 1,
                 input_shape: str | None = None, seed: int = 0, cost_model="xgb") -> str:
    """Tune every task of `network` with TVM meta-schedule (evolutionary search, real measurements here) into a
    JSON database usable as `--schedules tuned:DB_DIR`. Returns the directory. `cost_model` steers the search:
    meta-schedule's `xgb` (default) or `random`, or a cost model object (`perfcast.search.perfcast_cost_model`)."""
    import os

    from ..collect.tasks import to_relax
    from ..devices import get_device, require_local

    spec = get_device(device)
    require_local(spec, "tuning")
    if trials < 1:
        raise PerfcastError(f"trials {trials} must be at least 1")
    Path(db_dir).mkdir(parents=True, exist_ok=True)
    with tuning_lock(db_dir):
        os.environ["TVM_NUM_THREADS"] = str(spec.threads)
        _, _, mod = to_relax(network, batch_size, input_shape)
        _tune(mod, spec, db_dir, trials, tuning_runner(), seed, cost_model)
    return str(db_dir)


LOCK_NAME = ".perfcast-tune.lock"


@contextlib.contextmanager
def tuning_lock(db_dir):
    """Hold an exclusive lock on `db_dir` while tuning: two tuners appending to one JSON database interleave their
    records (a killed `perfcast tune` can leave its search running in a child). The OS drops the lock when the
    holder exits, however it exits."""
    import fcntl

    f = open(Path(db_dir) / LOCK_NAME, "a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PerfcastError(f"another tuner is writing the database {str(db_dir)!r}; wait for it to finish (or "
                                f"stop it) or tune into another --out directory") from None
        yield
    finally:
        f.close()


def drop_unnamed_ms_log_handlers() -> None:
    """Call before a meta-schedule search: its logger setup lists the names of the handlers already on its logger
    and fails on an unnamed one ('NoneType' has no attribute 'format'), which an earlier tuning run in the same
    process can leave behind."""
    import logging

    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for h in list(ms_logger.handlers):
        if h.get_name() is None:
            ms_logger.removeHandler(h)


def _tune(mod, spec, db_dir, trials: int, runner, seed: int, cost_model="xgb") -> None:
    import contextlib
    import sys

    from tvm.s_tir import meta_schedule as ms

    from ..collect.tasks import fuse

    drop_unnamed_ms_log_handlers()
    # meta-schedule's log handler writes to sys.stdout as resolved when the logger is set up: send it to stderr, so
    # stdout keeps only results (`--json` output stays parseable)
    with isolated_builder() as builder, contextlib.redirect_stdout(sys.stderr):
        ms.relax_integration.tune_relax(fuse(mod), {}, spec.target(), str(db_dir), max_trials_global=trials,
                                        num_trials_per_iter=16, builder=builder, runner=runner, seed=seed,
                                        cost_model=cost_model)
