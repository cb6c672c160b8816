"""Is something else using the CPU? A loaded CPU gives false ground truth, so the collector checks after every
measurement how much CPU time processes other than itself and its worker used meanwhile (from /proc/stat,
steal time included) on the CPUs the collector may run on (its affinity: `taskset -c 1 perfcast collect
--device local:threads=1 ...` measures on core 1 while core 0 stays usable); if it was more than
`max_foreign_cores`, the measurement is discarded, the collector warns
(with the load average) and pauses until the machine is quiet, then measures the program again.
"""

from __future__ import annotations

import os
import time

import psutil


def _busy_seconds(cpus: frozenset[int] | None = None) -> float:
    """Busy CPU seconds since boot, over `cpus` (all CPUs when None)."""
    per = psutil.cpu_times(percpu=True)
    busy = 0.0
    for i, t in enumerate(per):
        if cpus is None or i in cpus:
            idle = t.idle + getattr(t, "iowait", 0.0)
            busy += sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return busy


def own_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on, or None when that is every CPU."""
    try:
        cpus = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return None if len(cpus) >= (os.cpu_count() or 1) else cpus


class LoadMonitor:
    def __init__(self, max_foreign_cores: float = 0.3, quiet_s: float = 3.0, enabled: bool = True):
        self.max_foreign_cores = max_foreign_cores
        self.quiet_s = quiet_s
        self.enabled = enabled
        self._me = psutil.Process()
        self.cpus = own_cpus()  # None: the whole machine
        self.pauses = 0
        self.paused_s = 0.0
        self.mark()

    def _ours(self) -> float:
        """CPU seconds of this process and all its children, live ones and reaped ones (a killed worker's too)."""
        ct = self._me.cpu_times()
        total = ct.user + ct.system + ct.children_user + ct.children_system
        for child in self._me.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.NoSuchProcess:
                pass  # reaped meanwhile: counted in children_* from now on (a window may under-count once)
        return total

    def mark(self) -> None:
        """Start a measurement window."""
        self._t = time.monotonic()
        self._busy = _busy_seconds(self.cpus)
        self._own = self._ours()

    def foreign_cores(self) -> float:
        """Average cores used by other processes since `mark`."""
        dt = time.monotonic() - self._t
        if dt <= 0:
            return 0.0
        foreign = (_busy_seconds(self.cpus) - self._busy) - (self._ours() - self._own)
        return max(0.0, foreign / dt)

    def was_loaded(self) -> bool:
        return self.enabled and self.foreign_cores() > self.max_foreign_cores

    def wait_until_quiet(self, warn) -> None:
        """Block until other processes use less than the threshold over `quiet_s`; `warn(msg)` once."""
        if not self.enabled:
            return
        t0 = time.monotonic()
        warned = False
        while True:
            self.mark()
            time.sleep(self.quiet_s)
            used = self.foreign_cores()
            if used <= self.max_foreign_cores:
                break
            if not warned:
                load1 = os.getloadavg()[0]
                warn(f"machine is loaded (other processes use {used:.1f} cores, load average {load1:.2f}): "
                     "pausing measurement until it is quiet")
                warned = True
        if warned:
            self.pauses += 1
            self.paused_s += time.monotonic() - t0
