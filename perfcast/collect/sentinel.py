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
pinned as for timing; built for the host's own CPU whatever the program's mcpu: `sentinel_target`), right before and
right after each timing round: L1-resident vector multiply-adds (the CPU part, ~80 us) and one sweep of 200 KB per
thread averaged over 50 calls (the cache part, ~2 us a call). The runner keeps a baseline per part (the 10th
percentile of its recent readings, per host, thread count and sentinel target, across runs in a per-user file:
`HostGate`); a round whose sentinel's CPU part took more than `MeasureConfig.host_gate` (1.5) times its baseline is
timed again after a pause, until it passes or `host_wait_s` has gone by (then it is kept, and counted as
contended).

The cache part is read and reported (each round's `host_parts`) but does not gate (GATED_PARTS): for most
programs the rounds it flags are hardly slower. `bench/host_gate_value.py` (07:02, 60 programs of this CPU, 5
rounds each, nothing re-timed): 68 of 300 rounds over 1.5x its baseline, all by the cache part; their median
round / the program's lowest round 1.023 against 1.015 for the other rounds, over 10 % slow 1.5 % against 3.0 %.
Gating on it had re-timed 9-19 % of a collection's rounds and waited 25-37 % of its time (fifty-first round, 06:29
and 06:51). What it would protect are L2-resident microsecond kernels such as the RMSNorm above (1.5x in a spell);
but the slow cache state also lasts minutes (07:44-07:46: the RMSNorm at 7.8 us and the cache part at 2.7 us for
whole runs, against 4.3 and 1.6 us earlier), longer than re-timing can wait or than a 256-reading window stays
put, and then such kernels are labelled up to ~1.8x slow (`bench/timers.py` on the RMSNorm database: run_secs /
collector 0.56 below 10 us). So every record keeps its rounds' readings (`MeasureRecord.round_sentinel_cpu_s`,
`round_sentinel_cache_s`, schema version 3), to tell such labels apart afterwards.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SENTINEL_PASSES = 4000  # CPU part: passes over 1,024 floats per thread, ~80 us on the znver5 host with 2 threads
SENTINEL_WIDTH = 1024
CACHE_WIDTH = 51_200  # cache part: 200 KB of floats per thread, one pass (~1.8 us on the znver5 host)
CACHE_CALLS = 50  # the cache part's time is the median of 3 means over this many calls
PARTS = ("cpu", "cache")
# the parts whose ratio decides (the cache part is read and reported, `host_parts`, but does not gate: the rounds it
# flags were hardly slower, see the module docstring)
GATED_PARTS = ("cpu",)


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


@functools.lru_cache(maxsize=None)
def sentinel_target(target_json: str) -> str:
    """The target (JSON) the sentinel is built for when programs are built for `target_json`: the same, but for the
    host's own CPU (`mcpu`), unless the target names another triple. The sentinel measures the host, not the code:
    its SSE2 build (`mcpu=x86-64`) read over 1.5x its baseline in 12 % (1 thread) and 26 % (2 threads) of readings
    taken at moments its AVX2 builds on the same core read none (znver3 host, 2026-12-02, 150 interleaved readings
    each), so a gate built per target re-timed 31-46 % of x86-64 programs' rounds, which were then ~1.5 % slower
    (median of their round / the record's median round)."""
    import tvm

    target = json.loads(target_json)
    if target.get("kind") != "llvm" or "mtriple" in target:
        return target_json
    return json.dumps({**target, "mcpu": tvm.target.codegen.llvm_get_system_cpu()}, sort_keys=True)


class Sentinel:
    """Both parts built for the host's CPU (`sentinel_target` of the programs' `target_json`) and `threads`, with
    their inputs; `seconds()` times them: [cpu, cache] seconds (the CPU part's fastest of 3 calls, the cache part's
    median of 3 means over CACHE_CALLS calls)."""

    def __init__(self, target_json: str, threads: int, device):
        import numpy as np
        import tvm

        target = tvm.target.Target(json.loads(sentinel_target(target_json)))
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


