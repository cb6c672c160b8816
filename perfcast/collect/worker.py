"""Measure programs in isolated worker processes, so that a crashing or hanging kernel cannot take the collector
down, and build several programs at once without ever timing one while anything else runs.

A worker is a long-lived child (`python -m perfcast.collect.worker R W`) that reads requests from one pipe and
answers on another (multiprocessing Connection framing; stdout/stderr stay free for TVM's own output). A program
goes through it in two requests: `build` (TIR -> LLVM -> machine code, reported as `built`, so a crash is
attributed to the right phase) and `measure` (the timing protocol of `measure.py`). A worker that dies or exceeds
its timeout is killed and restarted; its stderr tail becomes the record's error text.

`IsolatedRunner(threads, workers=k)` keeps k workers: a batch of up to k programs is built in parallel (building
is single-threaded; on this 2-core machine it is ~75 % of a program's cost), then the programs are timed one after
another while the other workers wait idle on their pipes, so every measurement sees a quiet machine.
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
from typing import Callable

from .measure import MeasureConfig, make_args, time_function


# ---- child side ----------------------------------------------------------------------------------------------
def _serve(rfd: int, wfd: int) -> None:
    import tvm

    from .._tvm.util import arg_shapes, main_func

    conn_in, conn_out = Connection(rfd, writable=False), Connection(wfd, readable=False)
    dev = tvm.cpu(0)
    cached_sig, cached_args = None, None
    lib = f = mod = None
    build_s = 0.0
    send = lambda obj: conn_out.send_bytes(json.dumps(obj).encode())  # noqa: E731
    send({"kind": "ready", "pid": os.getpid()})
    while True:
        try:
            req = json.loads(conn_in.recv_bytes())
        except EOFError:
            return
        if req["op"] == "build":
            lib = f = None
            t0 = time.perf_counter()
            try:
                mod = tvm.ir.load_json(req["mod_json"])
                lib = tvm.build(mod, target=tvm.target.Target(json.loads(req["target_json"])))
                f = lib["main"]  # LLVM's JIT emits the machine code here: part of building, not of timing
            except Exception as e:  # noqa: BLE001 - any TVM build failure is data, not a crash
                lib = f = None
                send({"kind": "result", "status": "build_error", "error": _short(e),
                      "build_s": time.perf_counter() - t0})
                continue
            build_s = time.perf_counter() - t0
            send({"kind": "built", "build_s": build_s})
            continue
        # op == "measure": the program built last
        try:
            if f is None:
                raise RuntimeError("measure requested before a successful build")
            shapes = arg_shapes(main_func(mod))
            sig = json.dumps(shapes)
            if sig != cached_sig:
                cached_sig, cached_args = sig, None
                cached_args = make_args(shapes, dev)
            args = cached_args
            res = time_function(lambda n, r: lib.time_evaluator("main", dev, number=n, repeat=r)(*args).results,
                                lambda: f(*args), MeasureConfig(**req["config"]))
            out = {"kind": "result", "status": "ok", "error": "", "build_s": build_s, **res}
        except Exception as e:  # noqa: BLE001
            out = {"kind": "result", "status": "run_error", "error": _short(e), "build_s": build_s}
        if req.get("settle"):
            _settle()
        send(out)


def _settle(window_s: float = 0.005, max_s: float = 2.0) -> None:
    """Return once this process is idle: after a parallel kernel TVM's pool threads spin (busy-wait for the next
    job, TVM_THREAD_POOL_SPIN_COUNT) before they sleep, and another worker must not start timing meanwhile."""
    end = time.perf_counter() + max_s
    while time.perf_counter() < end:
        c0 = time.process_time()  # CPU time of every thread of this process
        time.sleep(window_s)
        if time.process_time() - c0 < 0.2 * window_s:
            return


def _short(e: BaseException, limit: int = 2000) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # TVM errors put the message last, after a long backtrace
    msg = " | ".join(lines[-3:]) if len(lines) > 3 else " | ".join(lines)
    return msg[:limit]


# ---- parent side ---------------------------------------------------------------------------------------------
class _Worker:
    """One child process; `restarts` counts kills after a crash or a timeout."""

    def __init__(self, threads: int, config: MeasureConfig):
        self.threads, self.config = threads, config
        self._proc: subprocess.Popen | None = None
        self.restarts = 0

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting for it (`ready` is read by `await_ready`)."""
        r1, w1 = os.pipe()  # parent -> child
        r2, w2 = os.pipe()  # child -> parent
        env = dict(os.environ, TVM_NUM_THREADS=str(self.threads), OMP_NUM_THREADS="1")
        if self.config.spin_count is not None:  # how long idle pool threads spin before they sleep
            env["TVM_THREAD_POOL_SPIN_COUNT"] = str(self.config.spin_count)
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

    def await_ready(self) -> None:
        msg = self._read(timeout=120)
        if msg is None or msg.get("kind") != "ready":
            raise RuntimeError(f"measurement worker failed to start: {self._stderr_tail()}")

    def ensure(self) -> None:
        if not self.alive():
            self.spawn()
            self.await_ready()

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

    def _read(self, timeout: float) -> dict | None:
        try:
            if not self._recv.poll(max(timeout, 0.0)):
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

    def _request(self, op: str, **fields) -> None:
        if op == "build":  # the stderr of one program: its build and its run
            self._stderr.seek(0)
            self._stderr.truncate()
        self._send.send_bytes(json.dumps({"op": op, **fields}).encode())

    def _fail(self, status: str, error: str, build_s: float) -> dict:
        self._kill()
        self.restarts += 1
        return {"status": status, "error": error, "build_s": build_s}

    # a program: submit_build, then wait_built (None: built), then measure
    def submit_build(self, mod_json: str, target_json: str) -> None:
        self.ensure()
        self._request("build", mod_json=mod_json, target_json=target_json)
        self._t0 = time.perf_counter()
        self._build_s = 0.0

    def wait_built(self) -> dict | None:
        """None when the program built; otherwise its final result (build error, timeout, crash)."""
        cfg = self.config
        msg = self._read(cfg.build_timeout_s - (time.perf_counter() - self._t0))
        if msg is None:
            return self._fail("timeout", f"build exceeded {cfg.build_timeout_s:.0f} s",
                              time.perf_counter() - self._t0)
        if msg["kind"] == "died":
            return self._fail("build_error", f"worker died while building: {self._stderr_tail()}",
                              time.perf_counter() - self._t0)
        if msg["kind"] == "result":
            return msg
        self._build_s = msg["build_s"]
        err = self._stderr_tail()
        if "JIT session error" in err:  # LLVM's JIT only prints unresolved symbols; calling the kernel would crash
            return {"status": "build_error", "error": err, "build_s": self._build_s}
        return None

    def measure(self, settle: bool = False) -> dict:
        """Time the built program; with `settle` the answer waits until the worker's threads are idle."""
        cfg = self.config
        self._request("measure", settle=settle, config=asdict(cfg))
        msg = self._read(cfg.run_timeout_s)
        if msg is None:
            return self._fail("timeout", f"run exceeded {cfg.run_timeout_s:.0f} s", self._build_s)
        if msg["kind"] == "died":
            err = self._stderr_tail()
            code = self._proc.poll() if self._proc else None
            return self._fail("run_error", f"kernel crashed the worker (exit {code}): {err}", self._build_s)
        return msg


