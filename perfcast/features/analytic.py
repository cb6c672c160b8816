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
Version 5 adds twelve figures of the main update store (the non-init store that runs most often), for the slow
random conv2d schedules every earlier feature took for fast ones (README "The worst of the by_network conv2d
programs"): its accumulator tile (the elements the store sweeps inside its innermost reduction loop, re-read and
re-written on every step of that loop when the reduction is outermost) and the masked tail LLVM gives its contiguous
innermost loop when the extent is not a multiple of the vector width (masked loads that overlap the masked store
before them cannot be forwarded from it).
"""

from __future__ import annotations

import math

import numpy as np

from ._tir import (ACCESS_LOOPS, FOR_PARALLEL, FOR_SERIAL, FOR_UNROLLED, FOR_VECTORIZED, SET_ASSOC_CACHES,
                   arg_buffer_bytes, cache_traffic, walk)
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
    # the main update store's innermost reduction loop r: the innermost enclosing loop with extent > 1 along which
    # the store's address stays (every acc_* figure is 0 when it has none)
    "acc_tile_elems",  # product of the extents of the loops inside r: the accumulator tile one step of r sweeps
    "acc_tile_bytes",  # that times the store's element bytes
    "acc_inner_loops",  # loops with extent > 1 inside r
    "acc_red_extent",  # r's extent
    "acc_outer_red_extent",  # product of the extents > 1 of the reduction loops (store stays) outside r
    "acc_outer_spatial_extent",  # product of the extents > 1 of the spatial, non-parallel loops outside r
    # the store's contiguous loop: the innermost of its ACCESS_LOOPS innermost loops with extent > 1 along which the
    # store moves by one element (`Leaf.access`)
    "tail_contig_loop",  # its position among those loops, innermost first (0: the innermost; ACCESS_LOOPS: none)
    "tail_not_mult8",  # 1 when its extent is not a multiple of 8 (a masked tail at AVX2 / AVX-512 widths)
    "tail_not_mult16",  # 1 when its extent is not a multiple of 16
    "tail_left_to_llvm",  # 1 when it is serial or unrolled: LLVM picks its vector width and tail
    "tail_hazard8",  # tail_not_mult8 x tail_left_to_llvm x (acc_tile_elems > 64): masked accumulator rows
    "tail_hazard16",  # the same with tail_not_mult16
)
TILE_HAZARD_ELEMS = 64  # an accumulator tile above this many elements no longer stays in registers across r


def _max_kind_product(w, kind: int) -> float:
    best = 0
    for path in w.loop_paths:
        if path[-1].kind == kind:
            best = max(best, math.prod(x.extent for x in path if x.kind == kind))
    return float(best)


def update_store_figures(w) -> dict[str, float]:
    """The acc_* and tail_* figures of `ANALYTIC_FEATURES` for a walk (see there); zeros without an update store."""
    ups = [x for x in w.leaves if not x.is_init and x.footprint]
    out = dict.fromkeys([k for k in ANALYTIC_FEATURES if k.startswith(("acc_", "tail_"))], 0.0)
    out["tail_contig_loop"] = float(ACCESS_LOOPS)
    if not ups:
        return out
    leaf = max(ups, key=lambda x: x.executions)  # the first of the most executed on a tie
    elem, _, moves = leaf.footprint[0]  # the store's access comes first
    loops = leaf.loops
    r = next((i for i in reversed(range(len(loops))) if loops[i].extent > 1 and moves[i] == 0), None)
    tile = 0
    if r is not None:
        inner = [x.extent for x in loops[r + 1:] if x.extent > 1]
        tile = math.prod(inner)
        out.update(acc_tile_elems=tile, acc_tile_bytes=tile * elem, acc_inner_loops=len(inner),
                   acc_red_extent=loops[r].extent,
                   acc_outer_red_extent=math.prod(x.extent for x, m in zip(loops[:r], moves[:r]) if m == 0),
                   acc_outer_spatial_extent=math.prod(x.extent for x, m in zip(loops[:r], moves[:r])
                                                      if m != 0 and x.kind != FOR_PARALLEL))
    k = next((i for i, a in enumerate(leaf.access) if a[1] == a[2]), None)  # store moves by its element bytes
    if k is not None:
        iterating = [x for x in reversed(loops) if x.extent > 1]  # innermost first, as `Leaf.access`
        extent, left = leaf.access[k][0], iterating[k].kind in (FOR_SERIAL, FOR_UNROLLED)
        big = tile > TILE_HAZARD_ELEMS
        out.update(tail_contig_loop=k, tail_not_mult8=extent % 8 != 0, tail_not_mult16=extent % 16 != 0,
                   tail_left_to_llvm=left, tail_hazard8=extent % 8 != 0 and left and big,
                   tail_hazard16=extent % 16 != 0 and left and big)
    return {k: float(v) for k, v in out.items()}


@register
class AnalyticExtractor(FeatureExtractor):
    """Static figures of a program -> float64 vector of length 33 (`ANALYTIC_FEATURES`).

    With `log=True` every entry x becomes log2(1 + x).
    """

    name = "analytic"
    version = 5  # 2: footprint and cache traffic at seven capacities; 3: set-associative L1 traffic (two columns
    # appended: version 2's features are the first 19, `cache.PRIOR_TAGS`); 5: the main update store's accumulator
    # tile and masked tail (twelve columns appended: version 3's are the first 21). Version 4 (2026-12-01, four
    # loop-invariant-work columns) was tried and removed; its caches (`ca6-ps1-an4`) are never read
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
            **update_store_figures(w),
        }

    def extract(self, program) -> np.ndarray:
        fig = self.figures(program)
        v = np.array([fig[k] for k in ANALYTIC_FEATURES], dtype=np.float64)
        return np.log2(1.0 + v) if self.log else v