@functools.lru_cache(maxsize=None)  # once per target and thread count, not on every batch
def baseline_key(target_json: str, threads: int) -> str:
    """What a stored baseline belongs to: this host (its name and CPU model), the thread count and the sentinel's
    target (`sentinel_target`: the programs' target for the host's CPU, so every mcpu of one host shares it)."""
    import hashlib
    import platform

    from ..devices.local import cpu_model_name

    cpu = cpu_model_name() or platform.processor() or "cpu"
    built = sentinel_target(target_json)
    return f"{platform.node()}/{cpu}/threads={threads}/{hashlib.sha1(built.encode()).hexdigest()[:12]}"


WINDOW = 256  # readings per part a baseline is taken from (the most recent, across runs with a store)
QUANTILE = 0.1  # the baseline: this quantile of the window (not its minimum: one lucky reading set the bar too low)
MAX_AGE_S = 3 * 86400  # a stored window older than this is not used


@dataclass
class HostGate:
    """The parent's side: each sentinel part's baseline, the verdict on each round, and what the gate cost.

    A part's baseline is the 10th percentile of its most recent WINDOW readings (before, after, of every round,
    re-timed ones included), per `key` (`baseline_key`: host, threads, sentinel target). Not the fastest reading:
    the cache part's fastest in a 20-min collection (1.58 us) was about 0.8x its usual reading (the kept rounds'
    median ratio was 1.26), so 19 % of rounds went over 1.5x it and waited 37 % of the run (2026-12-01 06:29; the
    cache part no longer gates, see the module docstring). With a `store` (`paths.host_gate_file()`) the window is
    kept across runs, so a runner that starts inside a spell is judged against the host's recent speed, not against
    the spell (a 20-s `bench/timers.py` run that learned within itself re-timed none of its rounds inside a cache
    spell, 2026-12-01 05:20). A host that turns slower for good moves the window within about six rounds (a round
    waiting its whole host_wait_s adds 40 readings); a window older than MAX_AGE_S is not used.
    """

    gate: float | None = 1.5
    store: Path | None = None  # per-host windows (a JSON file); None: learn within this runner only
    window_s: dict = field(default_factory=dict)  # key -> per part (PARTS), the recent readings, oldest first
    base_s: dict = field(default_factory=dict)  # key -> per part, the baseline the last round was judged against
    from_store: dict = field(default_factory=dict)  # key -> readings the window started with from the store
    rounds: int = 0  # rounds judged
    retimed: int = 0  # rounds timed again because the host was slow
    retimed_by: dict = field(default_factory=lambda: dict.fromkeys(PARTS, 0))  # which part was over the gate
    kept_contended: int = 0  # rounds kept slow after host_wait_s
    waited_s: float = 0.0  # pauses waiting for the host
    ratios: list = field(default_factory=list)  # the ratio of every kept round
    last_key: str = ""  # the key judged last (its baseline is in `stats`)

    def _stored(self) -> dict:
        if self.store is None or not Path(self.store).is_file():
            return {}
        try:
            data = json.loads(Path(self.store).read_text())
        except (OSError, ValueError):
            return {}  # a cache: unreadable means empty (it is written again on save)
        return data if isinstance(data, dict) else {}

    def _load(self, key: str) -> None:
        entry = self._stored().get(key)
        saved_at = entry.get("saved_at") if isinstance(entry, dict) else None
        fresh = isinstance(saved_at, (int, float)) and time.time() - saved_at < MAX_AGE_S

        def readings(part: str) -> list[float]:
            w = entry.get(part) if fresh else None
            return [float(x) for x in w if isinstance(x, (int, float)) and x > 0][-WINDOW:] if isinstance(w, list) \
                else []

        self.window_s[key] = [readings(p) for p in PARTS]
        self.from_store[key] = [len(w) for w in self.window_s[key]]

    def judge(self, host_s, key: str = "") -> list[float]:
        """Per part, the ratio of a round's slower sentinel reading (before, after) to the part's baseline for `key`
        (the QUANTILE of its window, this round's readings added first). `host_s`: the readings, each [cpu, cache]
        seconds."""
        rows = [[float(x) for x in r] for r in host_s] if all(isinstance(r, (list, tuple)) for r in host_s) else []
        if not rows or any(len(r) != len(PARTS) or not all(math.isfinite(x) and x > 0 for x in r) for r in rows):
            raise ValueError(f"sentinel readings {host_s!r}: need [cpu, cache] positive finite seconds each")
        if key not in self.window_s:
            self._load(key)
        base = []
        for k, w in enumerate(self.window_s[key]):
            w.extend(r[k] for r in rows)
            del w[:-WINDOW]
            base.append(sorted(w)[int(QUANTILE * (len(w) - 1))])
        self.base_s[key], self.last_key = base, key
        return [max(r[k] for r in rows) / base[k] for k in range(len(PARTS))]

    def save(self) -> None:
        """Keep each key's windows in `store` (other keys in the file stay)."""
        if self.store is None or not self.window_s:
            return
        data = self._stored()
        for key, windows in self.window_s.items():
            data[key] = {"saved_at": time.time(), **{p: w for p, w in zip(PARTS, windows)}}
        tmp = Path(self.store).with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(data, sort_keys=True))
            tmp.replace(self.store)
        except OSError:  # a cache: a read-only or full disk must not fail the run that measured
            pass

    def contended(self, ratio: float) -> bool:
        return self.gate is not None and ratio > self.gate

    def run(self, measure: Callable[[], dict], pause_s: float, wait_s: float,
            on_slow: Callable[[str], None] | None = None, key: str = "") -> dict:
        """`measure()` (one timing round: a result with `host_s`, the sentinel's readings before and after) again
        every `pause_s` while the host is slow, for at most `wait_s` of pauses; the kept result gets `host_ratio`
        (the largest gating part's ratio) and `host_parts` (each part's); only the GATED_PARTS decide. A failed
        round or one without sentinel readings is returned as it is. `on_slow(message)`: told on the first round
        this gate times again. `key`: whose window (`baseline_key`)."""
        waited = 0.0
        while True:
            r = measure()
            if r.get("status", "ok") != "ok" or "host_s" not in r:
                return r
            parts = self.judge(r["host_s"], key)
            ratio = max(x for name, x in zip(PARTS, parts) if name in GATED_PARTS)
            self.rounds += 1
            if not self.contended(ratio) or waited >= wait_s:
                self.kept_contended += self.contended(ratio)
                self.ratios.append(ratio)
                return {**r, "host_ratio": ratio, "host_parts": parts}
            if self.retimed == 0 and on_slow is not None:
                on_slow(f"the host runs slow (a fixed kernel's {PARTS[parts.index(ratio)]} part took {ratio:.2f}x its "
                        "usual time: other tenants of this machine's cores); rounds timed meanwhile are timed again")
            self.retimed += 1
            for name, x in zip(PARTS, parts):
                self.retimed_by[name] += name in GATED_PARTS and self.contended(x)
            time.sleep(pause_s)
            waited += pause_s
            self.waited_s += pause_s

    def stats(self) -> dict:
        r = sorted(self.ratios)
        base = self.base_s.get(self.last_key, [math.inf] * len(PARTS))
        return {"gate": self.gate, "rounds": self.rounds, "retimed": self.retimed, "retimed_by": dict(self.retimed_by),
                "kept_contended": self.kept_contended, "waited_s": round(self.waited_s, 1),
                "sentinel_baseline_us": {name: round(b * 1e6, 2) if math.isfinite(b) else None
                                         for name, b in zip(PARTS, base)},
                "readings_from_store": dict(zip(PARTS, self.from_store.get(self.last_key, [0] * len(PARTS)))),
                "ratio_median": r[len(r) // 2] if r else None, "ratio_max": r[-1] if r else None}


def gate_for(cfg) -> HostGate:
    """The gate a `MeasureConfig` asks for (its store the per-user file unless `host_gate_store` is off)."""
    from .. import paths

    store = paths.host_gate_file() if cfg.host_gate is not None and cfg.host_gate_store else None
    return HostGate(cfg.host_gate, store=store)
