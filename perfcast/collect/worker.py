"""Measure programs in isolated worker processes, so that a crashing or hanging kernel cannot take the collector
down, and build several programs at once without ever timing one while anything else runs.

A worker is a long-lived child (`python -m perfcast.collect.worker R W`) that reads requests from one pipe and
answers on another (multiprocessing Connection framing; stdout/stderr stay free for TVM's own output). A program
goes through it in two requests: `build` (TIR -> LLVM -> machine code, reported as `built`, so a crash is
attributed to the right phase) and `measure` (the timing protocol of `measure.py`). A worker that dies or exceeds
its timeout is killed and restarted; its stderr tail becomes the record's error text.

`IsolatedRunner(threads, workers=k, per_worker=m)` keeps k workers, each holding up to m built programs: a batch of
up to k*m programs is built k at a time, each worker taking the next program as soon as its build is done (building
is single-threaded; on this 2-core machine it is ~75 % of a program's cost, and one program builds up to 3x longer
than another of the same task, so workers that waited for each other's builds lost a third of it), then timed one
after another while the other workers wait idle on their pipes, so every measurement sees a quiet machine. Timing
goes in `MeasureConfig.rounds` rounds over the batch: a program's rounds are at least `round_gap_s` apart, its label
is the lowest round median (measurement protocol 2, `perfcast.data.schema.PROTOCOLS`). On a shared cloud host a
program runs up to 2x slower for seconds at a time while neighbours load the machine (no steal time shows it);
the lowest of three rounds a second apart was meant to be the program's own speed, but such spells last 2-6 s (a
quarter of a minute on one core of the znver5 host, 2026-12-01), so since then the host gate
(`perfcast.collect.sentinel`) also times a fixed kernel around every round and times a round again while the host
is slow (`python bench/timing_repeatability.py` measures the agreement of two passes, with and without it).
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

from ..data.schema import MEASURE_PROTOCOL
from .affinity import LauncherPin
from .measure import MeasureConfig, make_args
from .sentinel import Sentinel, baseline_key, gate_for, gated_round, sentinel_target


# ---- child side ----------------------------------------------------------------------------------------------
def host_sentinel(cache: dict, target_json: str, threads: int, dev):
    """The host sentinel for programs built for `target_json`, from `cache` or built into it (None if it cannot be
    built: no gate rather than no measurement). Keyed by `sentinel_target`, so every mcpu of this host shares one."""
    key = sentinel_target(target_json)
    if key not in cache:
        try:
            cache[key] = Sentinel(target_json, threads, dev)
        except Exception:  # noqa: BLE001 - no gate for this target rather than no measurement
            cache[key] = None
    return cache[key]


def _serve(rfd: int, wfd: int) -> None:
    import tvm

    from .._tvm.util import arg_shapes, main_func

    conn_in, conn_out = Connection(rfd, writable=False), Connection(wfd, readable=False)
    dev = tvm.cpu(0)
    args_by_sig: dict[str, list] = {}  # input arrays by argument signature (programs of one task share them)
    progs: dict[int, tuple] = {}  # slot id -> (lib, main function, module, build seconds)
    sentinels: dict[str, object] = {}  # host sentinels by the sentinel's target (`host_sentinel`)
    target_of: dict[int, str] = {}  # slot id -> the target JSON its program was built for
    threads = int(os.environ.get("TVM_NUM_THREADS", "1"))
    ran: set[int] = set()  # slots whose program ran in this process (a later round may skip the burn-in)
    send = lambda obj: conn_out.send_bytes(json.dumps(obj).encode())  # noqa: E731
    send({"kind": "ready", "pid": os.getpid()})
    while True:
        try:
            req = json.loads(conn_in.recv_bytes())
        except EOFError:
            return
        slot = int(req.get("slot", 0))
        if req["op"] == "export":  # build to a shared library at req["path"] (meta-schedule's builder contract)
            t0 = time.perf_counter()
            try:
                mod = tvm.ir.load_json(req["mod_json"])
                tvm.build(mod, target=tvm.target.Target(json.loads(req["target_json"]))).export_library(req["path"])
                send({"kind": "result", "status": "ok", "error": "", "build_s": time.perf_counter() - t0})
            except Exception as e:  # noqa: BLE001 - a failed candidate is a result, not a crash
                send({"kind": "result", "status": "build_error", "error": _short(e),
                      "build_s": time.perf_counter() - t0})
            continue
        if req["op"] == "build":
            progs.pop(slot, None)
            t0 = time.perf_counter()
            try:
                mod = tvm.ir.load_json(req["mod_json"])
                lib = tvm.build(mod, target=tvm.target.Target(json.loads(req["target_json"])))
                f = lib["main"]  # LLVM's JIT emits the machine code here: part of building, not of timing
            except Exception as e:  # noqa: BLE001 - any TVM build failure is data, not a crash
                send({"kind": "result", "status": "build_error", "error": _short(e),
                      "build_s": time.perf_counter() - t0})
                continue
            build_s = time.perf_counter() - t0
            progs[slot] = (lib, f, mod, build_s)
            target_of[slot] = req["target_json"]
            ran.discard(slot)
            send({"kind": "built", "build_s": build_s})
            continue
        # op == "measure": the program built last in this slot
        build_s = progs[slot][3] if slot in progs else 0.0
        try:
            if slot not in progs:
                raise RuntimeError(f"measure requested for slot {slot} before a successful build")
            lib, f, mod, _ = progs[slot]
            shapes = arg_shapes(main_func(mod))
            sig = json.dumps(shapes)
            if sig not in args_by_sig:
                if len(args_by_sig) >= 4:
                    args_by_sig.clear()
                args_by_sig[sig] = make_args(shapes, dev)
            args = args_by_sig[sig]
            cfg = MeasureConfig(**req["config"])
            sentinel = None
            if cfg.host_gate is not None:
                sentinel = host_sentinel(sentinels, target_of[slot], threads, dev)
            with LauncherPin() as pin:  # off the pool threads' cores while timing (see affinity.py)
                res = gated_round(lambda n, r: lib.time_evaluator("main", dev, number=n, repeat=r)(*args).results,
                                  lambda: f(*args), cfg, pin, sentinel,
                                  plan=req.get("plan") if slot in ran else None)  # first run: burn in
            ran.add(slot)
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
        self.built: dict[int, float] = {}  # slot -> build seconds of the program this process holds there

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
        self.built = {}
        if self._proc is not None:
            try:
                self._send.close()
                self._proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                self._kill()
            self._proc = None

    def _kill(self) -> None:
        self.built = {}  # a new process holds no program
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
        return {"kind": "result", "status": status, "error": error, "build_s": build_s}

    # a program: submit_build, then wait_built (None: built), then measure (once per timing round)
    def submit_build(self, mod_json: str, target_json: str, slot: int = 0) -> None:
        self.ensure()
        self.built.pop(slot, None)
        self._request("build", mod_json=mod_json, target_json=target_json, slot=slot)
        self._t0 = time.perf_counter()
        self._slot = slot

    @property
    def pipe(self) -> Connection:
        """The connection the worker answers on (for `multiprocessing.connection.wait` over several workers)."""
        return self._recv

    def build_deadline(self) -> float:
        """`time.perf_counter()` by which the submitted build must have answered."""
        return self._t0 + self.config.build_timeout_s

    def wait_built(self) -> dict | None:
        """None when the program built; otherwise its final result (build error, timeout, crash)."""
        msg = self._await_build(self._t0)
        if msg["kind"] == "result":  # a build error, or the worker timed out or died
            return msg
        err = self._stderr_tail()
        if "JIT session error" in err:  # LLVM's JIT only prints unresolved symbols; calling the kernel would crash
            return {"status": "build_error", "error": err, "build_s": msg["build_s"]}
        self.built[self._slot] = msg["build_s"]
        return None

    def export(self, mod_json: str, target_json: str, path: str) -> dict:
        """Build a program to a shared library at `path`: {"status": "ok" | "build_error" | "timeout", "error",
        "build_s"}; a build that crashes the worker or exceeds `build_timeout_s` kills it (the next call starts a
        new one)."""
        self.ensure()
        t0 = time.perf_counter()
        self._request("export", mod_json=mod_json, target_json=target_json, path=path)
        return self._await_build(t0)

    def _await_build(self, t0: float) -> dict:
        """The worker's answer to the build requested at `t0`, or the failed result (the worker killed) when it
        does not answer within `build_timeout_s` of t0 or dies meanwhile."""
        timeout_s = self.config.build_timeout_s
        msg = self._read(timeout_s - (time.perf_counter() - t0))
        if msg is None:
            return self._fail("timeout", f"build exceeded {timeout_s:.0f} s", time.perf_counter() - t0)
        if msg["kind"] == "died":
            return self._fail("build_error", f"worker died while building: {self._stderr_tail()}",
                              time.perf_counter() - t0)
        return msg

    def measure(self, slot: int = 0, settle: bool = False, plan: list | None = None) -> dict:
        """Time the program built in `slot` (`plan`: the inner-loop count and repeats of its earlier round); with
        `settle` the answer waits until the worker's threads are idle."""
        cfg = self.config
        build_s = self.built.get(slot, 0.0)
        self._request("measure", slot=slot, settle=settle, config=asdict(cfg), plan=plan)
        msg = self._read(cfg.run_timeout_s)
        if msg is None:
            return self._fail("timeout", f"run exceeded {cfg.run_timeout_s:.0f} s", build_s)
        if msg["kind"] == "died":
            err = self._stderr_tail()
            code = self._proc.poll() if self._proc else None
            return self._fail("run_error", f"kernel crashed the worker (exit {code}): {err}", build_s)
        return msg


