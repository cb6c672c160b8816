"""The host gate: is this machine running at its own speed right now?

A cloud VM's cores are shared with other tenants below the hypervisor. On the znver5 development host
(2026-12-01) a fixed scalar Python loop ran 1.6 ms on a core most of the time and 3.1 ms for spells of 2-6 s,
on one core or the other, 25-65 % of the time over a minute, with no steal time and nothing else running in the
VM (`python bench/host_contention.py`): the load check of `perfcast.collect.load` cannot see it. A parallel kernel
waits for its slowest thread, so a program timed in such a spell is labelled up to 2x slow, and the collector's
three rounds (protocol 2, a second or so apart) often all fall in one spell.

The gate times a fixed kernel, the *sentinel*, on the same threads as the program (in the worker, with the
launching thread pinned as for timing), right before and right after each timing round. The sentinel does a fixed
amount of L1-resident vector multiply-adds per thread (no memory traffic, no dependence on the program), so its
time moves only with the host. The runner keeps the fastest sentinel it has seen; a round whose sentinel took
more than `MeasureConfig.host_gate` (1.5) times that is timed again after a pause, until it passes or
`host_wait_s` has gone by (then it is kept, and counted as contended).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

SENTINEL_PASSES = 4000  # passes over 1,024 floats per thread: ~90 us on the znver5 host with 2 threads
SENTINEL_WIDTH = 1024


def sentinel_module(threads: int, passes: int = SENTINEL_PASSES):
    """The sentinel as an IRModule: `threads` parallel rows of SENTINEL_WIDTH floats, each updated `passes` times
    with a multiply-add (a <- 0.999 a + 0.001: converges to 1, no denormals)."""
    import tvm
    from tvm.script import tirx as T

    if threads < 1 or passes < 1:
        raise ValueError(f"sentinel needs threads >= 1 and passes >= 1, got {threads}, {passes}")
    width = SENTINEL_WIDTH

    @T.prim_func
    def main(a: T.Buffer((threads, width), "float32")):
        for i in T.parallel(threads):
            for r in range(passes):
                for j0 in range(width // 16):
                    for j1 in T.vectorized(16):
                        a[i, j0 * 16 + j1] = a[i, j0 * 16 + j1] * T.float32(0.999) + T.float32(0.001)

    return tvm.IRModule({"main": main})


class Sentinel:
    """The sentinel built for one target, with its input; `seconds()` times it (fastest of 3 calls)."""

    def __init__(self, target, threads: int, device):
        import numpy as np
        import tvm

        self.lib = tvm.build(sentinel_module(threads), target=target)
        self.arg = tvm.runtime.tensor(np.ones((threads, SENTINEL_WIDTH), "float32"), device)
        self.lib["main"](self.arg)  # burn-in: JIT and first touch
        self._ev = self.lib.time_evaluator("main", device, number=1, repeat=3)

    def seconds(self) -> float:
        return float(min(self._ev(self.arg).results))


@dataclass
class HostGate:
    """The parent's side: the fastest sentinel seen, the verdict on each round, and what the gate cost."""

    gate: float | None = 1.15
    best_s: float = math.inf
    rounds: int = 0  # rounds judged
    retimed: int = 0  # rounds timed again because the host was slow
    kept_contended: int = 0  # rounds kept slow after host_wait_s
    waited_s: float = 0.0  # pauses waiting for the host
    ratios: list = field(default_factory=list)  # the ratio of every kept round

    def judge(self, host_s) -> float:
        """The ratio of a round's slower sentinel (before, after) to the fastest seen (this one included)."""
        xs = [float(x) for x in host_s]
        if not xs or not all(math.isfinite(x) and x > 0 for x in xs):
            raise ValueError(f"sentinel times {host_s!r}: need positive finite seconds")
        self.best_s = min(self.best_s, *xs)
        return max(xs) / self.best_s

    def contended(self, ratio: float) -> bool:
        return self.gate is not None and ratio > self.gate

    def run(self, measure: Callable[[], dict], pause_s: float, wait_s: float,
            on_slow: Callable[[str], None] | None = None) -> dict:
        """`measure()` (one timing round: a result with `host_s`, the sentinel's seconds before and after) again
        every `pause_s` while the host is slow, for at most `wait_s` of pauses; the kept result gets `host_ratio`.
        A failed round or one without sentinel times is returned as it is. `on_slow(message)`: told on the first
        round this gate times again."""
        waited = 0.0
        while True:
            r = measure()
            if r.get("status", "ok") != "ok" or "host_s" not in r:
                return r
            ratio = self.judge(r["host_s"])
            self.rounds += 1
            if not self.contended(ratio) or waited >= wait_s:
                self.kept_contended += self.contended(ratio)
                self.ratios.append(ratio)
                return {**r, "host_ratio": ratio}
            if self.retimed == 0 and on_slow is not None:
                on_slow(f"the host runs slow (a fixed kernel took {ratio:.2f}x its best: other tenants of this "
                        "machine's cores); rounds timed meanwhile are timed again")
            self.retimed += 1
            time.sleep(pause_s)
            waited += pause_s
            self.waited_s += pause_s

    def stats(self) -> dict:
        r = sorted(self.ratios)
        return {"gate": self.gate, "rounds": self.rounds, "retimed": self.retimed,
                "kept_contended": self.kept_contended, "waited_s": round(self.waited_s, 1),
                "sentinel_best_us": round(self.best_s * 1e6, 2) if math.isfinite(self.best_s) else None,
                "ratio_median": r[len(r) // 2] if r else None, "ratio_max": r[-1] if r else None}
