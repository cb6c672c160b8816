"""CDMPP's compact AST (EuroSys'24 §4.1–4.2): one computation vector per leaf plus pre-order positional encoding.

The AST is the scheduled PrimFunc's statement tree with loops (`For`) and blocks (`SBlock`, the PrimFunc's root
block included) as internal nodes and one leaf per `BufferStore` (a reduction block's init store, then its update
store). Nodes are numbered 0, 1, ... in pre-order. The serialized AST is that pre-order list of node ids with a -1
marker appended after every leaf; the ordering vector holds, for each leaf, its position (0-based) in the serialized
sequence, markers included. E.g. a root block around `for i: for j: block: store` serializes to
`[0, 1, 2, 3, 4, -1]` with ordering vector `[4]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._tir import (ACCESS_LOOPS, FOR_PARALLEL, FOR_THREAD, FOR_UNROLLED, FOR_VECTORIZED, SET_ASSOC_CACHES,
                   cache_traffic, lg, walk)
from .base import FeatureExtractor, as_primfunc, register

INNER_LOOPS = 4
LEAF_CACHE_CAPACITIES = (("32KiB", 32 << 10), ("1MiB", 1 << 20), ("32MiB", 32 << 20))  # ~ L1d, L2, L3 of a CPU
LEAF_FEATURES = (
    # computation per execution of the store (value and index expressions)
    "float_add_sub",  # float Add/Sub
    "float_mul",  # float Mul
    "float_div_mod",  # float Div/Mod/FloorDiv/FloorMod
    "float_exp_log",  # exp, exp2, exp10, expm1, log, log2, log10, log1p calls
    "float_math_other",  # other math intrinsics: sqrt, rsqrt, tanh, sigmoid, erf, pow, fabs, floor, ...
    "float_cmp_select_minmax",  # float comparisons (by operand type), Select/if_then_else, Min/Max
    "int_ops",  # integer arithmetic, integer comparisons/select/min/max, logical and bitwise ops (indices included)
    # memory per execution
    "n_loads",  # buffer loads
    "n_stores",  # 1: one leaf per store
    "bytes_read",  # sum of the loads' dtype bytes (x lanes)
    "bytes_written",  # store dtype bytes x lanes
    "n_buffers",  # distinct buffers loaded or stored
    # loop context (enclosing For loops; a non-constant extent counts as 1)
    "nest_depth",
    "log2_loop_product",  # log2 of the product of the enclosing loop extents
    *(f"log2_inner_extent_{k}" for k in range(INNER_LOOPS)),  # innermost first, 0 where fewer loops
    "n_vectorized", "log2_vectorized_extent",  # count of enclosing ForKind.VECTORIZED loops, log2 product of extents
    "n_unrolled", "log2_unrolled_extent",  # ForKind.UNROLLED
    "n_parallel", "log2_parallel_extent",  # ForKind.PARALLEL
    "n_thread_bound", "log2_thread_extent",  # ForKind.THREAD_BINDING (GPU)
    "log2p1_auto_unroll_max_step",  # log2(1 + max "pragma_auto_unroll_max_step" annotation on enclosing loops)
    "is_init",  # 1 for a reduction block's init store
    "store_contiguous",  # 1 if the store's last index moves by exactly 1 when the innermost iterating loop's var does
    # ("iterating": extent > 1; unit loops, a tile size of 1, are skipped)
    "log2p1_store_stride",  # log2(1 + |that change|) (0 when unknown)
    # loads' access pattern along the innermost iterating loop: how far (bytes) each load's flattened address moves
    # when that loop's var goes 0 -> 1 (a perfcast addition; CDMPP's "buffer touch patterns" name no formula)
    "log2p1_max_load_stride_bytes",  # log2(1 + the largest |move| over the leaf's loads) (0: no load, unknown)
    "load_stride_pow2",  # over loads moving >= 64 bytes (a new cache line per iteration): the largest k <= 16 with
    # 2^k dividing the move. Large k = the loads fall into few cache sets (a 2 KiB stride uses 2 of L1's 64 sets,
    # 4 KiB one): conflict misses that a plain stride does not show. 0 when no load moves that far.
    # the access signature of the ACCESS_LOOPS innermost iterating loops (extent > 1), innermost first: LLVM unrolls
    # a small innermost loop whole and vectorizes the next one out when its accesses allow (a perfcast addition)
    *(c for k in range(ACCESS_LOOPS) for c in (
        f"log2_iter_extent_{k}",  # log2 of the loop's extent (0: fewer iterating loops)
        f"iter_store_class_{k}",  # the store's address along it: 0 no such loop or unknown, 1 stays (a reduction
        # along the loop), 2 contiguous (moves one element), 3 strided
        f"iter_vector_load_share_{k}",  # share of the loads that stay or move one element along it (what a
        # vector load or broadcast serves); 0 without loads
        f"log2p1_iter_max_load_stride_{k}",  # log2(1 + the largest byte move of a load along it)
    )),
    # the store's memory traffic over the whole program run, from its loop nest alone (`_tir.cache_traffic` of this
    # store: the stack-distance footprint model, a fully associative LRU cache of 64-byte lines; 0 for an init
    # store, whose lines its update store counts); a perfcast addition, so that the encoder sees which store
    # outgrows which cache level (the analytic features sum it over the program)
    "log2p1_leaf_footprint_bytes",  # log2(1 + bytes of the distinct lines its accesses touch)
    *(f"log2p1_leaf_traffic_bytes_{name}" for name, _ in LEAF_CACHE_CAPACITIES),  # log2(1 + bytes moved in)
    # the same into a set-associative L1 (`_tir.SET_ASSOC_CACHES`: 64 sets of 8 or 12 ways; `cache_traffic(...,
    # ways)`): a column walk whose row is a multiple of 2 or 4 KiB lands in 1-2 sets and keeps only `ways` lines
    # there, so it misses where a fully associative cache of that size hits (2-7x slower untuned matmuls on Zen 4)
    *(f"log2p1_leaf_traffic_bytes_{name}" for name, _, _ in SET_ASSOC_CACHES),
)
D = len(LEAF_FEATURES)  # 50
D_BASE = LEAF_FEATURES.index("log2_iter_extent_0")  # 32: the columns before the access signature
STRIDE_LINE_BYTES = 64
STRIDE_POW2_CAP = 16
THETA = 10000.0


@dataclass
class CompactAST:
    """The raw pieces: leaf computation vectors, serialized AST, ordering vector and its positional encoding."""

    leaves: np.ndarray  # (n_leaves, D) float64, columns LEAF_FEATURES
    sequence: list  # node ids in pre-order with -1 after each leaf
    node_kinds: list  # "block" | "loop" | "leaf" per node id
    ordering: np.ndarray  # (n_leaves,) int64: position of each leaf in `sequence`
    positional: np.ndarray  # (n_leaves, D) positional_encoding(ordering, D)

    @property
    def features(self) -> np.ndarray:
        return self.leaves + self.positional


def positional_encoding(ordering, d: int = D, theta: float = THETA) -> np.ndarray:
    """pe[x, 2k] = sin(V[x] / theta^(2k/d)), pe[x, 2k+1] = cos(V[x] / theta^(2k/d)) (CDMPP §4.2)."""
    v = np.asarray(ordering, dtype=np.float64).reshape(-1, 1)
    pe = np.zeros((v.shape[0], d))
    k2 = np.arange(0, d, 2, dtype=np.float64)
    angle = v / theta ** (k2 / d)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)[:, : d // 2]
    return pe


def leaf_vector(leaf) -> list[float]:
    loops = leaf.loops
    inner = [lg(x.extent) for x in reversed(loops[-INNER_LOOPS:])]
    inner += [0.0] * (INNER_LOOPS - len(inner))

    def kind(k):
        sel = [x.extent for x in loops if x.kind == k]
        return [float(len(sel)), lg(math.prod(sel))]

    stride = leaf.stride
    moves = [abs(x) for x in leaf.load_strides]
    far = [min((x & -x).bit_length() - 1, STRIDE_POW2_CAP) for x in moves if x >= STRIDE_LINE_BYTES]
    row = [leaf.float_add_sub, leaf.float_mul, leaf.float_div_mod, leaf.float_exp_log, leaf.float_math_other,
           leaf.float_cmp_select_minmax, leaf.int_ops,
           leaf.n_loads, 1, leaf.bytes_read, leaf.bytes_written, len(leaf.buffers),
           len(loops), lg(math.prod(x.extent for x in loops)), *inner,
           *kind(FOR_VECTORIZED), *kind(FOR_UNROLLED), *kind(FOR_PARALLEL), *kind(FOR_THREAD),
           math.log2(1 + max((x.auto_unroll for x in loops), default=0)),
           float(leaf.is_init), float(stride == 1), math.log2(1 + abs(stride)) if stride is not None else 0.0,
           math.log2(1 + max(moves, default=0)), float(max(far, default=0))]
    elem = leaf.bytes_read / leaf.n_loads if leaf.n_loads else 0  # the loads' mean element size
    for k in range(ACCESS_LOOPS):
        if k >= len(leaf.access):
            row += [0.0, 0.0, 0.0, 0.0]
            continue
        extent, store_move, store_elem, load_moves, n_loads = leaf.access[k]
        cls = 0 if store_move is None else 1 if store_move == 0 else 2 if abs(store_move) == store_elem else 3
        vec = sum(1 for m in load_moves if m == 0 or abs(m) == elem)
        row += [lg(extent), float(cls), vec / n_loads if n_loads else 0.0,
                math.log2(1 + max((abs(m) for m in load_moves), default=0))]
    row += [math.log2(1 + cache_traffic([leaf], cap)) for cap in (math.inf, *(c for _, c in LEAF_CACHE_CAPACITIES))]
    row += [math.log2(1 + cache_traffic([leaf], cap, ways)) for _, cap, ways in SET_ASSOC_CACHES]
    return [float(x) for x in row]


@register
class CompactASTExtractor(FeatureExtractor):
    """CDMPP compact AST of a program -> float64 array of shape (n_leaves, 50).

    Row i is leaf i's computation vector (columns `LEAF_FEATURES`, D = 50) plus the sinusoidal positional
    encoding of its ordering-vector entry (theta = 10000, d = D). `compact_ast(program)` returns the pieces.
    """

    name = "compact_ast"
    version = 6  # 2: the two load-stride columns; 3: strides along the innermost loop with extent > 1; 4: the
    # access signature of the three innermost iterating loops; 5: the store's cache footprint and traffic; 6: the
    # set-associative L1 traffic (two columns appended: version 5's features are the first 48, `cache.PRIOR_TAGS`)
    ndim = 2

    def feature_names(self) -> list[str]:
        return list(LEAF_FEATURES)

    def compact_ast(self, program) -> CompactAST:
        w = walk(as_primfunc(program))
        sequence, ordering = [], []
        for node_id, kind in enumerate(w.node_kinds):
            sequence.append(node_id)
            if kind == "leaf":
                ordering.append(len(sequence) - 1)
                sequence.append(-1)
        leaves = np.array([leaf_vector(x) for x in w.leaves], dtype=np.float64).reshape(-1, D)
        ordering = np.array(ordering, dtype=np.int64)
        return CompactAST(leaves, sequence, list(w.node_kinds), ordering, positional_encoding(ordering))

    def extract(self, program) -> np.ndarray:
        return self.compact_ast(program).features
