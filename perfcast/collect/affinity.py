"""Keep the thread that launches a TVM kernel off the cores TVM's thread pool is pinned to.

TVM's CPU thread pool (`TVM_NUM_THREADS=n`) runs a parallel loop on the calling thread (worker 0) plus n-1 pool
threads, and pins each pool thread to one core (here, with 2 cores: the pool thread to core 1) while the calling
thread may run anywhere. When the OS happens to run the calling thread on a pinned pool thread's core, both halves
of every parallel loop share that core: the kernel takes twice as long, with repeats as steady as ever (a CV of 1 %),
so nothing in the timings shows it. Measured on a 2-core host (2026-11-25; the script was not kept): a ResNet-50
conv program ran 0.84 ms with the calling thread on core 0 and 1.69 ms on core 1; re-timing 200 bundled programs in
two passes minutes apart disagreed by more than 29 % on one in ten before this fix (`bench/timing_repeatability.py`).
On some microsecond programs the timing is not steady from one minute to the next: `python bench/timers.py DB`
(znver5, 2026-12-01) timed an RMSNorm's fastest programs 1.6-1.7x slower than meta-schedule's LocalRunner in 5 of 7
pinned runs and 1 of 4 unpinned ones. That state is the host's, not the pin's: it came and went across fresh
processes and within one, pinned or not, for 10-15 s at a time (README, Two timers).
A tuned bert_tiny's and mobilenet_v2's programs, microsecond ones included, agreed within 5 % either way.

`pin_launcher()` restricts the calling thread to the cores of its affinity that no pinned pool thread occupies,
once the pool exists (TVM creates it at the first parallel launch, so call it after a first run); it changes
nothing when there is no pinned pool thread (single-threaded runtime, or a kernel without parallel loops yet) or
when the pool threads cover every allowed core. `LauncherPin` does the same for a block of timing and gives the
thread its affinity back afterwards (a worker that builds between timings should build on every core).
"""

from __future__ import annotations

import os
import threading


def _thread_cpu_sets() -> dict[int, frozenset[int]]:
    """{thread id: its CPU affinity} of every thread of this process except the caller."""
    me = threading.get_native_id()
    out = {}
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        if tid == me:
            continue
        try:
            out[tid] = frozenset(os.sched_getaffinity(tid))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def pinned_pool_cores(allowed: frozenset[int] | None = None) -> frozenset[int]:
    """Cores that some other thread of this process is pinned to (an affinity narrower than `allowed`, the
    process-wide set; default: the calling thread's)."""
    allowed = allowed if allowed is not None else frozenset(os.sched_getaffinity(0))
    return frozenset().union(*[c for c in _thread_cpu_sets().values() if c < allowed] or [frozenset()])


def pin_launcher(allowed: frozenset[int] | None = None) -> frozenset[int] | None:
    """Restrict the calling thread to `allowed` (default: its current affinity) minus the cores pinned pool threads
    use. Returns the new affinity, or None when nothing was changed."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = allowed if allowed is not None else frozenset(os.sched_getaffinity(0))
    free = allowed - pinned_pool_cores(allowed)
    if not free or free == allowed:
        return None
    os.sched_setaffinity(0, free)  # pid 0: the calling thread only
    return free


class LauncherPin:
    """`with LauncherPin() as pin: run(); pin.apply(); time()`: pin the calling thread (after the first run created
    TVM's pool) for the timings, restore its affinity on exit."""

    def __enter__(self) -> "LauncherPin":
        self.saved = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.pinned: frozenset[int] | None = None
        return self

    def apply(self) -> None:
        if self.saved is not None and self.pinned is None:
            self.pinned = pin_launcher(self.saved)

    def __exit__(self, *exc) -> None:
        if self.pinned is not None:
            os.sched_setaffinity(0, self.saved)
