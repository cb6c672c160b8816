"""The host gate: is this machine running at its own speed right now?

A cloud VM's cores are shared with other tenants below the hypervisor, in two ways that matter to a timer
(znver5 development host, 2026-12-01; nothing else ran in the VM, no steal time, so the load check of
`perfcast.collect.load` sees neither):
- *CPU spells*: a fixed scalar Python loop ran 1.6 ms on a core most of the time and 3.1 ms for spells of 2-6 s
  (one core slow 26 % of 32 s at 03:35 UTC, under 1 % at 04:00; `python bench/host_contention.py`). A parallel
  kernel waits for its slowest thread, so a program timed in a spell is labelled slow.
- *Cache spells*: the fastest RMSNorm program (a 2 x 400 KB working set, L2-resident) ran 4.6 us most of the time
  and ~7 us for spells of ~6 s (a quarter of a minute), while the CPU spells' sentinel and a tiny parallel kernel
  (launch cost only) did not move: someone else was using the L2. A kernel sweeping 200 KB per thread followed it
  (correlation 0.83; 1.67x its fastest in the RMSNorm's slow samples, 1.09x in its fast ones).

The collector's three rounds (protocol 2, a second or so apart) can all fall in one spell. So the gate times a
fixed two-part kernel, the *sentinel*, on the same threads as the program (in the worker, with the launching thread
pinned as for timing), right before and right after each timing round: L1-resident vector multiply-adds (the CPU
part, ~80 us) and one sweep of 200 KB per thread averaged over 50 calls (the cache part, ~2 us a call). Neither
depends on the program, so their times move only with the host. The runner keeps each part's fastest time; a round
whose sentinel took more than `MeasureConfig.host_gate` (1.5) times that in either part is timed again after a
pause, until it passes or `host_wait_s` has gone by (then it is kept, and counted as contended).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

SENTINEL_PASSES = 4000  # CPU part: passes over 1,024 floats per thread, ~80 us on the znver5 host with 2 threads
SENTINEL_WIDTH = 1024
CACHE_WIDTH = 51_200  # cache part: 200 KB of floats per thread, one pass (~1.8 us on the znver5 host)
CACHE_CALLS = 50  # the cache part's time is the median of 3 means over this many calls
PARTS = ("cpu", "cache")


def sentinel_module(threads: int, passes: int = SENTINEL_PASSES, width: int = SENTINEL_WIDTH):
    """A sentinel part as an IRModule: `threads` parallel rows of `width` floats (a multiple of 16), each updated
    `passes` times with a multiply-add (a <- 0.999 a + 0.001: converges to 1, no denormals)."""
    import tvm
    from tvm.script import tirx as T

    if threads < 1 or passes < 1 or width < 16 or width % 16:
        raise ValueError(f"sentinel needs threads >= 1, passes >= 1 and a width that is a multiple of 16, got "
                         f"{threads}, {passes}, {width}")

    @T.prim_func
    def main(a: T.Buffer((threads, width), "float32")):
        for i in T.parallel(threads):
            for r in range(passes):
                for j0 in range(width // 16):
                    for j1 in T.vectorized(16):
                        a[i, j0 * 16 + j1] = a[i, j0 * 16 + j1] * T.float32(0.999) + T.float32(0.001)

    return tvm.IRModule({"main": main})


class Sentinel:
    """Both parts built for one target, with their inputs; `seconds()` times them: [cpu, cache] seconds (the CPU
    part's fastest of 3 calls, the cache part's median of 3 means over CACHE_CALLS calls)."""

    def __init__(self, target, threads: int, device):
        import numpy as np
        import tvm

        self._parts = []
        for passes, width, number in ((SENTINEL_PASSES, SENTINEL_WIDTH, 1), (1, CACHE_WIDTH, CACHE_CALLS)):
            lib = tvm.build(sentinel_module(threads, passes, width), target=target)
            arg = tvm.runtime.tensor(np.ones((threads, width), "float32"), device)
            lib["main"](arg)  # burn-in: JIT and first touch
            self._parts.append((lib, arg, lib.time_evaluator("main", device, number=number, repeat=3)))

    def seconds(self) -> list[float]:
        cpu = min(self._parts[0][2](self._parts[0][1]).results)
        cache = sorted(self._parts[1][2](self._parts[1][1]).results)[1]
        return [float(cpu), float(cache)]


def gated_round(time_evaluator, call_once, cfg, pin, sentinel: Sentinel | None, plan=None) -> dict:
    """One timing round (`measure.time_function`) as the collector times it: after the first call the launching
    thread is pinned (`pin`, a `LauncherPin`, when `cfg.pin_launcher`) and the sentinel read; right after the
    timings it is read again. The result carries both readings as `host_s` (none without a sentinel)."""
    from .measure import time_function

    host_s: list[list[float]] = []  # sentinel readings, [cpu, cache] seconds each

    def after_first() -> None:
        if cfg.pin_launcher:
            pin.apply()
        if sentinel is not None:
            host_s.append(sentinel.seconds())

    res = time_function(time_evaluator, call_once, cfg, after_first=after_first, plan=plan)
    if sentinel is not None:
        res["host_s"] = host_s + [sentinel.seconds()]
    return res


def summary(stats: dict) -> str:
    """One line from `HostGate.stats()`: what the gate re-timed and waited."""
    by = ", ".join(f"{k} {v}" for k, v in stats.get("retimed_by", {}).items() if v)
    return (f"host gate {stats['gate']}x: {stats['retimed']} of {stats['rounds']} timing rounds timed again"
            f"{f' (over the gate: {by})' if by else ''}, {stats['waited_s']} s waited, "
            f"{stats['kept_contended']} kept slow")


@dataclass
class HostGate:
    """The parent's side: each sentinel part's fastest time, the verdict on each round, and what the gate cost.
    The fastest times are learned within one runner: a runner that starts inside a spell and stays in it gates the
    spell against itself (a 20-s `bench/timers.py` run did, 2026-12-01 05:20) until a faster reading comes."""

    gate: float | None = 1.5
    best_s: list = field(default_factory=lambda: [math.inf] * len(PARTS))  # per part (PARTS)
    rounds: int = 0  # rounds judged
    retimed: int = 0  # rounds timed again because the host was slow
    retimed_by: dict = field(default_factory=lambda: dict.fromkeys(PARTS, 0))  # which part was over the gate
    kept_contended: int = 0  # rounds kept slow after host_wait_s
    waited_s: float = 0.0  # pauses waiting for the host
    ratios: list = field(default_factory=list)  # the ratio of every kept round

    def judge(self, host_s) -> list[float]:
        """Per part, the ratio of a round's slower sentinel reading (before, after) to the part's fastest reading
        seen (this round's included). `host_s`: the readings, each [cpu, cache] seconds."""
        rows = [[float(x) for x in r] for r in host_s] if all(isinstance(r, (list, tuple)) for r in host_s) else []
        if not rows or any(len(r) != len(PARTS) or not all(math.isfinite(x) and x > 0 for x in r) for r in rows):
            raise ValueError(f"sentinel readings {host_s!r}: need [cpu, cache] positive finite seconds each")
        self.best_s = [min(b, *(r[k] for r in rows)) for k, b in enumerate(self.best_s)]
        return [max(r[k] for r in rows) / self.best_s[k] for k in range(len(PARTS))]

    def contended(self, ratio: float) -> bool:
        return self.gate is not None and ratio > self.gate

    def run(self, measure: Callable[[], dict], pause_s: float, wait_s: float,
            on_slow: Callable[[str], None] | None = None) -> dict:
        """`measure()` (one timing round: a result with `host_s`, the sentinel's readings before and after) again
        every `pause_s` while the host is slow, for at most `wait_s` of pauses; the kept result gets `host_ratio`
        (the larger part's ratio). A failed round or one without sentinel readings is returned as it is.
        `on_slow(message)`: told on the first round this gate times again."""
        waited = 0.0
        while True:
            r = measure()
            if r.get("status", "ok") != "ok" or "host_s" not in r:
                return r
            parts = self.judge(r["host_s"])
            ratio = max(parts)
            self.rounds += 1
            if not self.contended(ratio) or waited >= wait_s:
                self.kept_contended += self.contended(ratio)
                self.ratios.append(ratio)
                return {**r, "host_ratio": ratio}
            if self.retimed == 0 and on_slow is not None:
                on_slow(f"the host runs slow (a fixed kernel's {PARTS[parts.index(ratio)]} part took {ratio:.2f}x "
                        "its best: other tenants of this machine's cores); rounds timed meanwhile are timed again")
            self.retimed += 1
            for name, x in zip(PARTS, parts):
                self.retimed_by[name] += self.contended(x)
            time.sleep(pause_s)
            waited += pause_s
            self.waited_s += pause_s

    def stats(self) -> dict:
        r = sorted(self.ratios)
        return {"gate": self.gate, "rounds": self.rounds, "retimed": self.retimed, "retimed_by": dict(self.retimed_by),
                "kept_contended": self.kept_contended, "waited_s": round(self.waited_s, 1),
                "sentinel_best_us": {name: round(b * 1e6, 2) if math.isfinite(b) else None
                                     for name, b in zip(PARTS, self.best_s)},
                "ratio_median": r[len(r) // 2] if r else None, "ratio_max": r[-1] if r else None}
