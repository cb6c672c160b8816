"""Measure programs on a device behind a TVM RPC tracker.

Programs are built here (`tvm.build` for the device's target, host llvm for non-CPU targets), exported to a shared
library, uploaded to a server requested from the tracker under the device's `rpc_key`, and timed there with the
same protocol as local measurements (`measure.time_function` around the remote `time_evaluator`).

One session serves many programs. TVM sessions die at their `session_timeout` (the server kills its session
process), which is also what stops a hanging kernel: a session is renewed before a program once it is older than
`rotate_s`, and requested with `session_timeout = rotate_s + run_timeout_s + margin`, so every program gets at
least `run_timeout_s` before the server kills it. A failed remote call drops the session (a restart); the next
program requests a new one. Remote objects are freed and garbage-collected before a session is dropped: a remote
object left alive holds the session open and the next request waits for the server until it times out.

Errors are results (status build_error / run_error / timeout); a tracker that cannot be reached at all, or one
with no server registered under the key, raises PerfcastError. The server runs kernels with its own thread pool:
start it with TVM_NUM_THREADS=<threads of the device spec>.
Limitations: the build runs in this process (a build that crashes LLVM takes the caller down; no build timeout);
cross-compiling the shared library for another host (e.g. aarch64) needs a cross compiler and is not set up here.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import tempfile
import time

from ..devices.base import DeviceSpec
from ..errors import PerfcastError
from .measure import MeasureConfig, make_args, time_function
from .worker import _short

TRACKER_FIX = "python -m tvm.exec.rpc_tracker --host 127.0.0.1 --port 9190"


def tracker_address(spec: DeviceSpec) -> tuple[str, int]:
    """HOST, PORT of the device's tracker: spec.rpc_tracker, else $TVM_TRACKER_HOST:$TVM_TRACKER_PORT, else
    127.0.0.1:9190."""
    addr = spec.rpc_tracker or (f"{os.environ['TVM_TRACKER_HOST']}:{os.environ.get('TVM_TRACKER_PORT', '9190')}"
                                if os.environ.get("TVM_TRACKER_HOST") else "127.0.0.1:9190")
    host, _, port = addr.rpartition(":")
    try:
        return host, int(port)
    except ValueError:
        raise PerfcastError(f"RPC tracker address {addr!r} is not HOST:PORT; give the device as "
                            f"rpc:key=KEY,tracker=HOST:PORT") from None


class RPCRunner:
    """Builds programs locally and times them on an RPC server requested from a tracker."""

    slots = 1  # one program at a time: the build happens here, the timing on the remote device
    protocol = 1  # one timing round (perfcast.data.schema.PROTOCOLS)

    def __init__(self, spec: DeviceSpec, config: MeasureConfig | None = None, rotate_s: float = 60.0,
                 server_wait_s: float = 20.0):
        if not spec.rpc_key:
            raise PerfcastError(f"device {spec.device_id!r} has no RPC key; use rpc:key=KEY,tracker=HOST:PORT")
        self.spec = spec
        self.config = config or MeasureConfig()
        self.key = spec.rpc_key
        self.host, self.port = tracker_address(spec)
        self.rotate_s = rotate_s
        self.server_wait_s = server_wait_s
        self.session_timeout_s = rotate_s + self.config.run_timeout_s + 30.0
        self.restarts = 0
        self.sessions = 0  # sessions requested (renewals included)
        self._tmp = tempfile.TemporaryDirectory(prefix="perfcast-rpc-")
        self._count = 0
        self._remote = None
        self._dev = None
        self._session_t0 = 0.0
        self._args_sig: str | None = None
        self._args = None
        self._check_tracker()

    # ---- session -----------------------------------------------------------------------------------------
    def _where(self) -> str:
        return f"{self.host}:{self.port}"

    def _check_tracker(self) -> None:
        try:
            socket.create_connection((self.host, self.port), timeout=5).close()
        except OSError as e:
            raise PerfcastError(f"cannot reach the RPC tracker at {self._where()} ({e.strerror or e}); start one "
                                f"with `{TRACKER_FIX}` (and a server: python -m tvm.exec.rpc_server --tracker "
                                f"{self._where()} --key {self.key})") from None

    def _wait_for_server(self, tracker) -> None:
        """The tracker queues a request for a key no server has forever: check that one is registered first."""
        deadline = time.monotonic() + self.server_wait_s
        while True:
            summary = tracker.summary()
            keys = {str(s.get("key", "")).split(":")[1] if ":" in str(s.get("key", "")) else str(s.get("key"))
                    for s in summary.get("server_info", [])}
            queue = summary.get("queue_info", {}).get(self.key, {})
            if self.key in keys or queue.get("free", 0) > 0:
                return
            if time.monotonic() > deadline:
                raise PerfcastError(
                    f"no RPC server with key {self.key!r} is registered at the tracker {self._where()} "
                    f"(servers: {', '.join(sorted(keys)) or 'none'}); start one with `python -m tvm.exec.rpc_server "
                    f"--tracker {self._where()} --key {self.key}`")
            time.sleep(0.5)

    def _session(self):
        if self._remote is not None and time.monotonic() - self._session_t0 > self.rotate_s:
            self._drop()
        if self._remote is None:
            from tvm import rpc

            self._check_tracker()
            try:
                tracker = rpc.connect_tracker(self.host, self.port)
            except Exception as e:  # noqa: BLE001
                raise PerfcastError(f"{self._where()} is not a TVM RPC tracker ({_short(e, 200)}); start one with "
                                    f"`{TRACKER_FIX}`") from None
            try:
                self._wait_for_server(tracker)
                self._remote = tracker.request(self.key, session_timeout=self.session_timeout_s)
            finally:
                tracker.close()
            self._session_t0 = time.monotonic()
            self.sessions += 1
        return self._remote

    def _drop(self) -> None:
        """Free every remote object, then the session itself."""
        self._args, self._args_sig, self._dev = None, None, None
        self._remote = None
        gc.collect()

    def close(self) -> None:
        self._drop()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- work --------------------------------------------------------------------------------------------
    def _device(self, remote, target):
        kind = target.kind.name
        return remote.cpu(0) if kind in ("llvm", "c") else remote.device(kind, 0)

    def start(self) -> None:
        """Nothing to start ahead: the session opens on the first program."""

    def run_batch(self, mod_jsons: list[str], target_json: str, quiet=None) -> list[dict]:
        """`run` for each program (the remote device's load is not this machine's: `quiet` is not used)."""
        return [self.run(mj, target_json) for mj in mod_jsons]

    def run(self, mod_json: str, target_json: str) -> dict:
        """Build and time one program; always returns a result dict with a status (see module docstring)."""
        import tvm

        from .._tvm.util import arg_shapes, main_func

        t0 = time.perf_counter()
        try:
            mod = tvm.ir.load_json(mod_json)
            tdict = json.loads(target_json)
            target = tvm.target.Target(tdict) if tdict.get("kind") in ("llvm", "c") \
                else tvm.target.Target(tdict, host={"kind": "llvm"})
            lib = tvm.build(mod, target=target)
            self._count += 1
            name = f"perfcast_{os.getpid()}_{self._count}.so"  # unique: dlopen caches by path
            path = os.path.join(self._tmp.name, name)
            lib.export_library(path)
            shapes = arg_shapes(main_func(mod))
        except Exception as e:  # noqa: BLE001 - a program that does not build is data
            return {"status": "build_error", "error": _short(e), "build_s": time.perf_counter() - t0}
        finally:
            lib = None  # noqa: F841
        build_s = time.perf_counter() - t0
        try:
            for attempt in (0, 1):
                out = self._run_remote(path, name, shapes, target, build_s, retry_ok=attempt == 0)
                if out is not None:
                    return out
            return {"status": "run_error", "error": "RPC session failed twice before the program ran",
                    "build_s": build_s}
        finally:
            try:
                os.remove(path)
            except OSError:
                pass

    def _run_remote(self, path: str, name: str, shapes, target, build_s: float, retry_ok: bool) -> dict | None:
        """One attempt; None means the session broke before the program ran (worth one retry)."""
        remote = self._session()  # PerfcastError when the tracker / server is gone
        stage = "upload"
        rmod = f = None
        try:
            remote.upload(path)
            rmod = remote.load_module(name)
            try:
                remote.remove(name)
            except Exception:  # noqa: BLE001 - cleanup only
                pass
            stage = "args"
            if self._dev is None:
                self._dev = self._device(remote, target)
            dev = self._dev
            sig = json.dumps(shapes)
            if sig != self._args_sig:
                self._args, self._args_sig = None, None
                self._args = make_args(shapes, dev)
                self._args_sig = sig
            args = self._args
            stage = "run"
            f = rmod["main"]
            res = time_function(
                lambda n, r: list(rmod.time_evaluator("main", dev, number=n, repeat=r)(*args).results),
                lambda: f(*args), self.config)
            return {"status": "ok", "error": "", "build_s": build_s, **res}
        except Exception as e:  # noqa: BLE001 - remote failures are results
            age = time.monotonic() - self._session_t0
            expired = age >= 0.95 * self.session_timeout_s
            rmod = f = None
            self._drop()
            self.restarts += 1
            if stage == "upload" and retry_ok and not expired:
                return None
            if expired:
                return {"status": "timeout", "build_s": build_s,
                        "error": f"RPC session expired after {age:.0f} s while running (run_timeout_s "
                                 f"{self.config.run_timeout_s:.0f} s): {_short(e, 300)}"}
            return {"status": "run_error", "error": f"{stage}: {_short(e)}", "build_s": build_s}
        finally:
            rmod = f = None  # noqa: F841
