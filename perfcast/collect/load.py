"""Is something else using the CPU? A loaded CPU gives false ground truth, so the collector checks after every
measurement how much CPU time processes other than itself and its worker used meanwhile (from /proc/stat,
steal time included); if it was more than `max_foreign_cores`, the measurement is discarded, the collector warns
(with the load average) and pauses until the machine is quiet, then measures the program again.
"""

from __future__ import annotations

import os
import time

import psutil


def _busy_seconds() -> float:
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


class LoadMonitor:
    def __init__(self, max_foreign_cores: float = 0.3, quiet_s: float = 3.0, enabled: bool = True):
        self.max_foreign_cores = max_foreign_cores
        self.quiet_s = quiet_s
        self.enabled = enabled
        self._me = psutil.Process()
        self.pauses = 0
        self.paused_s = 0.0
        self.mark(())

    def _ours(self, pids) -> float:
        total = 0.0
        for proc in [self._me, *[psutil.Process(p) for p in pids if p and psutil.pid_exists(p)]]:
            try:
                ct = proc.cpu_times()
                total += ct.user + ct.system
            except psutil.NoSuchProcess:
                pass
        return total

    def mark(self, pids) -> None:
        """Start a measurement window (pids: the worker processes whose CPU counts as ours)."""
        self._pids = tuple(pids)
        self._t = time.monotonic()
        self._busy = _busy_seconds()
        self._own = self._ours(self._pids)

    def foreign_cores(self) -> float:
        """Average cores used by other processes since `mark`."""
        dt = time.monotonic() - self._t
        if dt <= 0:
            return 0.0
        foreign = (_busy_seconds() - self._busy) - (self._ours(self._pids) - self._own)
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
            self.mark(self._pids)
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
