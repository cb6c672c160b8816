"""A walk over TVM 0.27 block TIR shared by the compact-AST and analytic extractors.

TVM 0.27 has no `tvm.tirx.stmt_functor` (no Python pre/post-order visitor), so statements and expressions are
dispatched by type here. Class names in 0.27: statements `tvm.tirx.For`, `SeqStmt`, `BufferStore`, `IfThenElse`,
`AttrStmt`, `While`, `Bind` (replaces LetStmt; it has no body and binds for the rest of its SeqStmt),
`AllocBuffer`/`DeclBuffer` (no body), `tvm.s_tir.SBlockRealize` / `SBlock`; expressions `tvm.tirx.Add`, ... (defined
in `tvm.ir.prim.expr`), loads are `tvm.ir.expr.TensorLoad` with `.source` (the buffer) — `tvm.tirx.BufferLoad` is
a constructor function, not a class — and calls are `tvm.ir.Call` whose `op.name` is e.g. "tirx.exp" or
"prim.if_then_else". Expressions have no `.dtype`: it is `expr.ty.dtype`. A Buffer is a `Var` whose `ty` is a
`tvm.tirx.BufferType` (so `isinstance(loop_var, tvm.tirx.Buffer)` is True for every Var).

`walk(func)` returns a `Walk`: the pre-order node list (loops and blocks internal, one leaf per BufferStore; a
reduction block's init store comes before its update store) and one `Leaf` per store with its operation counts and
loop context.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field

# Call names (after the last ".") counted as exp/log and as other math intrinsics.
EXP_LOG = frozenset({"exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p"})
MATH_OTHER = frozenset({
    "sqrt", "rsqrt", "cbrt", "tanh", "sigmoid", "erf", "pow", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
    "sinh", "cosh", "asinh", "acosh", "atanh", "fabs", "fmod", "floor", "ceil", "round", "trunc", "nearbyint",
    "hypot", "copysign", "ldexp", "nextafter", "fma",
})
FOR_SERIAL, FOR_PARALLEL, FOR_VECTORIZED, FOR_UNROLLED, FOR_THREAD = 0, 1, 2, 3, 4
ITER_REDUCE = 2  # IterVar.CommReduce
AUTO_UNROLL_KEY = "pragma_auto_unroll_max_step"
ACCESS_LOOPS = 3  # iterating loops whose access pattern a leaf records (LLVM unrolls small inner loops whole and
# vectorizes the next one out, so the innermost alone does not tell what gets vectorized)


@dataclass
class Loop:
    extent: int  # trip count (constant extent, divided by a constant step); a non-constant extent counts as 1
    kind: int  # ForKind
    var: int  # handle of the loop variable
    auto_unroll: int  # the loop's "pragma_auto_unroll_max_step" annotation (0 if none)


@dataclass
class Leaf:
    """One BufferStore: per-execution counts and its enclosing loops (outermost first)."""

    node_id: int
    is_init: bool
    float_add_sub: int = 0
    float_mul: int = 0
    float_div_mod: int = 0
    float_exp_log: int = 0
    float_math_other: int = 0
    float_cmp_select_minmax: int = 0
    int_ops: int = 0
    n_loads: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    buffers: set = field(default_factory=set)  # handles of the buffers loaded or stored
    loops: list = field(default_factory=list)  # [Loop], outermost first
    executions: int = 1  # times the store runs (init stores: without loops that only feed reduction block vars)
    stride: int | None = 0  # change of the store's last index when the innermost iterating loop's var goes 0 -> 1
    # (the innermost loop with extent > 1: a unit loop neither vectorizes nor moves an address); None: unknown
    load_strides: list = field(default_factory=list)  # per load with a known one: its flat byte-address change then
    loads: list = field(default_factory=list)  # the TensorLoad expressions (value and indices)
    # per iterating loop (extent > 1), innermost first, at most ACCESS_LOOPS: (extent, the store's byte-address
    # change or None, its element bytes, the known byte-address changes of the loads, the number of loads) when
    # that loop's var goes 0 -> 1
    access: list = field(default_factory=list)
    # per distinct access (the store, then the loads; an access of the same buffer with the same address changes
    # as an earlier one is left out): (element bytes, the buffer's bytes or None, per enclosing loop outermost
    # first the byte-address change when its var goes 0 -> 1 or None); empty for init stores (see `cache_traffic`)
    footprint: list = field(default_factory=list)
    footprint_lines: dict | None = None  # `footprint_table`'s cache, per number of sets
    # loops the store does not depend on: an iterating loop (extent > 1, not one an init store skips) that moves
    # neither the store's nor any load's address recomputes the same value on every trip (a reduction a schedule
    # computed inside a spatial loop it does not use); LLVM hoists such work out of the loop in some programs and
    # not in others (`bench/invariant_work.py`), so `eval.coverage` flags programs that repeat much such work (no
    # extractor reads these: as analytic features they did not improve the bundled recipe, README "Loop-invariant
    # work"). `invariant_extent`: the product of those loops' extents (1: none); `invariant_body`: the trips of the
    # store's loops inside the innermost of them (0: none)
    invariant_extent: int = 1
    invariant_body: int = 0

    @property
    def float_ops(self) -> int:
        return (self.float_add_sub + self.float_mul + self.float_div_mod + self.float_exp_log
                + self.float_math_other + self.float_cmp_select_minmax)


@dataclass
class Walk:
    node_kinds: list  # "block" | "loop" | "leaf", in pre-order; a node's id is its index here
    leaves: list  # [Leaf] in pre-order
    loop_iterations: list  # per For node: times its body runs (its trip count x those of the loops around it)
    loop_paths: list  # per For node: [Loop] from the outermost to this one


class _Unknown(Exception):
    pass


def handle(obj) -> int:
    return obj.__chandle__()


def dtype_of(expr):
    return getattr(expr.ty, "dtype", None)


def is_float(dt) -> bool:
    return dt is not None and "float" in str(dt)


def nbytes(dt, lanes: int = 1) -> int:
    return (int(dt.bits) * int(dt.lanes) * lanes + 7) // 8


def const_int(expr) -> int | None:
    import tvm

    return int(expr.value) if isinstance(expr, tvm.tirx.IntImm) else None


def lg(x: float) -> float:
    """log2(x) for x >= 1, else 0."""
    return math.log2(x) if x >= 1 else 0.0


@functools.lru_cache(maxsize=1)
def _tables():
    import tvm
    from tvm import tirx as t

    binary = {t.Add: "add_sub", t.Sub: "add_sub", t.Mul: "mul", t.Div: "div_mod", t.Mod: "div_mod",
              t.FloorDiv: "div_mod", t.FloorMod: "div_mod", t.Min: "minmax", t.Max: "minmax",
              t.EQ: "cmp", t.NE: "cmp", t.LT: "cmp", t.LE: "cmp", t.GT: "cmp", t.GE: "cmp",
              t.And: "logic", t.Or: "logic", t.BitwiseAnd: "logic", t.BitwiseOr: "logic", t.BitwiseXor: "logic",
              t.LShift: "logic", t.RShift: "logic"}
    return t, tvm.s_tir, tvm.ir.expr, binary, _binary_functions(t)


def children(e, t, ir_expr, binary) -> list:
    tp = type(e)
    if tp in binary:
        return [e.a, e.b]
    if tp is ir_expr.TensorLoad:
        return list(e.indices)
    if tp is ir_expr.Call:
        return list(e.args)
    if tp is t.Select:
        return [e.condition, e.true_value, e.false_value]
    if tp in (t.Cast, t.Broadcast):
        return [e.value]
    if tp is t.Ramp:
        return [e.base, e.stride]
    if tp in (t.Not, t.BitwiseNot):
        return [e.a]
    if tp is t.Let:
        return [e.value, e.body]
    if tp is t.Shuffle:
        return list(e.vectors) + list(e.indices)
    return []


def expr_vars(e, tabs) -> set:
    """Handles of the Vars an expression uses."""
    t, _, ir_expr, binary = tabs[:4]
    out, stack = set(), [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir_expr.Var):
            out.add(handle(x))
        stack.extend(children(x, t, ir_expr, binary))
    return out


def _int_eval(e, env: dict, bind: dict, tabs, depth: int = 0) -> int:
    """Integer value of an index expression: loop vars from env (others 0), bound vars through `bind`."""
    return _ev(_lower(e, bind, tabs, depth), env)


# An index expression lowered to plain Python tuples once (bound vars inlined), then evaluated at many loop positions
# without touching TVM objects (each attribute access crosses the FFI, which made the walk slow):
#   ("k", value) | ("v", var handle, lowered binding or None) | ("b", function, a, b) | ("s", cond, then, else)
#   | ("n", a) | ("u",) (not a known constant expression: evaluating it raises _Unknown).
_UNKNOWN = ("u",)
_MAX_DEPTH = 64


def _tdiv(a, b):
    return int(a / b)


def _tmod(a, b):
    return int(math.fmod(a, b))


def _binary_functions(t) -> dict:
    return {t.Add: operator.add, t.Sub: operator.sub, t.Mul: operator.mul, t.FloorDiv: operator.floordiv,
            t.FloorMod: operator.mod, t.Div: _tdiv, t.Mod: _tmod, t.Min: min, t.Max: max,
            t.EQ: lambda a, b: int(a == b), t.NE: lambda a, b: int(a != b), t.LT: lambda a, b: int(a < b),
            t.LE: lambda a, b: int(a <= b), t.GT: lambda a, b: int(a > b), t.GE: lambda a, b: int(a >= b),
            t.And: lambda a, b: int(bool(a) and bool(b)), t.Or: lambda a, b: int(bool(a) or bool(b))}


def _lower(e, bind: dict, tabs, depth: int = 0) -> tuple:
    """`e` as a tuple tree (see above); a var bound in `bind` carries its binding, lowered; beyond a nesting depth
    of 64 the expression is unknown."""
    t, _, ir_expr, binary = tabs[:4]
    if depth > _MAX_DEPTH:
        return _UNKNOWN
    tp = type(e)
    if tp is t.IntImm:
        return ("k", int(e.value))
    if isinstance(e, ir_expr.Var):
        h = handle(e)
        return ("v", h, _lower(bind[h], bind, tabs, depth + 1) if h in bind else None)
    if tp in binary:
        fn = tabs[4].get(tp)
        if fn is None:  # logic and bitwise ops
            return _UNKNOWN
        return ("b", fn, _lower(e.a, bind, tabs, depth + 1), _lower(e.b, bind, tabs, depth + 1))
    if tp is t.Cast or tp is t.Broadcast:
        return _lower(e.value, bind, tabs, depth + 1)
    if tp is t.Ramp:  # lane 0
        return _lower(e.base, bind, tabs, depth + 1)
    if tp is t.Select:
        return ("s", *(_lower(x, bind, tabs, depth + 1) for x in (e.condition, e.true_value, e.false_value)))
    if tp is t.Not:
        return ("n", _lower(e.a, bind, tabs, depth + 1))
    return _UNKNOWN


def _ev(n: tuple, env: dict) -> int:
    """Value of a lowered expression with loop vars from `env` (others 0); raises _Unknown."""
    k = n[0]
    if k == "k":
        return n[1]
    if k == "v":
        if n[1] in env:
            return env[n[1]]
        return 0 if n[2] is None else _ev(n[2], env)
    if k == "b":
        try:
            return n[1](_ev(n[2], env), _ev(n[3], env))
        except ZeroDivisionError:
            raise _Unknown from None
    if k == "s":
        return _ev(n[2], env) if _ev(n[1], env) else _ev(n[3], env)
    if k == "n":
        return int(not _ev(n[1], env))
    raise _Unknown


def _vars(n: tuple, out: set) -> set:
    """Handles of the vars a lowered expression reads (bindings included)."""
    k = n[0]
    if k == "v":
        out.add(n[1])
        if n[2] is not None:
            _vars(n[2], out)
    elif k == "b":
        _vars(n[2], out)
        _vars(n[3], out)
    elif k in ("s", "n"):
        for x in n[1:]:
            _vars(x, out)
    return out


class _Walker:
    def __init__(self):
        self.tabs = _tables()
        self.node_kinds: list[str] = []
        self.leaves: list[Leaf] = []
        self.loops: list[Loop] = []
        self.loop_iterations: list[int] = []
        self.loop_paths: list[list[Loop]] = []
        self.bind: dict[int, object] = {}  # block iter var / Bind var handle -> expression
        self.reduce_only: list[set] = []  # per enclosing block realize: loop vars feeding only reduction block vars
        self.lowered: dict = {}  # the current leaf's accesses: (buffer, indices) handles -> `_lower_access`
        self.dims: dict = {}  # buffer handle -> its constant dimensions (None: one is not constant)

    # statements -------------------------------------------------------------------------------------------
    def stmt(self, s, init: bool = False) -> None:
        t, s_tir = self.tabs[:2]
        tp = type(s)
        if tp is t.SeqStmt:
            for x in s.seq:
                self.stmt(x, init)
        elif tp is t.For:
            self.node_kinds.append("loop")
            ext = const_int(s.extent)
            step = const_int(s.step) if s.step is not None else 1
            trips = 1 if ext is None else (-(-ext // step) if step and step > 1 else ext)
            ann = s.annotations.get(AUTO_UNROLL_KEY) if s.annotations else None
            unroll = ann if isinstance(ann, int) else (const_int(ann) if ann is not None else None)
            loop = Loop(trips, int(s.kind), handle(s.loop_var), unroll or 0)
            self.loops.append(loop)
            self.loop_iterations.append(math.prod(x.extent for x in self.loops))
            self.loop_paths.append(list(self.loops))
            self.stmt(s.body, init)
            self.loops.pop()
        elif tp is s_tir.SBlockRealize:
            blk = s.block
            spatial, reduce = set(), set()
            for iv, value in zip(blk.iter_vars, s.iter_values):
                self.bind[handle(iv.var)] = value
                (reduce if int(iv.iter_type) == ITER_REDUCE else spatial).update(expr_vars(value, self.tabs))
            self.reduce_only.append(reduce - spatial)
            self._block(blk)
            self.reduce_only.pop()
        elif tp is s_tir.SBlock:
            self.reduce_only.append(set())
            self._block(s)
            self.reduce_only.pop()
        elif tp is t.BufferStore:
            self._leaf(s, init)
        elif tp is t.IfThenElse:
            self.stmt(s.then_case, init)
            if s.else_case is not None:
                self.stmt(s.else_case, init)
        elif tp is t.AttrStmt or tp is t.While:
            self.stmt(s.body, init)
        elif tp is t.Bind:
            self.bind[handle(s.var)] = s.value
        # Evaluate, AllocBuffer, DeclBuffer, AssertStmt, Break, ...: no stores inside

    def _block(self, blk) -> None:
        self.node_kinds.append("block")
        if blk.init is not None:
            self.stmt(blk.init, True)
        self.stmt(blk.body, False)

    # leaves -----------------------------------------------------------------------------------------------
    def _leaf(self, store, init: bool) -> None:
        t, _, ir_expr = self.tabs[:3]
        leaf = Leaf(node_id=len(self.node_kinds), is_init=init, loops=list(self.loops))
        self.lowered = {}  # bindings may differ between leaves
        self.node_kinds.append("leaf")
        value_dt = dtype_of(store.value)
        leaf.bytes_written = nbytes(store.buffer.dtype, int(value_dt.lanes) if value_dt is not None else 1)
        leaf.buffers.add(handle(store.buffer))
        for e in list(store.indices) + [store.value]:
            self._count(e, leaf)
        skip = self.reduce_only[-1] if (init and self.reduce_only) else set()
        leaf.executions = math.prod(x.extent for x in self.loops if x.var not in skip)
        leaf.stride = self._stride(store)
        accesses = [(store.buffer, store.indices)] + [(x.source, x.indices) for x in leaf.loads]
        # every access's byte-address change per enclosing loop (outermost first), computed once for all uses
        all_moves = [self._flat_moves(buf, indices, [lp.var for lp in self.loops]) for buf, indices in accesses]
        invariant = [j for j, lp in enumerate(self.loops)
                     if lp.extent > 1 and lp.var not in skip and all(m[j] == 0 for m in all_moves)]
        if invariant:
            leaf.invariant_extent = math.prod(self.loops[j].extent for j in invariant)
            leaf.invariant_body = math.prod(x.extent for x in self.loops[invariant[-1] + 1:])
        for j in [j for j in reversed(range(len(self.loops))) if self.loops[j].extent > 1][:ACCESS_LOOPS]:
            loads = [m[j] for m in all_moves[1:]]
            leaf.access.append((self.loops[j].extent, all_moves[0][j], nbytes(store.buffer.dtype),
                                [m for m in loads if m is not None], len(loads)))
        if not init:  # an init store writes the lines its update store writes
            seen = set()
            for (buf, _), moves in zip(accesses, all_moves):
                if (handle(buf), moves) not in seen:
                    seen.add((handle(buf), moves))
                    dims = self._dims(buf)
                    size = None if dims is None else math.prod(dims) * nbytes(buf.dtype)
                    leaf.footprint.append((nbytes(buf.dtype), size, moves))
        self.leaves.append(leaf)

    def _inner_var(self) -> int:
        """The innermost loop that iterates (extent > 1; the innermost loop if none does): the loop whose steps
        LLVM vectorizes and the caches see, once unit loops (a tile size of 1) are gone."""
        for x in reversed(self.loops):
            if x.extent > 1:
                return x.var
        return self.loops[-1].var

    def _stride(self, store, var: int | None = None) -> int | None:
        """Change of the store's last index when loop var `var` (default: the innermost iterating loop's) goes
        0 -> 1; None when unknown."""
        t = self.tabs[0]
        if len(store.indices) == 0:
            return 0
        last = store.indices[-1]
        if not self.loops:
            return 0
        try:
            if type(last) is t.Ramp:
                return _int_eval(last.stride, {}, self.bind, self.tabs)
            inner = self._inner_var() if var is None else var
            return (_int_eval(last, {inner: 1}, self.bind, self.tabs)
                    - _int_eval(last, {inner: 0}, self.bind, self.tabs))
        except _Unknown:
            return None

    def _load_stride(self, load, var: int | None = None) -> int | None:
        """Bytes the load's address (row-major flattened over its buffer's shape) moves when the innermost iterating
        loop's var (or `var`) goes 0 -> 1; 0 outside loops, None when a dimension or an index is not a known constant
        expression."""
        if not self.loops:
            return 0
        return self._flat_move(load.source, load.indices, self._inner_var() if var is None else var)

    def _flat_move(self, buf, indices, var: int) -> int | None:
        """Bytes a buffer access's row-major flattened address moves when loop var `var` goes 0 -> 1 (None when a
        dimension or an index is not a known constant expression)."""
        return self._flat_moves(buf, indices, [var])[0]

    def _flat_moves(self, buf, indices, variables: list) -> tuple:
        """`_flat_move` for each of `variables`: the indices are lowered once per leaf; an index that does not read
        a var (its bindings included) does not move with it."""
        key = (handle(buf), tuple(handle(i) for i in indices))
        low = self.lowered.get(key)
        if low is None:
            low = self.lowered[key] = self._lower_access(buf, indices)
        if low is None:
            return (None,) * len(variables)
        elem = nbytes(buf.dtype)
        moves = []
        for var in variables:
            try:
                moves.append(sum(step * (_ev(tree, {var: 1}) - _ev(tree, {var: 0}))
                                 for step, tree, used in low if var in used) * elem)
            except _Unknown:
                moves.append(None)
        return tuple(moves)

    def _lower_access(self, buf, indices):
        """[(row-major step, lowered index, vars it reads)] of an access whose dimensions are constants and whose
        indices evaluate with every loop var at 0; None otherwise (every move unknown)."""
        dims = self._dims(buf)
        if dims is None or len(dims) != len(indices):
            return None
        out = []
        for d, index in enumerate(indices):
            tree = _lower(index, self.bind, self.tabs)
            try:
                _ev(tree, {})  # an index that fails with every var at 0 fails along every loop
            except _Unknown:
                return None
            out.append((math.prod(dims[d + 1:]), tree, _vars(tree, set())))
        return out

    def _dims(self, buf) -> list[int] | None:
        """A buffer's constant dimensions (None when one is not a constant), read once per walk."""
        h = handle(buf)
        if h not in self.dims:
            dims = [const_int(d) for d in buf.shape]
            self.dims[h] = None if any(d is None for d in dims) else dims
        return self.dims[h]

    def _count(self, e, leaf: Leaf) -> None:
        t, _, ir_expr, binary = self.tabs[:4]
        stack = [e]
        while stack:
            x = stack.pop()
            tp = type(x)
            kind = binary.get(tp)
            if kind is not None:
                if kind == "logic":
                    leaf.int_ops += 1
                elif is_float(dtype_of(x.a) if kind == "cmp" else dtype_of(x)):
                    if kind == "add_sub":
                        leaf.float_add_sub += 1
                    elif kind == "mul":
                        leaf.float_mul += 1
                    elif kind == "div_mod":
                        leaf.float_div_mod += 1
                    else:
                        leaf.float_cmp_select_minmax += 1
                else:
                    leaf.int_ops += 1
            elif tp is ir_expr.TensorLoad:
                leaf.n_loads += 1
                leaf.bytes_read += nbytes(dtype_of(x))
                leaf.buffers.add(handle(x.source))
                leaf.loads.append(x)
                stride = self._load_stride(x)
                if stride is not None:
                    leaf.load_strides.append(stride)
            elif tp is t.Select or tp is t.Not or tp is t.BitwiseNot:
                if tp is t.Select and is_float(dtype_of(x)):
                    leaf.float_cmp_select_minmax += 1
                else:
                    leaf.int_ops += 1
            elif tp is ir_expr.Call:
                name = str(getattr(x.op, "name", "")).rsplit(".", 1)[-1]
                if name == "if_then_else":
                    if is_float(dtype_of(x)):
                        leaf.float_cmp_select_minmax += 1
                    else:
                        leaf.int_ops += 1
                elif name in EXP_LOG:
                    leaf.float_exp_log += 1
                elif name in MATH_OTHER:
                    leaf.float_math_other += 1
            stack.extend(children(x, t, ir_expr, binary))


