"""Programs of a task: TVM's default kernel, then random schedules from meta-schedule's design space.

Random schedules are meta-schedule's own: the post-order-apply space generator (the CPU schedule rules) with
the ReplayTrace strategy, which samples every random decision of a design space afresh (Tenset's sampling).
Duplicates (structurally equal programs) are skipped; a small space ends when it stops yielding new programs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class Program:
    schedule_kind: str  # "default" | "random"
    mod: object  # scheduled tvm.IRModule
    trace_json: str
    program_hash: str


def stable_seed(*parts) -> int:
    h = hashlib.sha1("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def default_program(task_mod) -> Program:
    """The kernel TVM's default CPU pipeline compiles: the fused PrimFunc, unscheduled."""
    from .._tvm.util import main_func, structural_key

    return Program("default", task_mod, "", structural_key(main_func(task_mod)))


def random_programs(task_mod, target, seed: int, batch: int = 8, patience: int = 6) -> Iterator[Program]:
    """Endless stream of distinct random schedules; stops after `patience` batches with nothing new.

    Small batches: sampling a schedule costs as much as building it for large tasks, and the collector often
    needs only a few programs of a task at a time.
    """
    from tvm.s_tir import meta_schedule as ms

    from .._tvm.util import load_x86_intrinsics, structural_key, trace_to_json

    load_x86_intrinsics()
    ctx = ms.TuneContext(mod=task_mod, target=target, space_generator="post-order-apply",
                         search_strategy=ms.search_strategy.ReplayTrace(), task_name="task",
                         rand_state=seed, num_threads=1)
    spaces = ctx.generate_design_space()
    ctx.pre_tuning(max_trials=1 << 30, num_trials_per_iter=batch, design_spaces=spaces, database=None,
                   cost_model=None)
    seen: set[str] = set()
    dry = 0
    while dry < patience:
        cands = ctx.generate_measure_candidates()
        if not cands:
            return
        fresh = 0
        for c in cands:
            h = structural_key(c.sch.mod["main"])
            if h in seen:
                continue
            seen.add(h)
            fresh += 1
            yield Program("random", c.sch.mod, trace_to_json(c.sch.trace), h)
        dry = 0 if fresh else dry + 1
        ctx.notify_runner_results(cands, [ms.runner.RunnerResult(run_secs=[1.0], error_msg=None)] * len(cands))
