"""CDMPP's replayer (EuroSys'24 §5.5, Appendix C, Algorithm 2): simulate a kernel data-flow graph on execution units.

Every unit keeps a device time; every unit *kind* keeps a priority queue of ready kernels ordered by ready time.
Repeatedly, the unit with the smallest device time among those whose kind has a ready kernel takes the kernel with
the smallest ready time: start = max(device time, ready time), end = start + duration + gap; successors become ready
at the latest end of their predecessors. The iteration time is the latest device time.

Units are a configuration: `{"cpu": 1}` (one CPU stream: the result is exactly the sum of durations and gaps),
`{"stream": 2}` (two CUDA streams), `{"gemm": 3, "tpc": 8}` with `split={"gemm": 3}` (Habana HL-100: a GEMM
kernel is cut into 3 parts of duration/3 that run on the 3 GEMM cores in parallel).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..errors import PerfcastError


@dataclass
class Kernel:
    name: str
    duration_s: float
    deps: tuple = ()  # indices of the kernels this one reads from
    kind: str = "cpu"  # the unit kind that runs it
    gap_s: float = 0.0  # idle time after it on its unit (launch overhead, synchronisation)


@dataclass
class Replay:
    total_s: float
    start_s: list = field(default_factory=list)  # per kernel
    end_s: list = field(default_factory=list)
    unit: list = field(default_factory=list)  # "kind:index" per kernel (first part's unit when split)


def replay(kernels: list[Kernel], units: dict[str, int] | None = None, split: dict[str, int] | None = None) -> Replay:
    """Simulate `kernels` (a DAG through `deps`) on `units` (kind -> count, default one "cpu" unit)."""
    units = dict(units or {"cpu": 1})
    split = dict(split or {})
    for kind, k in split.items():
        if k > units.get(kind, 0):
            raise PerfcastError(f"split {kind}={k} needs at least {k} {kind} units, the configuration has "
                                f"{units.get(kind, 0)}; raise units[{kind!r}] or lower the split")
    # expand split kernels into parts: part j of kernel i is node (i, j)
    parts = [max(1, split.get(k.kind, 1)) for k in kernels]
    n = len(kernels)
    succ: list[list[int]] = [[] for _ in range(n)]
    ref = [0] * n
    for i, k in enumerate(kernels):
        if k.kind not in units:
            raise PerfcastError(f"kernel {k.name!r} runs on unit kind {k.kind!r}, which the configuration lacks "
                                f"(units: {units}); add it")
        for d in set(k.deps):
            if not 0 <= d < n or d == i:
                raise PerfcastError(f"kernel {k.name!r} depends on {d!r}, not another kernel index")
            succ[d].append(i)
            ref[i] += 1
    ready = [0.0] * n
    left = list(parts)  # parts still to run per kernel
    end_of = [0.0] * n
    start_of = [float("inf")] * n
    unit_of = [""] * n
    queues: dict[str, list] = {kind: [] for kind in units}
    for i in range(n):
        if ref[i] == 0:
            for j in range(parts[i]):
                heapq.heappush(queues[kernels[i].kind], (0.0, i, j))
    device_time = {(kind, u): 0.0 for kind, c in units.items() for u in range(c)}
    done = 0
    while True:
        candidates = [(t, kind, u) for (kind, u), t in device_time.items() if queues[kind]]
        if not candidates:
            break
        t, kind, u = min(candidates)
        rt, i, j = heapq.heappop(queues[kind])
        k = kernels[i]
        start = max(t, rt)
        end = start + k.duration_s / parts[i] + k.gap_s
        device_time[(kind, u)] = end
        start_of[i] = min(start_of[i], start)
        if not unit_of[i]:
            unit_of[i] = f"{kind}:{u}"
        end_of[i] = max(end_of[i], end)
        left[i] -= 1
        if left[i]:
            continue
        done += 1
        for c in succ[i]:
            ref[c] -= 1
            ready[c] = max(ready[c], end_of[i])
            if ref[c] == 0:
                for jj in range(parts[c]):
                    heapq.heappush(queues[kernels[c].kind], (ready[c], c, jj))
    if done != n:
        raise PerfcastError(f"the kernel graph has a cycle: {n - done} of {n} kernels never became ready")
    return Replay(max(device_time.values(), default=0.0), start_of, end_of, unit_of)


def kernel_graph(fused_mod) -> list[tuple[str, object, tuple]]:
    """(kernel name, PrimFunc, deps) per `call_tir` of a fused Relax module's `main`, in program order.

    Dependencies follow variables through the dataflow: a binding that is not a `call_tir` (a tuple, a tuple
    access, a view) passes on the kernels its arguments came from.
    """
    import tvm
    from tvm import relax

    main = fused_mod["main"]
    producers: dict = {}  # relax Var -> set of kernel indices it (transitively) comes from
    out = []

    def sources(expr) -> set:
        found: set = set()

        def visit(e):
            if isinstance(e, relax.Var):
                found.update(producers.get(e, ()))

        relax.analysis.post_order_visit(expr, visit)
        return found

    call_tir = tvm.ir.Op.get("relax.call_tir")
    for block in main.body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and v.op.same_as(call_tir):
                gv = v.args[0]
                deps = tuple(sorted(sources(v.args[1])))
                out.append((gv.name_hint, fused_mod[gv], deps))
                producers[b.var] = {len(out) - 1}
            else:
                producers[b.var] = sources(v)
    return out
