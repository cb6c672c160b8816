"""Peak memory of a network's inference, from the lowered (fused) program — and the layerwise paper's estimators.

`network_memory(fused_mod)` walks the Relax `main` of the module TVM compiles (`perfcast.collect.tasks.fuse`):

- weights: the constants the kernels read (bytes of every `relax.Constant`),
- inputs: `main`'s parameters; output: what `main` returns,
- intermediates: every `call_tir` output, live from the binding that produces it to the last binding that reads it
  (views — tuples, tuple items, reshapes and other non-kernel calls — keep their sources alive),
- workspace: each kernel's internal buffers (`alloc_buffer` / `Allocate` in its TIR), live only during its call.

peak_bytes = weights + inputs + max over kernels of (live intermediates + that kernel's workspace), the liveness
bound that TVM's static memory planner reaches at best (it may pack worse, never better without in-place reuse).

For comparison, the two estimators of the layerwise paper (`ai-driven-performance-modeling-inference.txt` §6,
Eq. 3), computed from per-kernel footprints (inputs + output + workspace of one kernel):
`two_largest_bytes` (pessimistic: the two largest footprints) and `twice_mean_bytes` (optimistic: 2 x the mean).

`measured_bytes` (with `--measure`, see `perfcast.e2e.predict.measure_network`) is what the Relax VM really allocates for
one inference (its `alloc_storage` calls, observed with the VM instrument) plus weights and inputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    input_bytes: int
    output_bytes: int
    peak_intermediate_bytes: int  # live call_tir outputs + the running kernel's workspace, at the worst kernel
    peak_bytes: int  # weights + inputs + peak_intermediate_bytes
    peak_kernel: str  # the kernel during which the peak occurs
    two_largest_bytes: int  # layerwise paper, pessimistic
    twice_mean_bytes: int  # layerwise paper, optimistic

    def to_dict(self) -> dict:
        return asdict(self)


def tensor_bytes(ty) -> int:
    """Bytes of a Relax tensor type (or tuple of them); 0 for anything else (shapes, objects)."""
    fields = getattr(ty, "fields", None)
    if fields is not None:
        return sum(tensor_bytes(f) for f in fields)
    shape, dtype = getattr(ty, "shape", None), getattr(ty, "dtype", None)
    if shape is None or dtype is None:
        return 0
    dims = getattr(shape, "values", shape)
    return int(np.prod([int(d) for d in dims], dtype=np.int64)) * dtype_bytes(str(dtype))


def dtype_bytes(dtype: str) -> int:
    import tvm

    t = tvm.runtime.DataType(dtype)
    return max(1, t.bits * t.lanes // 8)


def workspace_bytes(prim_func) -> int:
    """Bytes of the buffers a PrimFunc allocates inside (intermediate stages of a fused kernel). TVM 0.27 has no
    Python statement visitor (see `perfcast.features._tir`), so the walk dispatches on statement types."""
    from tvm import s_tir, tirx

    total = 0
    stack = [prim_func.body]
    while stack:
        s = stack.pop()
        if s is None:
            continue
        if isinstance(s, s_tir.SBlockRealize):
            stack.append(s.block)
        elif isinstance(s, s_tir.SBlock):
            total += sum(_buffer_bytes(b) for b in s.alloc_buffers)
            stack += [s.init, s.body]
        elif isinstance(s, tirx.AllocBuffer):
            total += _buffer_bytes(s.buffer)
        elif isinstance(s, tirx.SeqStmt):
            stack += list(s.seq)
        elif isinstance(s, tirx.IfThenElse):
            stack += [s.then_case, s.else_case]
        elif hasattr(s, "body"):  # For, AttrStmt, While, ...
            stack.append(s.body)
    return total


def _buffer_bytes(buf) -> int:
    return int(np.prod([int(e) for e in buf.shape], dtype=np.int64)) * dtype_bytes(str(buf.dtype))


def network_memory(fused_mod) -> MemoryEstimate:
    """The estimate (see the module docstring) for a fused Relax module with a `main`."""
    import tvm
    from tvm import relax

    main = fused_mod["main"]
    call_tir = tvm.ir.Op.get("relax.call_tir")
    consts: dict = {}  # id -> bytes, each constant counted once

    def refs(expr) -> set:
        """Variables and constants an expression reads."""
        found: set = set()

        def visit(e):
            if isinstance(e, relax.Var):
                found.add(e)
            elif isinstance(e, tvm.ir.Constant):
                consts.setdefault(e, tensor_bytes(e.ty))

        relax.analysis.post_order_visit(expr, visit)
        return found

    params = set(main.params)
    bindings = [b for block in main.body.blocks for b in block.bindings]
    owned: dict = {}  # var -> set of allocation ids (call_tir outputs) it refers to
    alloc_size: list[int] = []
    kernel_at: list[tuple[int, str, int]] = []  # per call_tir, i.e. per allocation: (binding index, name, workspace)
    last_use: dict[int, int] = {}
    footprints: list[int] = []
    for i, b in enumerate(bindings):
        v = b.value
        src = refs(v)
        read = set().union(*(owned.get(x, set()) for x in src)) if src else set()
        for a in read:
            last_use[a] = i
        if isinstance(v, relax.Call) and v.op.same_as(call_tir):
            gv = v.args[0]
            func = fused_mod[gv]
            ws = workspace_bytes(func) if isinstance(func, tvm.tirx.PrimFunc) else 0
            alloc_size.append(tensor_bytes(b.var.ty))
            owned[b.var] = {len(alloc_size) - 1}
            last_use[len(alloc_size) - 1] = i
            kernel_at.append((i, gv.name_hint, ws))
            in_bytes = sum(tensor_bytes(x.ty) for x in _tensor_args(v.args[1]))
            footprints.append(in_bytes + alloc_size[-1] + ws)
        else:
            owned[b.var] = read  # a view: keeps its sources alive
    out_allocs = set().union(*(owned.get(x, set()) for x in refs(main.body.body)))
    for a in out_allocs:
        last_use[a] = len(bindings)
    peak, peak_kernel = 0, ""
    for i, name, ws in kernel_at:  # allocation a is born at kernel_at[a]'s binding and dies after its last use
        live = sum(size for a, size in enumerate(alloc_size) if kernel_at[a][0] <= i <= last_use[a])
        if live + ws > peak:
            peak, peak_kernel = live + ws, name
    weights = int(sum(consts.values()))
    inputs = int(sum(tensor_bytes(p.ty) for p in params))
    output = int(tensor_bytes(main.body.body.ty)) if hasattr(main.body.body, "ty") else 0
    fp = sorted(footprints, reverse=True)
    return MemoryEstimate(
        weights_bytes=weights, input_bytes=inputs, output_bytes=output, peak_intermediate_bytes=int(peak),
        peak_bytes=int(weights + inputs + peak), peak_kernel=peak_kernel,
        two_largest_bytes=int(sum(fp[:2])), twice_mean_bytes=int(2 * np.mean(fp)) if fp else 0)


def _tensor_args(args) -> list:
    """The tensor arguments of a call_tir (its second argument is a tuple of them)."""
    fields = getattr(args, "fields", None)
    return list(fields) if fields is not None else [args]
