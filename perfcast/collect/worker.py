"""Measure programs in an isolated worker process, so that a crashing or hanging kernel cannot take the
collector down.

The worker is a long-lived child (`python -m perfcast.collect.worker R W`) that reads requests from one pipe and
answers on another (multiprocessing Connection framing; stdout/stderr stay free for TVM's own output). It reports
`built` before running, so a crash is attributed to the right phase. A worker that dies or exceeds its timeout is
killed and restarted; its stderr tail becomes the record's error text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from multiprocessing.connection import Connection

from .measure import MeasureConfig, make_args, time_function


# ---- child side ----------------------------------------------------------------------------------------------
def _serve(rfd: int, wfd: int) -> None:
    import tvm

    from .._tvm.util import arg_shapes, main_func

    conn_in, conn_out = Connection(rfd, writable=False), Connection(wfd, readable=False)
    dev = tvm.cpu(0)
    cached_sig, cached_args = None, None
    conn_out.send_bytes(json.dumps({"kind": "ready", "pid": os.getpid()}).encode())
    while True:
        try:
            req = json.loads(conn_in.recv_bytes())
        except EOFError:
            return
        cfg = MeasureConfig(**req["config"])
        t0 = time.perf_counter()
        try:
            mod = tvm.ir.load_json(req["mod_json"])
            lib = tvm.build(mod, target=tvm.target.Target(json.loads(req["target_json"])))
        except Exception as e:  # noqa: BLE001 - any TVM build failure is data, not a crash
            conn_out.send_bytes(json.dumps({"kind": "result", "status": "build_error",
                                            "error": _short(e), "build_s": time.perf_counter() - t0}).encode())
            continue
        build_s = time.perf_counter() - t0
        conn_out.send_bytes(json.dumps({"kind": "built", "build_s": build_s}).encode())
        try:
            shapes = arg_shapes(main_func(mod))
            sig = json.dumps(shapes)
            if sig != cached_sig:
                cached_sig, cached_args = sig, None
                cached_args = make_args(shapes, dev)
            args = cached_args
            f = lib["main"]
            res = time_function(lambda n, r: lib.time_evaluator("main", dev, number=n, repeat=r)(*args).results,
                                lambda: f(*args), cfg)
            out = {"kind": "result", "status": "ok", "error": "", "build_s": build_s, **res}
        except Exception as e:  # noqa: BLE001
            out = {"kind": "result", "status": "run_error", "error": _short(e), "build_s": build_s}
        conn_out.send_bytes(json.dumps(out).encode())


def _short(e: BaseException, limit: int = 2000) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # TVM errors put the message last, after a long backtrace
    msg = " | ".join(lines[-3:]) if len(lines) > 3 else " | ".join(lines)
    return msg[:limit]


# ---- parent side ---------------------------------------------------------------------------------------------
class IsolatedRunner:
    """Builds and times programs in a child process with `threads` runtime threads."""

    def __init__(self, threads: int, config: MeasureConfig | None = None):
        self.threads = threads
        self.config = config or MeasureConfig()
        self._proc: subprocess.Popen | None = None
        self.restarts = 0

    # lifecycle
    def _start(self) -> None:
        r1, w1 = os.pipe()  # parent -> child
        r2, w2 = os.pipe()  # child -> parent
        env = dict(os.environ, TVM_NUM_THREADS=str(self.threads), OMP_NUM_THREADS="1")
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "perfcast.collect.worker", str(r1), str(w2)],
            pass_fds=(r1, w2), env=env, stdout=subprocess.DEVNULL, stderr=self._stderr,
            start_new_session=True,
        )
        os.close(r1)
        os.close(w2)
        self._send = Connection(w1, readable=False)
        self._recv = Connection(r2, writable=False)
        msg = self._read(timeout=120)
        if msg is None or msg.get("kind") != "ready":
            raise RuntimeError(f"measurement worker failed to start: {self._stderr_tail()}")

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._send.close()
                self._proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                self._kill()
            self._proc = None

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, 9)
            except ProcessLookupError:
                pass
            self._proc.wait()
            self._proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read(self, timeout: float) -> dict | None:
        try:
            if not self._recv.poll(timeout):
                return None
            return json.loads(self._recv.recv_bytes())
        except (EOFError, OSError):
            return {"kind": "died"}

    def _stderr_tail(self, n: int = 600) -> str:
        try:
            self._stderr.seek(0, 2)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 4000))
            text = self._stderr.read().decode(errors="replace")
            lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("  ")]
            return " | ".join(lines[-4:])[-n:]
        except Exception:  # noqa: BLE001
            return ""

    # work
    def run(self, mod_json: str, target_json: str) -> dict:
        """Build and time one program; always returns a result dict with a status."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        cfg = self.config
        self._stderr.seek(0)
        self._stderr.truncate()
        self._send.send_bytes(json.dumps({"mod_json": mod_json, "target_json": target_json,
                                          "config": asdict(cfg)}).encode())
        t0 = time.perf_counter()
        msg = self._read(cfg.build_timeout_s)
        if msg is None:
            self._kill()
            self.restarts += 1
            return {"status": "timeout", "error": f"build exceeded {cfg.build_timeout_s:.0f} s",
                    "build_s": time.perf_counter() - t0}
        if msg["kind"] == "died":
            err = self._stderr_tail()
            self._kill()
            self.restarts += 1
            return {"status": "build_error", "error": f"worker died while building: {err}",
                    "build_s": time.perf_counter() - t0}
        if msg["kind"] == "result":
            return msg
        build_s = msg["build_s"]
        msg = self._read(cfg.run_timeout_s)
        if msg is None:
            self._kill()
            self.restarts += 1
            return {"status": "timeout", "error": f"run exceeded {cfg.run_timeout_s:.0f} s", "build_s": build_s}
        if msg["kind"] == "died":
            err = self._stderr_tail()
            code = self._proc.poll() if self._proc else None
            self._kill()
            self.restarts += 1
            return {"status": "run_error", "error": f"kernel crashed the worker (exit {code}): {err}",
                    "build_s": build_s}
        return msg


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