class IsolatedRunner:
    """Builds programs in `workers` child processes at once and times them one at a time with `threads` runtime
    threads (see the module docstring)."""

    def __init__(self, threads: int, config: MeasureConfig | None = None, workers: int = 1):
        if workers < 1:
            raise ValueError(f"workers={workers}: need at least one worker process")
        self.threads = threads
        self.config = config or MeasureConfig()
        self.workers = workers
        self._pool = [_Worker(threads, self.config) for _ in range(workers)]

    @property
    def slots(self) -> int:
        """How many programs `run_batch` builds at once."""
        return self.workers

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self._pool)

    def start(self) -> None:
        """Start every worker now (in parallel) instead of on first use."""
        todo = [w for w in self._pool if not w.alive()]
        for w in todo:
            w.spawn()
        for w in todo:
            w.await_ready()

    def close(self) -> None:
        for w in self._pool:
            w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, mod_json: str, target_json: str) -> dict:
        """Build and time one program; always returns a result dict with a status."""
        return self.run_batch([mod_json], target_json)[0]

    def run_batch(self, mod_jsons: list[str], target_json: str,
                  quiet: Callable[[Callable[[], list[dict]]], list[dict]] | None = None) -> list[dict]:
        """Build up to `slots` programs in parallel, then time them one by one; results in input order.

        `quiet(measure_all)` wraps the timings (the collector's load check: it calls `measure_all()` again when
        other processes loaded the CPU meanwhile, which times again the programs that ran); builds are never
        timed, so they need no quiet machine.
        """
        if len(mod_jsons) > self.slots:
            raise ValueError(f"{len(mod_jsons)} programs for {self.slots} workers; pass at most `slots` at once")
        self.start()
        pool = self._pool[: len(mod_jsons)]
        for w, mj in zip(pool, mod_jsons):
            w.submit_build(mj, target_json)
        out = [w.wait_built() for w in pool]
        # the next timing (in another worker) must not overlap this worker's spinning pool threads
        settle = self.workers > 1
        timed: dict[int, dict] = {}

        def measure_all() -> list[dict]:
            for i, w in enumerate(pool):
                if out[i] is None and (i not in timed or timed[i]["status"] == "ok"):  # a crash is final
                    timed[i] = w.measure(settle)
            return list(timed.values())

        if any(r is None for r in out):
            quiet(measure_all) if quiet is not None else measure_all()
        return [timed[i] if r is None else r for i, r in enumerate(out)]

if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