LINE_BYTES = 64  # cache line
L1_SETS = 64  # sets of a CPU's L1d (32 KiB 8-way, 48 KiB 12-way: both 64)
# set-associative caches the features model (name, bytes, ways): the L1d of Zen 2-4 and of Ice Lake and later (64
# sets each). Two L2s of 2048 sets (1 MiB 8-way, 2 MiB 16-way) were tried as well and not kept (README, Models).
SET_ASSOC_CACHES = (("32KiB_8way", 32 << 10, 8), ("48KiB_12way", 48 << 10, 12))


def access_geometry(elem_bytes: int, size_bytes: int | None, moves, extents, n_sets: int = L1_SETS):
    """(lines, sets): the distinct cache lines one access touches while loops of `extents` run (their byte-address
    changes `moves`), and how many of a cache's `n_sets` sets (set = line index mod n_sets) those lines fall into.

    Lines: loops are taken by increasing |move|: a move within the contiguous run so far, or within a line, extends
    the run; a move within the span of the last group of runs extends that group; a larger one repeats everything
    `extent` times at a new place. Lines = lines of the run x the product of the group counts, at most the buffer's
    lines. An unknown move counts as one element.

    Sets: the run's consecutive lines use consecutive sets; a group of `count` runs `stride` bytes apart
    visits min(count, n_sets / gcd(stride / LINE_BYTES, n_sets)) set offsets when the stride is a whole number of
    lines (a 4 KiB stride on 64 sets: one), min(count, n_sets) otherwise; the sets multiply, at most n_sets and at
    most the lines. An access capped at its buffer's lines covers the buffer, whose lines are consecutive.
    """
    terms = sorted((abs(elem_bytes if m is None else m), e) for m, e in zip(moves, extents) if e > 1 and m != 0)
    run, groups = elem_bytes, []  # groups: [stride bytes, count]
    for move, ext in terms:
        if not groups and move <= max(run, LINE_BYTES):
            run += move * (ext - 1)
        elif groups and move <= groups[-1][0] * groups[-1][1]:
            g = groups[-1]
            g[1] += -(-move * (ext - 1) // g[0])
        else:
            groups.append([move, ext])
    run_lines = -(-run // LINE_BYTES)
    lines = run_lines * math.prod(c for _, c in groups)
    sets = min(run_lines, n_sets)
    for stride, count in groups:
        period = n_sets // math.gcd(stride // LINE_BYTES, n_sets) if stride % LINE_BYTES == 0 else n_sets
        sets *= min(count, period)
    if size_bytes and lines > -(-size_bytes // LINE_BYTES):
        lines = -(-size_bytes // LINE_BYTES)
        return lines, min(lines, n_sets)
    return lines, min(sets, n_sets, lines)


def cache_traffic(leaves, capacity_bytes: float, ways: int | None = None) -> float:
    """Bytes moved into an LRU cache of `capacity_bytes` (lines of `LINE_BYTES`), estimated per store from its loop
    nest (the stack-distance footprint model); fully associative, or with `ways` ways per set.

    For a store in loops l_0..l_{n-1} (outermost first), FP[d] is the bytes of the distinct lines all its accesses
    touch while loops l_d.. run once. The smallest d with FP[d] <= capacity is the outermost loop body that fits:
    each time loop l_{d-1} runs, an access moves in the lines it touches during that run once (its iterations reuse
    each other's lines, FP[d] apart); l_{d-1} runs prod(extents of l_0..l_{d-2}) times. If the whole nest fits,
    that is every line once. Stores are summed (no reuse between stores).

    With `ways` (capacity / (LINE_BYTES x ways) sets), a body fits when its fullest set holds at most `ways` lines:
    an access's lines spread evenly over the sets they use (`access_geometry`), different accesses' sets are
    unrelated (each adds lines / sets to every set on average), so the fullest set holds the mean plus the largest
    excess of one access over its mean share. A column walk whose row is a multiple of 4 KiB puts all its lines in
    one set of a 64-set L1: the fully associative model keeps them, an 8-way cache keeps 8.
    """
    n_sets = None if ways is None else max(int(capacity_bytes // (LINE_BYTES * ways)), 1)
    total = 0.0
    for leaf in leaves:
        if not leaf.footprint:
            continue
        table = footprint_table(leaf, n_sets)  # table[d]: each access's (lines, sets) while loops l_d.. run once
        ext = [x.extent for x in leaf.loops]
        d = len(ext)
        while d > 0 and _fits(table[d - 1], capacity_bytes, n_sets, ways):
            d -= 1
        total += sum(n for n, _ in table[max(d - 1, 0)]) * LINE_BYTES * math.prod(ext[:max(d - 1, 0)])
    return total


def _fits(row, capacity_bytes: float, n_sets: int | None, ways: int | None) -> bool:
    """Whether one loop body's accesses, `row` = [(lines, sets)], stay in the cache (see `cache_traffic`)."""
    if n_sets is None:
        return sum(n for n, _ in row) * LINE_BYTES <= capacity_bytes
    return sum(n for n, _ in row) / n_sets + max(n / s - n / n_sets for n, s in row) <= ways


def footprint_table(leaf, n_sets: int | None = None) -> list[list[tuple[int, int]]]:
    """Per depth d = 0..len(loops): each footprint access's (distinct lines, sets of `n_sets` (default `L1_SETS`)
    they use) while loops l_d.. run once (cached on the leaf per number of sets)."""
    n_sets = n_sets or L1_SETS
    if leaf.footprint_lines is None:
        leaf.footprint_lines = {}
    if n_sets not in leaf.footprint_lines:
        ext = [x.extent for x in leaf.loops]
        leaf.footprint_lines[n_sets] = [
            [access_geometry(eb, size, moves[d:], ext[d:], n_sets) for eb, size, moves in leaf.footprint]
            for d in range(len(ext) + 1)]
    return leaf.footprint_lines[n_sets]


_LAST_WALK: list = [None, None]  # [PrimFunc, Walk] of the last call: a program's extractors share one walk


def walk(func) -> Walk:
    """Walk a PrimFunc's body (see the module docstring). The result is shared with the next caller that walks the
    same PrimFunc object (the compact-AST and analytic extractors of one program): treat it as read-only."""
    if _LAST_WALK[0] is not None and _LAST_WALK[0].same_as(func):
        return _LAST_WALK[1]
    w = _Walker()
    w.stmt(func.body)
    out = Walk(w.node_kinds, w.leaves, w.loop_iterations, w.loop_paths)
    _LAST_WALK[:] = [func, out]
    return out


def arg_buffer_bytes(func) -> int:
    """Total bytes of the function's buffer arguments (a non-constant dimension counts as 1)."""
    import tvm

    total = 0
    for p in func.params:
        ty = p.ty
        if isinstance(ty, tvm.tirx.BufferType):
            dims = [const_int(d) for d in p.shape]
            total += math.prod(d if d is not None else 1 for d in dims) * nbytes(p.dtype)
    return total
