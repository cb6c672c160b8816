"""The measuring interface: a runner builds one program for a target and times it on its device.

Implementations: `worker.IsolatedRunner` (this machine, in a child process that may crash or hang) and
`rpc.RPCRunner` (a device behind a TVM RPC tracker). Results are dicts with `status` in
perfcast.data.schema.STATUSES, `error`, `build_s`, and on success the fields of `measure.time_function`.
"""

from __future__ import annotations

from typing import Protocol


class Runner(Protocol):
    restarts: int

    def run(self, mod_json: str, target_json: str) -> dict:
        """Build `tvm.ir.save_json(IRModule)` for the target and time it; never raises for a bad program."""

    def close(self) -> None:
        """Release the worker process or remote session."""
