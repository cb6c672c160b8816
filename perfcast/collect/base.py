"""The measuring interface: a runner builds one program for a target and times it on its device.

Implementations: `worker.IsolatedRunner` (this machine, in a child process that may crash or hang) and
`rpc.RPCRunner` (a device behind a TVM RPC tracker). Results are dicts with `status` in
perfcast.data.schema.STATUSES, `error`, `build_s`, and on success the fields of `measure.time_function`.
"""

from __future__ import annotations

from typing import Callable, Protocol


class Runner(Protocol):
    restarts: int
    slots: int  # how many programs one `run_batch` call takes
    protocol: int  # how it times (a key of perfcast.data.schema.PROTOCOLS); recorded with every measurement

    def start(self) -> None:
        """Get ready to measure (start worker processes) before the first program."""

    def run(self, mod_json: str, target_json: str) -> dict:
        """Build `tvm.ir.save_json(IRModule)` for the target and time it; never raises for a bad program."""

    def run_batch(self, mod_jsons: list[str], target_json: str,
                  quiet: Callable[[Callable[[], list[dict]]], list[dict]] | None = None) -> list[dict]:
        """Build and time up to `slots` programs (results in order); `quiet(measure_all)` wraps the timings."""

    def close(self) -> None:
        """Release the worker process or remote session."""
