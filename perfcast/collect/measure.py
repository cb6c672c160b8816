"""How one program is timed: burn-in, calibrated inner loop, repeats, median, re-measure on high spread.

Shared by the isolated worker (`worker.py`) and the RPC runner (`rpc.py`). The protocol follows the layerwise
paper's benchmarking flow (§4): warm caches by burn-in, several repeats, the median as the label, the spread kept.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class MeasureConfig:
    repeats: int = 3  # timed repeats per timing round (a program gets `rounds` of them)
    slow_repeats: int = 3  # repeats when one call takes longer than slow_s
    slow_s: float = 0.05
    very_slow_repeats: int = 1  # repeats when one call takes longer than very_slow_s
    very_slow_s: float = 1.0
    min_repeat_s: float = 0.005  # each repeat runs the kernel `number` times for at least this long
    max_number: int = 10_000
    max_cv: float = 0.05  # re-measure once (with twice the repeats) when std/mean exceeds this
    # TVM_THREAD_POOL_SPIN_COUNT of a local worker (None: TVM's 300000, ~0.2 s of spinning after each parallel
    # kernel). 30000 (~20 ms) still spans the gaps between timed calls: `python bench/spin_count.py` on 38
    # ResNet-50 programs moved the medians by 0.76 % (median |diff|), less than two runs with TVM's setting (1.24 %).
    spin_count: int | None = 30_000
    # timing rounds per program (protocol 2): the label is the lowest round median; a program's rounds are at
    # least round_gap_s apart (a host's slow spells last seconds: `perfcast.collect.worker`)
    rounds: int = 3
    round_gap_s: float = 0.5
    # keep the launching thread off the cores TVM pins its pool threads to (`perfcast.collect.affinity`); False
    # only to reproduce protocol 1
    pin_launcher: bool = True
    # the host gate (`perfcast.collect.sentinel`): a fixed two-part kernel (CPU, cache) timed on the same threads
    # before and after each round; a round whose sentinel ran more than `host_gate` x a part's baseline (the 10th
    # percentile of its recent readings) is timed again every `host_pause_s`, for at most `host_wait_s` (then kept
    # and counted). None: no gate. host_gate_store: keep the recent readings per host across runs
    # (`paths.host_gate_file()`) instead of learning them within the run only.
    host_gate: float | None = 1.5
    host_pause_s: float = 0.5
    host_wait_s: float = 10.0
    host_gate_store: bool = True
    build_timeout_s: float = 60.0
    run_timeout_s: float = 60.0


def make_args(shapes: list, device):
    """Random float inputs, zero integer inputs (index tensors must stay in bounds)."""
    import numpy as np
    import tvm

    rng = np.random.default_rng(0)
    out = []
    for shape, dtype in shapes:
        if dtype.startswith(("float", "bfloat")):
            arr = rng.uniform(-1, 1, size=shape).astype(dtype if dtype != "bfloat16" else "float32")
        else:
            arr = np.zeros(shape, dtype=dtype)
        out.append(tvm.runtime.tensor(arr, device))
    return out


def time_function(time_evaluator, call_once, cfg: MeasureConfig, after_first=None, plan=None) -> dict:
    """Time with `time_evaluator(number, repeat) -> per-repeat mean latencies in seconds` (TVM's evaluator).

    `call_once()` runs the kernel once (burn-in on cold caches; its wall time picks the inner loop count and
    how many repeats the program gets: fewer for slow kernels, whose relative noise is small). `after_first()`, if
    given, runs after that call and before the timings (a local worker pins its launching thread then:
    `perfcast.collect.affinity`). `plan=(number, repeats)` of an earlier round of the same program skips the
    burn-in call (TVM's evaluator still runs its own warm-up call); the result's `plan` is the one used.
    """
    t0 = time.perf_counter()
    if plan is None:
        call_once()
        first = max(time.perf_counter() - t0, 1e-7)
        number = int(min(cfg.max_number, max(1, math.ceil(cfg.min_repeat_s / first))))
        repeats = cfg.repeats if first < cfg.slow_s else cfg.slow_repeats if first < cfg.very_slow_s \
            else cfg.very_slow_repeats
    else:
        number, repeats = (int(x) for x in plan)
    if after_first is not None:
        after_first()
    # burn-in: the call above (first round), plus the untimed warm-up call TVM's time evaluator makes
    lat = list(time_evaluator(number, repeats))
    remeasured = False
    if _cv(lat) > cfg.max_cv:
        remeasured = True
        lat = list(time_evaluator(number, 2 * repeats))
    return {
        "latencies_s": lat,
        "latency_s": statistics.median(lat),
        "latency_min_s": min(lat),
        "latency_max_s": max(lat),
        "latency_cv": _cv(lat),
        "number": number,
        "plan": [number, repeats],
        "remeasured": remeasured,
        "measure_s": time.perf_counter() - t0,
    }


def _cv(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = statistics.fmean(xs)
    return statistics.stdev(xs) / m if m > 0 else 0.0