class IsolatedRunner:
    """Builds programs in `workers` child processes at once and times them one at a time with `threads` runtime
    threads, in timing rounds (see the module docstring)."""

    protocol = MEASURE_PROTOCOL

    def __init__(self, threads: int, config: MeasureConfig | None = None, workers: int = 1, per_worker: int = 12):
        if workers < 1 or per_worker < 1:
            raise ValueError(f"workers={workers}, per_worker={per_worker}: need at least one of each")
        self.threads = threads
        self.config = config or MeasureConfig()
        self.workers = workers
        self.per_worker = per_worker
        self._pool = [_Worker(threads, self.config) for _ in range(workers)]
        self.host = gate_for(self.config)  # the sentinel's baselines and what the gate cost
        self.on_host_slow: Callable[[str], None] | None = None  # told once when the gate first waits

    @property
    def slots(self) -> int:
        """How many programs `run_batch` takes at once."""
        return self.workers * self.per_worker

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
        self.host.save()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, mod_json: str, target_json: str) -> dict:
        """Build and time one program; always returns a result dict with a status."""
        return self.run_batch([mod_json], target_json)[0]

    def _build(self, items: list[int], mod_jsons: list[str], target_json: str, final: dict,
               place: dict[int, tuple[int, int]]) -> None:
        """Build programs `items`, each on the first worker to fall idle that has a free slot (build times differ
        up to 3x between programs of one task; a worker never waits for another's build), recording each built
        program's (worker, slot) in `place`; failures go to `final`."""
        from multiprocessing.connection import wait

        queue = list(items)
        for i in items:
            place.pop(i, None)
        busy: dict[int, int] = {}  # worker -> the program it is building

        def free_slot(w: int) -> int | None:
            used = {s for j, (v, s) in place.items() if v == w and j not in final}
            return next((s for s in range(self.per_worker) if s not in used), None)

        while queue or busy:
            for w in range(self.workers):
                if w not in busy and queue and (slot := free_slot(w)) is not None:
                    i = queue.pop(0)
                    place[i] = (w, slot)
                    self._pool[w].submit_build(mod_jsons[i], target_json, slot)
                    busy[w] = i
            # the first worker to answer (or to die: its pipe reads EOF), else the one whose build timed out first
            deadline = min(self._pool[w].build_deadline() for w in busy)
            ready = wait([self._pool[w].pipe for w in busy], timeout=max(0.0, deadline - time.perf_counter()))
            w = next((w for w in busy if self._pool[w].pipe in ready),
                     min(busy, key=lambda v: self._pool[v].build_deadline()))
            i = busy.pop(w)
            r = self._pool[w].wait_built()
            if r is not None:
                final[i] = r
                place.pop(i)

    def run_batch(self, mod_jsons: list[str], target_json: str,
                  quiet: Callable[[Callable[[], list[dict]]], list[dict]] | None = None) -> list[dict]:
        """Build up to `slots` programs, then time them in `config.rounds` rounds; results in input order.

        `quiet(measure_all)` wraps each round (the collector's load check: it calls `measure_all()` again when other
        processes loaded the CPU meanwhile, which times that round again); builds are never timed, so they need no
        quiet machine. A round times the programs worker by worker (switching workers needs the previous one's pool
        threads to settle). A crash restarts its worker, which loses the programs it held: they are built again and
        timed in the same round, so every program that runs gets all its rounds.
        """
        if len(mod_jsons) > self.slots:
            raise ValueError(f"{len(mod_jsons)} programs for {self.slots} slots; pass at most `slots` at once")
        self.start()
        final: dict[int, dict] = {}  # program -> its result, once it failed (or is done)
        place: dict[int, tuple[int, int]] = {}  # program -> (worker, slot) of its build
        self._build(list(range(len(mod_jsons))), mod_jsons, target_json, final, place)
        rounds: dict[int, list[dict]] = {i: [] for i in range(len(mod_jsons)) if i not in final}
        key = baseline_key(target_json, self.threads)  # whose sentinel baseline the gate judges against
        last: dict[int, float] = {}  # program -> when its previous round ended
        gap = self.config.round_gap_s

        def lost(i: int) -> bool:  # built, but its worker restarted since (a crash of another program)
            w, slot = place[i]
            return slot not in self._pool[w].built

        for _ in range(self.config.rounds):
            timed: dict[int, dict] = {}

            def measure_all() -> list[dict]:
                timed.clear()
                while True:
                    todo = sorted((i for i in rounds if i not in final and i not in timed), key=place.get)
                    gone = [i for i in todo if lost(i)]
                    if gone:
                        self._build(gone, mod_jsons, target_json, final, place)
                        todo = sorted((i for i in todo if i not in final), key=place.get)
                    if not todo:
                        return list(timed.values())
                    for k, i in enumerate(todo):
                        if i in final or lost(i):  # lost to a crash in this pass: built again in the next
                            continue
                        w, slot = place[i]
                        # the next timing in another worker must not overlap this worker's spinning pool threads
                        settle = place[todo[(k + 1) % len(todo)]][0] != w  # (the next round starts over)
                        wait = last.get(i, -gap) + gap - time.perf_counter()
                        if wait > 0:  # a small batch: the program's previous round was less than `gap` ago
                            time.sleep(wait)
                        plan = rounds[i][0].get("plan") if rounds[i] else None
                        timed[i] = r = self.host.run(lambda: self._pool[w].measure(slot, settle, plan),
                                                     self.config.host_pause_s, self.config.host_wait_s,
                                                     self.on_host_slow, key)
                        last[i] = time.perf_counter()
                        if r["status"] != "ok":
                            final[i] = r  # a crash or a hang is final (a repeated round must not lose it)

            if not any(i not in final for i in rounds):
                break
            quiet(measure_all) if quiet is not None else measure_all()
            for i, r in timed.items():
                if r["status"] == "ok":
                    rounds[i].append(r)
        out = []
        for i in range(len(mod_jsons)):
            if i in final:
                out.append({**final[i], "protocol": self.protocol})
            elif not rounds[i]:
                out.append({"status": "run_error", "error": "no timing round completed", "build_s": 0.0,
                            "protocol": self.protocol})
            else:
                out.append(combine_rounds(rounds[i], self.protocol))
        return out


def combine_rounds(rounds: list[dict], protocol: int) -> dict:
    """One result from a program's timing rounds: the round with the lowest median gives the label, repeats and
    spread; `round_latencies_s` keeps every round's median, `host_parts` the host gate's ratio of each per sentinel
    part and `round_sentinel_s` its sentinel readings ([cpu, cache] seconds, the slower of before and after; both
    empty without the gate), `measure_s` their sum."""
    best = min(rounds, key=lambda r: r["latency_s"])
    return {**best, "round_latencies_s": [r["latency_s"] for r in rounds],
            "host_parts": [r["host_parts"] for r in rounds if "host_parts" in r],
            "round_sentinel_s": [[max(x[k] for x in r["host_s"]) for k in range(len(r["host_s"][0]))]
                                 for r in rounds if r.get("host_s")],
            "measure_s": sum(r.get("measure_s", 0.0) for r in rounds),
            "remeasured": any(r.get("remeasured", False) for r in rounds), "protocol": protocol}


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
