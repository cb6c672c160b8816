"""Program-level static figures (the TPU cost model's optional static performance features, §3.1, and more).

Counts come from the same walk as the compact AST: each store's per-execution counts times the number of times it
runs, which is the product of its enclosing loops' trip counts, except that a reduction block's init store does not
run again for loops whose variable feeds only the block's reduction variables (a (M,N,K) matmul's init runs M*N
times, its update M*N*K times). Block predicates (`T.where`) are ignored and a non-constant extent counts as 1.

Version 2 added memory-hierarchy figures: the bytes of distinct cache lines the program touches and the bytes caches
of seven capacities (16 KiB to 64 MiB) would move in, from a stack-distance footprint model of each store's loop
nest (`_tir.cache_traffic`). TVM's unscheduled kernels are where this matters most: a naive matmul whose weight
matrix outgrows a cache level runs several times slower per FLOP, which operation counts alone cannot tell.
Version 3 adds the same traffic into set-associative L1 caches (64 sets of 8 or 12 ways): a walk down a weight
matrix whose rows are a multiple of 2 or 4 KiB falls into one or two sets.
"""

from __future__ import annotations

import math

import numpy as np

from ._tir import FOR_PARALLEL, FOR_VECTORIZED, SET_ASSOC_CACHES, arg_buffer_bytes, cache_traffic, walk
from .base import FeatureExtractor, as_primfunc, register

CACHE_CAPACITIES = tuple((f"{kib}KiB" if kib < 1024 else f"{kib // 1024}MiB", kib * 1024)
                         for kib in (16, 64, 256, 1024, 4096, 16384, 65536))
ANALYTIC_FEATURES = (
    "flops",  # sum over stores of float ops per execution (every LEAF_FEATURES float_* column) x executions
    "bytes_read",  # sum over stores of loaded bytes per execution x executions
    "bytes_written",  # sum over stores of stored bytes per execution x executions
    "arithmetic_intensity",  # flops / (bytes_read + bytes_written), 0 without memory traffic
    "total_trip_count",  # sum over For loops of the times their body runs (extent x enclosing extents)
    "max_parallel_extent",  # max over loops of the product of the parallel extents around and at it (0: none)
    "max_vector_extent",  # the same for vectorized loops
    "n_leaves",  # stores
    "max_nest_depth",  # deepest loop nest around a store
    "n_buffers",  # distinct buffers stored or loaded (arguments and intermediates)
    "arg_bytes",  # total bytes of the function's buffer arguments
    "footprint_bytes",  # bytes of the distinct cache lines the stores' accesses touch (summed over stores)
    # bytes a fully associative LRU cache of that capacity would move in (`_tir.cache_traffic`: a stack-distance
    # footprint model over each store's loop nest); the device features say which capacities a device has
    *(f"traffic_bytes_{name}" for name, _ in CACHE_CAPACITIES),
    # the same into a set-associative L1 (`_tir.SET_ASSOC_CACHES`: 64 sets of 8 or 12 ways): conflict misses of
    # strides that are a multiple of 2 or 4 KiB (`_tir.cache_traffic(..., ways)`)
    *(f"traffic_bytes_{name}" for name, _, _ in SET_ASSOC_CACHES),
)


def _max_kind_product(w, kind: int) -> float:
    best = 0
    for path in w.loop_paths:
        if path[-1].kind == kind:
            best = max(best, math.prod(x.extent for x in path if x.kind == kind))
    return float(best)


@register
class AnalyticExtractor(FeatureExtractor):
    """Static figures of a program -> float64 vector of length 21 (`ANALYTIC_FEATURES`).

    With `log=True` every entry x becomes log2(1 + x).
    """

    name = "analytic"
    version = 3  # 2: footprint and cache traffic at seven capacities; 3: set-associative L1 traffic (two columns
    # appended: version 2's features are the first 19, `cache.PRIOR_TAGS`). Versions 4 (2026-12-01, loop-invariant
    # work) and 5 (2026-12-03, accumulator tile and masked tail: commit 750ca93) were tried and removed; the next
    # version is 6, so that no cache of theirs (`ca6-ps1-an4`, `ca6-ps1-an5`) is read as its own
    ndim = 1

    def __init__(self, log: bool = False):
        self.log = bool(log)

    def params(self) -> dict:
        return {"log": self.log}

    def feature_names(self) -> list[str]:
        return list(ANALYTIC_FEATURES)

    def figures(self, program) -> dict[str, float]:
        func = as_primfunc(program)
        w = walk(func)
        flops = float(sum(x.float_ops * x.executions for x in w.leaves))
        read = float(sum(x.bytes_read * x.executions for x in w.leaves))
        written = float(sum(x.bytes_written * x.executions for x in w.leaves))
        buffers = set().union(*(x.buffers for x in w.leaves)) if w.leaves else set()
        return {
            "flops": flops,
            "bytes_read": read,
            "bytes_written": written,
            "arithmetic_intensity": flops / (read + written) if read + written else 0.0,
            "total_trip_count": float(sum(w.loop_iterations)),
            "max_parallel_extent": _max_kind_product(w, FOR_PARALLEL),
            "max_vector_extent": _max_kind_product(w, FOR_VECTORIZED),
            "n_leaves": float(len(w.leaves)),
            "max_nest_depth": float(max((len(x.loops) for x in w.leaves), default=0)),
            "n_buffers": float(len(buffers)),
            "arg_bytes": float(arg_buffer_bytes(func)),
            "footprint_bytes": cache_traffic(w.leaves, math.inf),
            **{f"traffic_bytes_{name}": cache_traffic(w.leaves, cap) for name, cap in CACHE_CAPACITIES},
            **{f"traffic_bytes_{name}": cache_traffic(w.leaves, cap, ways) for name, cap, ways in SET_ASSOC_CACHES},
        }

    def extract(self, program) -> np.ndarray:
        fig = self.figures(program)
        v = np.array([fig[k] for k in ANALYTIC_FEATURES], dtype=np.float64)
        return np.log2(1.0 + v) if self.log else v
