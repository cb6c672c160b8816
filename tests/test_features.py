"""Feature extractors on hand-written TIR with values worked out by hand (no building, no tuning: a few seconds)."""

import json
import math
import os

import numpy as np
import pytest

from perfcast.errors import PerfcastError
from perfcast.features import (ANALYTIC_FEATURES, LEAF_FEATURES, as_primfunc, get_extractor, list_extractors,
                               positional_encoding)
from perfcast.features._tir import SET_ASSOC_CACHES
from perfcast.features.analytic import CACHE_CAPACITIES

TRAFFIC_NAMES = [name for name, _ in CACHE_CAPACITIES] + [name for name, _, _ in SET_ASSOC_CACHES]  # traffic_bytes_*
from perfcast.features.base import FeatureExtractor

lg = math.log2


@pytest.fixture(scope="module")
def progs(recompute_rowsum):
    """ew: 4x8 elementwise; mm: (4,16,8) matmul with init; vp: parallel/unroll/vectorized; pad: padding select;
    inv: a reduction recomputed inside a loop it does not depend on (conftest's `recompute_rowsum`)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def ew(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i, j in T.grid(4, 8):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)

    @T.prim_func(s_tir=True)
    def mm(A: T.Buffer((4, 8), "float32"), B: T.Buffer((8, 16), "float32"), C: T.Buffer((4, 16), "float32")):
        for i, j, k in T.grid(4, 16, 8):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    @T.prim_func(s_tir=True)
    def vp(A: T.Buffer((8, 64), "float32"), B: T.Buffer((8, 64), "float16")):
        for i in T.parallel(8, annotations={"pragma_auto_unroll_max_step": 16}):
            for j0 in T.unroll(4):
                for j1 in T.vectorized(16):
                    with T.sblock("B"):
                        vi = T.axis.spatial(8, i)
                        vj = T.axis.spatial(64, j0 * 16 + j1)
                        B[vi, vj] = T.Cast("float16", T.max(T.exp(A[vi, vj]) / T.sqrt(A[vi, vj] + T.float32(1)),
                                                            T.float32(0)))

    @T.prim_func(s_tir=True)
    def pad(A: T.Buffer((6,), "float32"), P: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.sblock("P"):
                vi = T.axis.spatial(8, i)
                P[vi] = T.if_then_else(1 <= vi and vi < 7, A[vi - 1], T.float32(0))

    return {"ew": ew, "mm": mm, "vp": vp, "pad": pad, "inv": recompute_rowsum}


def leaf(**nonzero) -> np.ndarray:
    """A leaf vector: every feature 0 except `nonzero` (n_stores is always 1)."""
    row = dict.fromkeys(LEAF_FEATURES, 0.0)
    row["n_stores"] = 1.0
    for k, v in nonzero.items():
        assert k in row, k
        row[k] = float(v)
    return np.array([row[k] for k in LEAF_FEATURES])


def cache_cols(nbytes: float) -> dict:
    """The per-store cache columns of a store whose lines all fit in every capacity: footprint = traffic."""
    return {k: lg(1 + nbytes) for k in LEAF_FEATURES if k.startswith(("log2p1_leaf_footprint", "log2p1_leaf_traffic"))}


def test_leaf_layout():
    assert len(LEAF_FEATURES) == 50 == get_extractor("compact_ast").length
    assert len(set(LEAF_FEATURES)) == 50


# ---------------------------------------------------------------------------------------------- compact AST
def test_compact_ast_elementwise(progs):
    ast = get_extractor("compact_ast").compact_ast(progs["ew"])
    # root block(0) > loop i(1) > loop j(2) > block B(3) > store(4)
    assert ast.node_kinds == ["block", "loop", "loop", "block", "leaf"]
    assert ast.sequence == [0, 1, 2, 3, 4, -1]
    assert ast.ordering.tolist() == [4]
    # A*2+1: 1 add, 1 mul, 1 load of 4 bytes, 4 bytes stored, buffers A and B; loops 4 x 8; the store's last
    # index vj = j moves by 1 with the innermost loop j. Access signature: along j the store and the load move one
    # float (contiguous, a vector load); along i both move a row of 8 floats (32 bytes: strided)
    expect = leaf(float_add_sub=1, float_mul=1, n_loads=1, bytes_read=4, bytes_written=4, n_buffers=2,
                  nest_depth=2, log2_loop_product=lg(32), log2_inner_extent_0=lg(8), log2_inner_extent_1=lg(4),
                  store_contiguous=1, log2p1_store_stride=lg(2), log2p1_max_load_stride_bytes=lg(5),
                  log2_iter_extent_0=lg(8), iter_store_class_0=2, iter_vector_load_share_0=1,
                  log2p1_iter_max_load_stride_0=lg(5),
                  log2_iter_extent_1=lg(4), iter_store_class_1=3, log2p1_iter_max_load_stride_1=lg(33),
                  # cache: B and A are 128 bytes each, contiguous: 2 lines each, 256 bytes, every cache holds them
                  **cache_cols(4 * 64))
    np.testing.assert_array_equal(ast.leaves, expect[None, :])


def test_compact_ast_matmul_init_and_update(progs):
    ast = get_extractor("compact_ast").compact_ast(progs["mm"])
    # root(0) > i(1) > j(2) > k(3) > block C(4) > init store(5), update store(6)
    assert ast.node_kinds == ["block", "loop", "loop", "loop", "block", "leaf", "leaf"]
    assert ast.sequence == [0, 1, 2, 3, 4, 5, -1, 6, -1]
    assert ast.ordering.tolist() == [5, 7]
    ctx = dict(nest_depth=3, log2_loop_product=lg(4 * 16 * 8), log2_inner_extent_0=lg(8),
               log2_inner_extent_1=lg(16), log2_inner_extent_2=lg(4))
    # C[vi, vj] does not move with the innermost (reduction) loop k: stride 0, not contiguous. Loads along k:
    # C 0 bytes, A[vi, vk] 4, B[vk, vj] one row of 16 floats = 64 bytes = 2^6 (a new cache line each iteration)
    # Access signature, innermost first k, j, i: C stays along k (a reduction), moves one float along j, a row of
    # 16 floats along i. Update loads C, A, B move 0/4/64 bytes along k (2 of 3 vector-friendly), 4/0/4 along j
    # (all 3), 64/32/0 along i (B only)
    ctx |= dict(log2_iter_extent_0=lg(8), iter_store_class_0=1, log2_iter_extent_1=lg(16), iter_store_class_1=2,
                log2_iter_extent_2=lg(4), iter_store_class_2=3)
    init = leaf(bytes_written=4, n_buffers=1, is_init=1, **ctx)
    update = leaf(float_add_sub=1, float_mul=1, n_loads=3, bytes_read=12, bytes_written=4, n_buffers=3,
                  log2p1_max_load_stride_bytes=lg(65), load_stride_pow2=6,
                  iter_vector_load_share_0=2 / 3, log2p1_iter_max_load_stride_0=lg(65),
                  iter_vector_load_share_1=1, log2p1_iter_max_load_stride_1=lg(5),
                  iter_vector_load_share_2=1 / 3, log2p1_iter_max_load_stride_2=lg(65), **ctx,
                  **cache_cols(14 * 64))  # C 4 lines, A 2, B 8 (test_cache_traffic_by_hand); the init store: 0
    np.testing.assert_array_equal(ast.leaves, np.stack([init, update]))


def test_compact_ast_loop_kinds_and_math(progs):
    ast = get_extractor("compact_ast").compact_ast(progs["vp"])
    assert ast.sequence == [0, 1, 2, 3, 4, 5, -1] and ast.ordering.tolist() == [5]
    # max(exp(A) / sqrt(A + 1), 0) cast to float16: add, div, exp, sqrt, max; two 4-byte loads, a 2-byte store;
    # vj = j0*16 + j1 moves by 1 with the innermost loop j1
    expect = leaf(float_add_sub=1, float_div_mod=1, float_exp_log=1, float_math_other=1,
                  float_cmp_select_minmax=1, n_loads=2, bytes_read=8, bytes_written=2, n_buffers=2,
                  nest_depth=3, log2_loop_product=lg(8 * 4 * 16),
                  log2_inner_extent_0=lg(16), log2_inner_extent_1=lg(4), log2_inner_extent_2=lg(8),
                  n_vectorized=1, log2_vectorized_extent=lg(16), n_unrolled=1, log2_unrolled_extent=lg(4),
                  n_parallel=1, log2_parallel_extent=lg(8), log2p1_auto_unroll_max_step=lg(17),
                  store_contiguous=1, log2p1_store_stride=1, log2p1_max_load_stride_bytes=lg(5),
                  # along j1 the float16 store moves one element (2 bytes), the float32 loads one (4); along j0 16
                  # elements (32 and 64 bytes), along i a row of 64 (128 and 256 bytes)
                  log2_iter_extent_0=lg(16), iter_store_class_0=2, iter_vector_load_share_0=1,
                  log2p1_iter_max_load_stride_0=lg(5), log2_iter_extent_1=lg(4), iter_store_class_1=3,
                  log2p1_iter_max_load_stride_1=lg(65), log2_iter_extent_2=lg(8), iter_store_class_2=3,
                  log2p1_iter_max_load_stride_2=lg(257),
                  # B (8, 64) float16 = 16 lines and A (8, 64) float32 = 32 lines (two loads, one footprint entry)
                  **cache_cols(48 * 64))
    np.testing.assert_array_equal(ast.leaves, expect[None, :])


def test_compact_ast_int_ops_and_select(progs):
    ast = get_extractor("compact_ast").compact_ast(progs["pad"])
    # if_then_else(1 <= vi and vi < 7, A[vi - 1], 0.0): 1 float select; int: <=, <, and, vi - 1
    expect = leaf(float_cmp_select_minmax=1, int_ops=4, n_loads=1, bytes_read=4, bytes_written=4, n_buffers=2,
                  nest_depth=1, log2_loop_product=3, log2_inner_extent_0=3, store_contiguous=1,
                  log2p1_store_stride=1, log2p1_max_load_stride_bytes=lg(5),
                  log2_iter_extent_0=3, iter_store_class_0=2, iter_vector_load_share_0=1,
                  log2p1_iter_max_load_stride_0=lg(5),
                  **cache_cols(2 * 64))  # P: 8 floats, one line; A: 6 floats, one line
    np.testing.assert_array_equal(ast.leaves, expect[None, :])


@pytest.mark.parametrize("n, dtype, move, pow2", [
    (8, "float32", 32, 0),  # 32 bytes: within a cache line
    (16, "float32", 64, 6),
    (24, "float32", 96, 5),  # 96 = 3 * 2^5
    (512, "float32", 2048, 11),  # bert_tiny's untuned FFN matmul: 2 KiB
    (768, "float32", 3072, 10),  # vit_tiny's: 3 * 2^10
    (768, "float16", 1536, 9),
    (65536, "float32", 262144, 16),  # 2^18, capped at 16
])
def test_compact_ast_load_stride_along_the_reduction(n, dtype, move, pow2):
    """X[k, j] read with k innermost (TVM's untuned matmul reads its weight like this): the address moves one row
    of n elements per iteration."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def colsum(X: T.Buffer((4, n), dtype), Y: T.Buffer((n,), dtype)):
        for j, k in T.grid(n, 4):
            with T.sblock("Y"):
                vj, vk = T.axis.remap("SR", [j, k])
                with T.init():
                    Y[vj] = T.Cast(dtype, 0)
                Y[vj] = Y[vj] + X[vk, vj]

    leaves = get_extractor("compact_ast").compact_ast(colsum).leaves
    col = {k: LEAF_FEATURES.index(k) for k in ("log2p1_max_load_stride_bytes", "load_stride_pow2")}
    assert leaves[1, col["log2p1_max_load_stride_bytes"]] == lg(1 + move)
    assert leaves[1, col["load_stride_pow2"]] == pow2
    assert leaves[0, col["log2p1_max_load_stride_bytes"]] == 0 == leaves[0, col["load_stride_pow2"]]  # init: no load


def test_compact_ast_strides_skip_unit_loops():
    """A tile size of 1 leaves a unit loop innermost (meta-schedule's SSRSRS tiling does this often); it neither
    iterates nor vectorizes, so strides are taken along the innermost loop that iterates: here j, along which the
    store and the load are contiguous, not the unit loop ii, along which they would move a whole row (8 floats)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def tiled(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i, j, ii in T.grid(4, 8, 1):
            with T.sblock("B"):
                vi = T.axis.spatial(4, i + ii)
                vj = T.axis.spatial(8, j)
                B[vi, vj] = A[vi, vj]

    leaves = get_extractor("compact_ast").compact_ast(tiled).leaves
    col = {k: LEAF_FEATURES.index(k) for k in ("store_contiguous", "log2p1_store_stride",
                                               "log2p1_max_load_stride_bytes", "load_stride_pow2",
                                               "log2_inner_extent_0", "log2_inner_extent_1")}
    assert leaves[0, col["store_contiguous"]] == 1 and leaves[0, col["log2p1_store_stride"]] == 1
    assert leaves[0, col["log2p1_max_load_stride_bytes"]] == lg(5) and leaves[0, col["load_stride_pow2"]] == 0
    assert leaves[0, col["log2_inner_extent_0"]] == 0 and leaves[0, col["log2_inner_extent_1"]] == lg(8)
    sig = [leaves[0, LEAF_FEATURES.index(f"{c}_{k}")] for k in range(3) for c in (
        "log2_iter_extent", "iter_store_class", "iter_vector_load_share", "log2p1_iter_max_load_stride")]
    assert sig == [lg(8), 2, 1, lg(5), lg(4), 3, 0, lg(33), 0, 0, 0, 0]  # j, then i (a row of 8 floats); no third


def test_positional_encoding_closed_form(progs):
    ex = get_extractor("compact_ast")
    ast = ex.compact_ast(progs["mm"])
    d = len(LEAF_FEATURES)
    pe = np.zeros((2, d))
    for x, v in enumerate([5, 7]):
        for k in range(d // 2):
            pe[x, 2 * k] = math.sin(v / 10000 ** (2 * k / d))
            pe[x, 2 * k + 1] = math.cos(v / 10000 ** (2 * k / d))
    np.testing.assert_allclose(ast.positional, pe, rtol=0, atol=1e-12)
    np.testing.assert_allclose(positional_encoding([5, 7]), pe, rtol=0, atol=1e-12)
    out = ex.extract(progs["mm"])
    assert out.shape == (2, 50) and out.dtype == np.float64
    np.testing.assert_array_equal(out, ast.leaves + ast.positional)


def test_program_forms_agree(progs):
    """IRModule, PrimFunc and TVMScript text (a record's tir_script) give the same features."""
    import tvm

    mod = tvm.IRModule({"main": progs["mm"]})
    for name in ("compact_ast", "analytic"):
        ex = get_extractor(name)
        ref = ex.extract(progs["mm"])
        np.testing.assert_array_equal(ex.extract(mod), ref)
        np.testing.assert_array_equal(ex.extract(mod.script()), ref)
    with pytest.raises(TypeError, match="IRModule, PrimFunc or TVMScript"):
        as_primfunc(42)


# ---------------------------------------------------------------------------------------------- analytic
def figures(prog):
    return get_extractor("analytic").figures(prog)


def test_analytic_matmul(progs):
    f = figures(progs["mm"])
    m, n, k = 4, 16, 8
    # update: 2 flops x M*N*K; init stores 0.0 (no flop) and runs M*N times (not again for each k)
    assert f["flops"] == 2 * m * n * k == 1024
    assert f["bytes_read"] == 3 * 4 * m * n * k  # C, A, B per update
    assert f["bytes_written"] == 4 * m * n + 4 * m * n * k  # init + update
    assert f["arithmetic_intensity"] == 1024 / (6144 + 2304)
    assert f["total_trip_count"] == m + m * n + m * n * k
    assert (f["max_parallel_extent"], f["max_vector_extent"]) == (0, 0)
    assert (f["n_leaves"], f["max_nest_depth"], f["n_buffers"]) == (2, 3, 3)
    assert f["arg_bytes"] == 4 * (m * k + k * n + m * n)
    # distinct lines of the update's accesses (the init writes C's lines again): C 4x16 floats = 4 lines, A 4x8 = 2,
    # B 8x16 = 8; 14 x 64 bytes, and every capacity from 16 KiB up holds them all
    assert f["footprint_bytes"] == 14 * 64
    assert all(f[f"traffic_bytes_{name}"] == 14 * 64 for name in TRAFFIC_NAMES)


def test_cache_traffic_by_hand(progs):
    """The stack-distance footprint model on the (4,16,8) matmul, loops i, j, k. FP[d] = lines touched while the
    loops from depth d run once: FP[0] = 14 lines (896 B), FP[1] (j, k) = C 1 + A 1 + B 8 = 10 (640 B), FP[2] (k) =
    10 (640 B: B's column is 8 lines), FP[3] = 3 (one line each)."""
    from perfcast.features._tir import cache_traffic, walk

    leaves = walk(progs["mm"]).leaves
    assert [len(x.footprint) for x in leaves] == [0, 3]  # init store skipped; C's load is C's store again
    assert cache_traffic(leaves, 1000) == 14 * 64  # all fits: every line once
    assert cache_traffic(leaves, 700) == 14 * 64  # the (j, k) body fits: B is reused across i, 640 B apart
    # only one k run's lines fit (192 <= 300 < 640): each (i, j) moves in its 10 lines again
    assert cache_traffic(leaves, 300) == 10 * 4 * 16 * 64
    assert cache_traffic(leaves, 100) == 10 * 4 * 16 * 64  # not even 3 lines: no smaller unit than one k run


@pytest.mark.parametrize("elem, size, moves, extents, lines", [
    (4, None, [4], [16], 1),  # 16 contiguous floats: one line
    (4, None, [4], [17], 2),
    (4, None, [128], [8], 8),  # a column, rows 128 B apart: a line per row
    (4, None, [32], [8], 4),  # rows 32 B apart: 8 x 32 B = 256 B of lines (two rows per line)
    (4, None, [4, 256], [16, 4], 4),  # 4 rows of 64 B
    (4, None, [1024, 1024], [6, 3], 8),  # conv-style h + kh on 1 KiB rows: rows 0..7, not 18
    (4, None, [2048, 1024], [6, 3], 13),  # stride-2 conv rows: 2*5 + 2 + 1 = 13 rows
    (4, 1024, [4096], [100], 16),  # capped at the buffer's 16 lines
    (4, None, [0, 4], [50, 8], 1),  # a loop that does not move the access adds nothing
    (2, None, [None], [64], 2),  # an unknown move counts as one element: 64 x 2 B
])
def test_access_lines(elem, size, moves, extents, lines):
    from perfcast.features._tir import access_geometry

    assert access_geometry(elem, size, moves, extents)[0] == lines


@pytest.mark.parametrize("elem, size, moves, extents, lines, sets", [
    (4, None, [4096], [100], 100, 1),  # a column of 4 KiB rows: 64 lines apart, every line in one of 64 sets
    (4, None, [2048], [128], 128, 2),  # 2 KiB rows: 32 lines apart, two sets
    (4, None, [1024], [128], 128, 4),  # 1 KiB rows: 16 lines apart, four sets
    (4, None, [4000], [256], 256, 64),  # 4000 B rows are no whole number of lines: all sets
    (4, None, [192], [10], 10, 10),  # 3 lines apart (odd): ten lines, ten sets
    (4, None, [4, 4096], [32, 8], 16, 2),  # 2-line runs of 8 rows 4 KiB apart: two sets
    (4, None, [4], [4096], 256, 64),  # 16 KiB contiguous: every set, four lines each
    (4, 1024, [4096], [100], 16, 16),  # capped at the buffer's 16 lines, which are consecutive
])
def test_access_geometry(elem, size, moves, extents, lines, sets):
    from perfcast.features._tir import access_geometry

    assert access_geometry(elem, size, moves, extents, 64) == (lines, sets)


def test_set_associative_traffic_of_a_column_walk(naive_matmul):
    """(64, n, 256) matmuls. One k run touches C 1 + A 16 + B 256 lines (17,472 B): a fully associative 32 KiB L1
    keeps them, so B's lines serve the next 15 j (16 floats a line). With n = 1024 B's rows are 4 KiB apart: its 256
    lines share one of L1's 64 sets; the fullest set holds 273/64 + (256 - 256/64) = 256.3 lines > 8 (or 12) ways, so
    every (i, j) moves its 273 lines in again. In a 2048-set L2 they share 32 sets, 8 a set: with the mean 273/2048
    the fullest holds 8.008 > 8 ways (1 MiB 8-way: the k run is moved in again, as in L1) but <= 16 (2 MiB 16-way:
    the k run stays; then the (j, k) body, 16,464 lines at most 9.03 a set, and the whole nest, 21,504 lines at most
    10.5 a set, fit too: every line once, 1,376,256 B). With n = 1000 (4,000 B rows) B spreads over all 64 sets
    (4 a set): 273/64 + (1 - 1/64) (C's one line) = 5.25 <= 8 ways, the k run stays, and the (j, k) body (C 63 + A 16
    + B 16,000 lines) does not fit any L1: 16,079 lines per i, as fully associative."""
    from perfcast.features._tir import cache_traffic, walk

    aliased = walk(naive_matmul(64, 1024, 256)).leaves
    for ways in (8, 12):
        assert cache_traffic(aliased, 64 * 64 * ways, ways) == 273 * 64 * 64 * 1024
    assert cache_traffic(aliased, 32 << 10) == 16464 * 64 * 64
    assert cache_traffic(aliased, 1 << 20, 8) == 273 * 64 * 64 * 1024
    assert cache_traffic(aliased, 2 << 20, 16) == cache_traffic(aliased, 2 << 20) == 1376256
    spread = walk(naive_matmul(64, 1000, 256)).leaves
    for ways in (8, 12):
        assert cache_traffic(spread, 64 * 64 * ways, ways) == cache_traffic(spread, 32 << 10) == 16079 * 64 * 64
    # the features: compact-AST columns (update store) and analytic figures, in SET_ASSOC_CACHES order (the L1s)
    want = [273 * 64 * 64 * 1024] * 2
    leaves = get_extractor("compact_ast").compact_ast(naive_matmul(64, 1024, 256)).leaves
    cols = [LEAF_FEATURES.index(f"log2p1_leaf_traffic_bytes_{name}") for name, _, _ in SET_ASSOC_CACHES]
    assert leaves[1, cols].tolist() == [lg(1 + x) for x in want] and leaves[0, cols].tolist() == [0] * 2
    f = figures(naive_matmul(64, 1024, 256))
    assert [f[f"traffic_bytes_{name}"] for name, _, _ in SET_ASSOC_CACHES] == want


def test_cache_traffic_naive_matmul_outgrows_the_caches(naive_matmul):
    """TVM's untuned (64, 1024, 256) matmul, loops i, j, k: the weight B (1 MiB) is read down its columns.
    FP[2] (k) = C 1 + A 16 + B 256 lines (17,472 B); FP[1] (j, k) = C 64 + A 16 + B 16,384 (1,053,696 B, just over
    1 MiB); FP[0] = C 4,096 + A 1,024 + B 16,384 (1,376,256 B)."""
    mm = naive_matmul(64, 1024, 256)
    f = figures(mm)
    assert f["footprint_bytes"] == 21504 * 64 == 1376256
    leaves = get_extractor("compact_ast").compact_ast(mm).leaves  # the same figures per store: 32 KiB, 1 MiB, 32 MiB
    cols = [LEAF_FEATURES.index(k) for k in ("log2p1_leaf_footprint_bytes", "log2p1_leaf_traffic_bytes_32KiB",
                                             "log2p1_leaf_traffic_bytes_1MiB", "log2p1_leaf_traffic_bytes_32MiB")]
    assert leaves[0, cols].tolist() == [0, 0, 0, 0]  # the init store: its lines are the update's
    assert leaves[1, cols].tolist() == [lg(1 + 1376256), lg(1 + 16464 * 64 * 64), lg(1 + 16464 * 64 * 64),
                                        lg(1 + 1376256)]
    # 16 KiB: one k run (273 lines) does not stay: every (i, j) moves its 273 lines in again
    assert f["traffic_bytes_16KiB"] == 273 * 64 * 1024 * 64
    # 64 KiB .. 1 MiB: a k run fits but the (j, k) body does not: each i moves in FP[1] again
    for name in ("64KiB", "256KiB", "1MiB"):
        assert f[f"traffic_bytes_{name}"] == 16464 * 64 * 64
    for name in ("4MiB", "16MiB", "64MiB"):  # everything fits: each line once
        assert f[f"traffic_bytes_{name}"] == 1376256


def test_analytic_matches_tvm_flop_estimate(progs):
    """Where the definitions coincide (add/mul only), TVM's own estimate agrees."""
    import tvm

    from perfcast._tvm.util import estimate_flops

    for name in ("ew", "mm"):
        assert figures(progs[name])["flops"] == estimate_flops(tvm.IRModule({"main": progs[name]}))


def test_analytic_vectorized_parallel(progs):
    f = figures(progs["vp"])
    trips = 8 * 4 * 16
    assert f == {"flops": 5 * trips, "bytes_read": 8 * trips, "bytes_written": 2 * trips,
                 "arithmetic_intensity": 0.5, "total_trip_count": 8 + 8 * 4 + trips, "max_parallel_extent": 8,
                 "max_vector_extent": 16, "n_leaves": 1, "max_nest_depth": 3, "n_buffers": 2,
                 "arg_bytes": 8 * 64 * 4 + 8 * 64 * 2,
                 # A (2 KiB) and B (1 KiB) each read once, contiguously: 48 lines
                 "footprint_bytes": 3072, **{f"traffic_bytes_{name}": 3072 for name in TRAFFIC_NAMES}}
    ex = get_extractor("analytic")
    np.testing.assert_array_equal(ex.extract(progs["vp"]), [f[k] for k in ANALYTIC_FEATURES])
    np.testing.assert_allclose(get_extractor("analytic", log=True).extract(progs["vp"]),
                               np.log2(1 + ex.extract(progs["vp"])))


def test_walk_finds_loop_invariant_work(progs):
    """The row sum runs once per (i, j) although it depends only on i: j (8) is an invariant loop of both its stores
    (the init store skips k, which feeds only the reduction), with k (8) inside it for the update and 8 as well for
    the init (its own loops inside j: k); Y's store moves with j. The other programs have no invariant loop."""
    from perfcast.features._tir import walk

    init, update, y = walk(progs["inv"]).leaves
    assert (init.is_init, init.executions, init.invariant_extent, init.invariant_body) == (True, 32, 8, 8)
    assert (update.executions, update.invariant_extent, update.invariant_body) == (256, 8, 8)
    assert (y.executions, y.invariant_extent, y.invariant_body) == (32, 1, 0)
    for name in ("ew", "mm", "vp", "pad"):
        assert all((x.invariant_extent, x.invariant_body) == (1, 0) for x in walk(progs[name]).leaves), name


def test_analytic_elementwise(progs):
    f = figures(progs["ew"])
    assert (f["flops"], f["bytes_read"], f["bytes_written"], f["total_trip_count"]) == (64, 128, 128, 36)
    assert f["arg_bytes"] == 256


# ---------------------------------------------------------------------------------------------- per store
def test_per_store(progs):
    ps = get_extractor("per_store")
    a = ps.extract(progs["mm"])
    # TVM keeps one row per stored buffer: the init and update stores of C make one row
    assert a.shape == (1, 164) and a.dtype == np.float64
    np.testing.assert_array_equal(a, ps.extract(progs["mm"]))
    assert ps.extract(progs["ew"]).shape == (1, 164)
    agg = get_extractor("per_store", aggregate=True, reduce="mean").extract(progs["mm"])
    np.testing.assert_array_equal(agg, a.mean(axis=0))
    assert get_extractor("per_store", extract_workload=True).extract(progs["mm"]).shape == (1, 172)
    assert ps.params()["target"]["kind"] == "llvm" and ps.params()["target"]["num-cores"] == 2
    with pytest.raises(ValueError, match="reduce must be one of"):
        get_extractor("per_store", reduce="max")


# ---------------------------------------------------------------------------------------------- registry
def test_registry_contract(progs):
    assert set(list_extractors()) >= {"compact_ast", "analytic", "per_store", "device", "asm", "mca"}
    for name in list_extractors():
        ex = get_extractor(name)
        assert isinstance(ex, FeatureExtractor) and ex.name == name
        assert isinstance(ex.version, int) and ex.version >= 1
        arg = "t4" if ex.input_kind == "device" else progs["mm"]
        a, b = ex.extract(arg), ex.extract(arg)
        assert isinstance(a, np.ndarray) and a.dtype == np.float64
        np.testing.assert_array_equal(a, b)
        assert a.ndim == ex.ndim and a.shape[-1] == ex.length == len(ex.feature_names()), name


def test_device_features():
    from perfcast.devices import get_device

    ex = get_extractor("device")
    spec = get_device("t4")
    np.testing.assert_array_equal(ex.extract("t4"), spec.feature_vector())
    np.testing.assert_array_equal(ex.extract(spec), spec.feature_vector())
    assert ex.extract("local").shape == (11,)


def test_program_features_on_another_device(progs):
    """`on_device` puts every program on one device vector and leaves the programs' own features as they were; a
    vector of the wrong length is refused."""
    import tvm

    from perfcast.devices import get_device
    from perfcast.errors import PerfcastError
    from perfcast.features.cache import features_of_programs

    X = features_of_programs([tvm.IRModule({"main": progs["mm"]}), tvm.IRModule({"main": progs["ew"]})], "local")
    t4 = get_device("t4").feature_vector()
    Y = X.on_device(t4)
    np.testing.assert_array_equal(Y.device, np.stack([t4, t4]).astype(np.float32))
    assert not np.array_equal(X.device[0], Y.device[0])  # X itself is untouched
    np.testing.assert_array_equal(Y.analytic, X.analytic)
    assert all(np.array_equal(a, b) for a, b in zip(Y.leaves, X.leaves)) and Y.stores is X.stores
    with pytest.raises(PerfcastError, match=r"a device vector of shape \(3,\): these features take 11 device"):
        X.on_device([1.0, 2.0, 3.0])


def test_unknown_extractor():
    from perfcast.errors import PerfcastError

    with pytest.raises(ValueError, match="unknown feature extractor 'nope'"):
        get_extractor("nope")
    with pytest.raises(PerfcastError, match="bad parameters for feature extractor 'analytic'"):
        get_extractor("analytic", bogus=1)


def test_program_features_share_one_walk(progs, monkeypatch):
    """A program's compact-AST and analytic features come from one walk of its TIR (the walk is the slow part)."""
    import tvm

    from perfcast.features import _tir
    from perfcast.features.cache import program_row

    mod = tvm.IRModule({"main": progs["mm"]})
    alone = (get_extractor("compact_ast").compact_ast(mod).leaves, get_extractor("analytic", log=True).extract(mod))
    walks, base = [], _tir._Walker
    monkeypatch.setattr(_tir, "_LAST_WALK", [None, None])
    monkeypatch.setattr(_tir, "_Walker", type("Counted", (base,), {
        "__init__": lambda self: (walks.append(1), base.__init__(self))[1]}))
    leaves, _, _, analytic = program_row(mod)
    assert len(walks) == 1
    np.testing.assert_array_equal(leaves, alone[0].astype(np.float32))
    np.testing.assert_array_equal(analytic, alone[1].astype(np.float32))


def test_address_moves_through_div_mod_and_select():
    """Byte-address moves, by hand, of index expressions with floordiv, floormod, min and a select (the walk
    evaluates index expressions lowered to Python once per store): A is (6, 4) float32, B (24,) float32."""
    from tvm.script import tirx as T

    from perfcast.features import _tir

    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((6, 4), "float32"), B: T.Buffer((24,), "float32")):
        for i, j in T.grid(6, 4):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi * 4 + vj] = T.if_then_else(vj < 3, A[(vi * 4 + vj) // 4, (vi * 4 + vj) % 4],
                                                A[T.min(vi + 1, 5), vj])

    w = _tir.walk(as_primfunc(f))
    (leaf,) = w.leaves
    # store B[4i + j]: i moves 4 elements = 16 B, j one = 4 B. Load A[(4i+j)//4, (4i+j)%4] at row-major (6, 4):
    # the same. Load A[min(i+1, 5), j]: one row (16 B) along i (min(1,5) -> min(2,5)), 4 B along j. The second
    # load of A with the same moves is not a second footprint entry.
    assert [(eb, size, m) for eb, size, m in leaf.footprint] == [(4, 96, (16, 4)), (4, 96, (16, 4))]
    assert leaf.access == [(4, 4, 4, [4, 4], 2), (6, 16, 4, [16, 16], 2)]  # j, then i: (extent, store move, ...)


# ---------------------------------------------------------------------------------------------- asm
# A hand-written x86 listing: a TVM runtime helper (skipped), then a compute function with a loop nest (outer .LBB1_1,
# inner .LBB1_2) and, after it, a second innermost loop (.LBB1_4).
ASM = """\
\t.text
\t.globl\t__tvm_set_raised_6
__tvm_set_raised_6:
\tvfmadd231ps\t%zmm1, %zmm2, %zmm3
\tretq
main_compute_:
\tsubq\t$40, %rsp
.LBB1_1:
\txorl\t%eax, %eax                   # comment
.LBB1_2:
\tvmovups\t(%rdi,%rax), %ymm0
\tvbroadcastss\t(%rsi), %ymm1
\tvfmadd231ps\t%ymm0, %ymm1, %ymm2
\tvfmadd231ps\t%ymm0, %ymm1, %ymm3
\tvmovups\t%ymm2, 8(%rsp)
\taddq\t$32, %rax
\tcmpq\t$256, %rax
\tjne\t.LBB1_2
\tvmovups\t%ymm2, (%rdx)
\tdecq\t%rcx
\tjne\t.LBB1_1
.LBB1_4:
\tvaddss\t(%rsi), %xmm0, %xmm0
\tjb\t.LBB1_4
\tjmp\t.LBB1_5
.LBB1_5:
\tretq
__TVMBackendParallelLaunch:
\tvdivps\t%ymm1, %ymm2, %ymm3
"""


@pytest.mark.parametrize("mnemonic, ops, cls", [
    ("vfmadd231ps", "%ymm1, %ymm2, %ymm3", "fma_ymm"), ("vfnmadd213ps", "%zmm1, %zmm2, %zmm3", "fma_zmm"),
    ("vfmadd231ss", "%xmm1, %xmm2, %xmm3", "fma_scalar"), ("vaddps", "%zmm1, %zmm2, %zmm3", "fp_zmm"),
    ("vmaxps", "%xmm1, %xmm2, %xmm3", "fp_xmm"), ("vaddss", "(%rax), %xmm0, %xmm0", "fp_scalar"),
    ("vdivps", "%ymm1, %ymm2, %ymm3", "div_sqrt"), ("vsqrtss", "%xmm1, %xmm1, %xmm1", "div_sqrt"),
    ("vgatherqps", "(%rax,%zmm1,4), %ymm0 {%k1}", "gather"), ("vscatterqps", "%ymm0, (%rax,%zmm1,4) {%k1}", "scatter"),
    ("vbroadcastss", "(%rax), %ymm0", "broadcast"), ("vinsertf128", "$1, %xmm1, %ymm0, %ymm0", "shuffle"),
    ("vmovups", "%ymm0, 32(%rsp)", "spill"), ("vmovups", "(%rax), %ymm0", "vload"),
    ("vmovups", "%ymm0, (%rax)", "vstore"), ("movq", "(%rax), %rcx", "load"), ("movl", "%ecx, 4(%rax)", "store"),
    ("vmovss", "4(%rax), %xmm2", "load"), ("vmovsd", "%xmm2, (%rcx)", "store"),
    ("leaq", "(%rax,%rcx), %rdx", "lea"), ("jne", ".LBB0_3", "branch"), ("callq", "expf@PLT", "call"),
    ("vpaddd", "%zmm1, %zmm2, %zmm3", "vec_int"),
    ("subq", "$40, %rsp", "int_alu"), ("vxorps", "%xmm0, %xmm0, %xmm0", "other")])
def test_asm_classify(mnemonic, ops, cls):
    from perfcast.features.asm import CLASSES, classify

    assert cls in CLASSES and classify(mnemonic, ops) == cls


def test_asm_loops_and_counts_by_hand():
    from perfcast.features.asm import ASM_FEATURES, asm_figures, innermost, loops, parse

    funcs = parse(ASM)
    assert len(funcs) == 1  # the runtime helpers are skipped
    # instruction positions (labels included): 0 subq, 1 .LBB1_1, 2 xorl, 3 .LBB1_2, 4..11 inner body + jne,
    # 12 vmovups, 13 decq, 14 jne .LBB1_1, 15 .LBB1_4, 16 vaddss, 17 jb, 18 jmp (forward), 19 .LBB1_5, 20 retq
    assert loops(funcs[0]) == [(3, 11), (1, 14), (15, 17)]
    assert innermost(loops(funcs[0])) == [(3, 11), (15, 17)]  # (1, 14) holds (3, 11)
    fig = asm_figures(ASM, flops=1024.0)
    assert list(fig) == list(ASM_FEATURES)
    assert (fig["n_loops"], fig["n_innermost"], fig["max_depth"], fig["max_inner_body"]) == (3, 2, 2, 8)
    assert fig["all_fma_ymm"] == fig["inner_fma_ymm"] == 2 and fig["all_fma_zmm"] == 0  # the helper's not counted
    assert (fig["inner_vload"], fig["inner_broadcast"], fig["inner_spill"], fig["inner_vstore"]) == (1, 1, 1, 0)
    assert (fig["all_vstore"], fig["all_int_alu"], fig["all_branch"], fig["all_div_sqrt"]) == (1, 5, 5, 0)
    assert fig["inner_fp_scalar"] == 1 and fig["inner_branch"] == 2
    # one pass of both innermost loops: 2 FMAs x 8 lanes x 2 + 1 scalar add = 33 FLOPs in 10 instructions, of
    # which 3 are memory moves (load, broadcast, spill; the scalar add's memory operand is not counted)
    assert fig["inner_fp_lanes"] == 33
    assert fig["est_executed_insts"] == pytest.approx(1024 / 33 * 10)
    assert fig["est_executed_mem"] == pytest.approx(1024 / 33 * 3)
    assert sum(v for k, v in fig.items() if k.startswith("all_")) == 17


@pytest.fixture(scope="module")
def vec_axpb():
    """B = 2 A + 1 over (64, 1024) float32, the inner 16 elements vectorized: 131,072 FLOPs."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def axpb(A: T.Buffer((64, 1024), "float32"), B: T.Buffer((64, 1024), "float32")):
        for i in range(64):
            for j0 in range(64):
                for j1 in T.vectorized(16):
                    with T.sblock("B"):
                        vi = T.axis.spatial(64, i)
                        vj = T.axis.spatial(1024, j0 * 16 + j1)
                        B[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)

    return axpb


@pytest.mark.parametrize("mcpu, fp_class, n_fp, lanes", [
    ("znver4", "inner_fma_zmm", 8, 256),  # AVX-512: one FMA per 16 floats, LLVM unrolls j0 by 8
    ("haswell", "inner_fma_ymm", 8, 128),  # AVX2: two 8-float FMAs per 16 floats, unrolled by 4
    ("x86-64", "inner_fp_xmm", 8, 32)])  # SSE2, no FMA: a multiply and an add per 4 floats, not unrolled
def test_asm_of_a_real_build_tells_the_targets_apart(vec_axpb, mcpu, fp_class, n_fp, lanes):
    from perfcast.features import ASM_FEATURES
    from perfcast.features.asm import asm_figures, program_asm

    target = {"kind": "llvm", "mcpu": mcpu, "num-cores": 2}
    fig = asm_figures(program_asm(vec_axpb, target), flops=131072.0)
    assert fig[fp_class] == n_fp and fig["inner_fp_lanes"] == lanes
    assert sum(fig[f"inner_{c}"] for c in ("fma_zmm", "fma_ymm", "fp_xmm")) == n_fp  # no other FP code inside
    assert fig["inner_fp_scalar"] == fig["inner_fma_scalar"] == 0 and fig["inner_spill"] == 0
    ex = get_extractor("asm", target=target)
    v = ex.extract(vec_axpb)
    assert v.shape == (55,) and ex.params()["target"]["mcpu"] == mcpu
    np.testing.assert_allclose(v, np.log2(1 + np.array([fig[k] for k in ASM_FEATURES])))


def test_mca_simulates_a_dependency_chain_by_hand():
    """Four scalar adds per iteration, chained through one register or into four: Haswell adds in 3 cycles on one
    port (port 1), Zen 3 on two, so the chain takes 4 x 3 = 12 cycles an iteration on both; apart, Haswell is port
    bound (4 adds a cycle each: 4) and Zen 3 latency bound (each register's own add: 3). llvm-mca's 100 iterations
    add the pipeline's fill, under 0.1 cycle an iteration. Text llvm-mca cannot read is NaN."""
    from perfcast.features.mca import mca_regions

    chain = ["\tvaddss\t%xmm1, %xmm0, %xmm0"] * 4
    apart = [f"\tvaddss\t%xmm1, %xmm{k}, %xmm{k}" for k in (2, 3, 4, 5)]
    (c_h, t_h), (a_h, u_h) = mca_regions([chain, apart], "haswell")
    (c_z, t_z), (a_z, u_z) = mca_regions([chain, apart], "znver3")
    assert (t_h, u_h, t_z, u_z) == (4.0, 4.0, 2.0, 2.0)  # block reciprocal throughput: adds / ports
    assert 12 <= c_h < 12.1 and 12 <= c_z < 12.1 and 4 <= a_h < 4.1 and 3 <= a_z < 3.1
    assert all(math.isnan(x) for x in mca_regions([["\tnot_an_instruction\t%xmm0"]], "haswell")[0])


def test_mca_columns_of_hand_written_assembly():
    """`mca_columns` of `ASM` (two innermost loops; `test_asm_loops_and_counts_by_hand`): the loops' cycles and
    throughputs summed, the estimate = FLOPs / 33 lanes a pass x cycles a pass, their ratio, 2 loops."""
    from perfcast.features.asm import innermost, loops, parse
    from perfcast.features.mca import MCA_FEATURES, mca_columns, mca_regions

    func = parse(ASM)[0]
    bodies = [[f"\t{m}\t{ops}" for m, ops in func[a:b + 1] if not m.startswith("label:")]
              for a, b in innermost(loops(func))]
    assert [len(b) for b in bodies] == [8, 2]
    (c1, t1), (c2, t2) = mca_regions(bodies, "haswell")
    v = mca_columns(ASM, 1024.0, "haswell")
    assert len(v) == len(MCA_FEATURES) == 5 and v.dtype == np.float64
    np.testing.assert_allclose(v, [lg(1 + c1 + c2), lg(1 + t1 + t2), lg(1 + 1024 / 33 * (c1 + c2)),
                                   (c1 + c2) / (t1 + t2), 2])
    no_loop = "main_compute_:\n\tvaddss\t%xmm1, %xmm0, %xmm0\n\tretq\n"
    np.testing.assert_array_equal(mca_columns(no_loop, 8.0, "haswell"), np.zeros(5))


@pytest.fixture(scope="module")
def serial_sum():
    """B[0] = sum of A's 4,096 float32: LLVM keeps the adds in order (no fast-math), one chain through a register."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def rsum(A: T.Buffer((4096,), "float32"), B: T.Buffer((1,), "float32")):
        for k in range(4096):
            with T.sblock("B"):
                vk = T.axis.reduce(4096, k)
                with T.init():
                    B[0] = T.float32(0)
                B[0] = B[0] + A[vk]

    return rsum


def test_mca_of_a_real_build_tells_a_chain_from_a_stream(serial_sum, vec_axpb):
    """Built for Haswell: the serial sum's loop is LLVM's unrolled chain of scalar adds, 3 cycles each, so it runs at
    over twice its ports' pace; `vec_axpb`'s FMAs are independent, port bound (cycles / throughput near 1). The
    extractor is `mca_columns` of the build; a znver4 target is simulated as `icelake-server` (its AVX-512)."""
    from perfcast.features.asm import asm_figures, program_asm
    from perfcast.features.mca import McaExtractor, mca_columns

    target = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}
    asm = program_asm(serial_sum, target)
    adds = asm_figures(asm, 4096.0)["inner_fp_scalar"]  # the unrolled chain's length (9 from TVM 0.27's LLVM)
    v = McaExtractor(target).extract(serial_sum)
    np.testing.assert_array_equal(v, mca_columns(asm, 4096.0, "haswell"))
    cycles = 2 ** v[0] - 1
    assert 3 * adds <= cycles <= 3 * adds + 8 and v[3] > 2  # the chain (+ the argument check's loop)
    w = McaExtractor(target).extract(vec_axpb)
    assert 1 <= w[3] < 1.1 and w[4] == v[4] == 2
    z = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    np.testing.assert_array_equal(McaExtractor(z).extract(vec_axpb),
                                  mca_columns(program_asm(vec_axpb, z), 131072.0, "icelake-server"))
    assert np.isfinite(McaExtractor(z).extract(vec_axpb)).all()


@pytest.mark.parametrize("mcpu, cpu", [("haswell", "haswell"), ("rocketlake", "rocketlake"), ("znver3", "znver3"),
                                       ("znver4", "icelake-server"), ("znver5", "icelake-server"),
                                       ("emeraldrapids", "icelake-server"), ("nosuchcpu", "icelake-server"),
                                       (None, "x86-64")])
def test_mca_cpu_stand_ins(mcpu, cpu):
    from perfcast.features.mca import mca_cpu

    target = {"kind": "llvm", **({"mcpu": mcpu} if mcpu else {})}
    assert mca_cpu(target) == cpu == mca_cpu(json.dumps(target))


def test_mca_needs_llvm_14(monkeypatch, tmp_path):
    """Another LLVM's scheduling models give other columns: an llvm-mca that is not LLVM 14's is refused by name."""
    import shutil

    from perfcast.features import mca

    fake = tmp_path / "llvm-mca"
    fake.write_text("#!/bin/sh\necho 'Debian LLVM version 19.1.7'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(shutil, "which", lambda name: str(fake) if name == "llvm-mca" else None)
    mca.mca_binary.cache_clear()
    try:
        with pytest.raises(PerfcastError, match=r"need llvm-mca of LLVM 14 on the PATH; install it \(Debian: apt "
                                                r"install llvm-14\)"):
            mca.mca_binary()
        with pytest.raises(PerfcastError, match=r"need llvm-mca of LLVM 14"):
            mca.McaExtractor.check_tools()  # what `dataset_asm(kind="mca")` calls before building
    finally:
        mca.mca_binary.cache_clear()
    from perfcast.features.asm_cache import tag

    assert (tag("asm"), tag("mca")) == ("asm1", "mca1")
    with pytest.raises(ValueError, match=r"unknown kind of built-program features 'nosuch'; known: asm, mca"):
        tag("nosuch")


def test_dataset_asm_cache_builds_once_then_reads(tmp_path, monkeypatch):
    """`dataset_asm`: each record built for its own target (the same figures as building its program directly),
    written to the cache as it is done, and read back without building again; a build that fails is NaN."""
    import pandas as pd

    from perfcast import paths
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    import pyarrow.parquet as pq

    import perfcast.features.cache as cache_mod
    from perfcast.features import asm_cache
    from perfcast.features.cache import record_program

    ds = Dataset(paths.bundled_dataset_dir())
    df = records_frame(ds)
    sub = pd.concat([df[df["schedule_kind"] == k].head(2) for k in ("default", "random")]).reset_index(drop=True)
    monkeypatch.setattr(cache_mod, "cache_root", lambda ds, tag: (tmp_path / tag).mkdir(exist_ok=True)
                        or tmp_path / tag)  # a fresh cache, not the dataset's
    got = asm_cache.dataset_asm(ds, sub, jobs=1, progress=False)
    assert got.shape == (4, 55) and got.dtype == np.float32 and np.isfinite(got).all()
    assert len(list((tmp_path / asm_cache.ASM_TAG).glob("*.parquet"))) == 1  # one chunk file
    scripts = cache_mod.dataset_task_scripts(ds)
    for i in (0, 3):  # a default kernel (stored TVMScript) and a random schedule (trace replayed)
        rid = sub["record_id"][i]
        rec = next(r for part in ds._parts("records") for r in pq.read_table(part, filters=[("record_id", "=", rid)])
                   .to_pylist())
        direct = get_extractor("asm", target=rec["target_json"]).extract(record_program(rec, scripts))
        np.testing.assert_allclose(got[i], direct.astype(np.float32))
    monkeypatch.setattr(asm_cache, "_chunk", lambda *a: pytest.fail("built again instead of read from the cache"))
    np.testing.assert_array_equal(asm_cache.dataset_asm(ds, sub.iloc[[3, 0]], jobs=1, progress=False), got[[3, 0]])
    monkeypatch.setattr(asm_cache.AsmExtractor, "extract", lambda self, p: 1 / 0)
    asm_cache._extractor.cache_clear()
    assert np.isnan(asm_cache.asm_rows([(record_program(rec, scripts), rec["target_json"])])[0]).all()
    gone = sub.iloc[[0]].assign(record_id="no-such-record")
    with pytest.raises(PerfcastError, match=r"1 records \(e.g. 'no-such-record'\) are not in .*partitions; records still "
                                            r"in a journal .* rerun the killed `perfcast collect \.\.\. --out DIR`"):
        asm_cache.dataset_asm(ds, gone, jobs=1, progress=False)


def test_a_program_timed_again_copies_its_features_instead_of_building_them(mlp_dataset, tmp_path, monkeypatch):
    """A program timed again under a newer protocol is a new record of the same program and target: its features and
    assembly features are copied from its earlier record's cached rows (and cached under its own id), not computed
    again; only a program whose rows nobody cached is built; the same program for another target is not a copy."""
    import dataclasses
    import shutil

    import pandas as pd
    import pyarrow.parquet as pq

    from perfcast.collect.collector import record_id
    from perfcast.data.frame import records_frame
    from perfcast.data.schema import MeasureRecord, from_row
    from perfcast.data.store import Dataset
    from perfcast.features import asm_cache
    from perfcast.features import cache as cache_mod

    src, df = mlp_dataset
    # with the fixture's feature cache, without any assembly rows another test may have added to it
    ds = Dataset(shutil.copytree(src, tmp_path / "d", ignore=shutil.ignore_patterns(asm_cache.ASM_TAG)))
    old = asm_cache.dataset_asm(ds, df.iloc[:2], jobs=1, progress=False)  # records 0 and 1 only
    old_X = cache_mod.dataset_features(ds, df, jobs=1, progress=False)
    rows = {r["record_id"]: r for p in ds._parts("records") for r in pq.read_table(p).to_pylist()}

    def again(i, **change):
        rec = from_row(MeasureRecord, rows[df.record_id[i]])
        dev = change.pop("device_id", rec.device_id)
        return dataclasses.replace(rec, record_id=record_id(rec.workload_key, dev, rec.program_hash, 2), protocol=2,
                                   device_id=dev, latency_s=rec.latency_s * 1.1, **change)

    new = [again(0), again(2)]  # programs 0 (assembly cached) and 2 (not)
    other = again(0, device_id="elsewhere", target_json=rows[df.record_id[0]]["target_json"].replace("}", ', "x": 1}'))
    assert ds.add_records(new + [other]) == 3
    now = records_frame(ds)
    assert {r.record_id for r in new} <= set(now.record_id) and df.record_id[0] not in set(now.record_id)
    monkeypatch.setattr(cache_mod, "_compute_partition", lambda *a: pytest.fail("computed instead of copied"))
    ids = [r.record_id for r in new]
    X = cache_mod.dataset_features(ds, now.set_index("record_id").loc[ids].reset_index(), jobs=1, progress=False)
    for k, i in enumerate((0, 2)):
        np.testing.assert_array_equal(X.analytic[k], old_X.analytic[i])
        np.testing.assert_array_equal(X.stores[k], old_X.stores[i])
        np.testing.assert_array_equal(X.leaves[k], old_X.leaves[i])
    cached = set().union(*(cache_mod._read_cache(c) for c in cache_mod.cache_root(ds).glob("*.parquet")))
    assert set(ids) <= cached  # kept under the new ids: the next call reads them
    assert cache_mod.same_program(ds, {other.record_id}, set(df.record_id)) == {}  # another target: built
    assert cache_mod.same_program(ds, set(ids), set(df.record_id)) == {ids[0]: df.record_id[0],
                                                                        ids[1]: df.record_id[2]}
    counts: dict = {}
    got = asm_cache.dataset_asm(ds, pd.DataFrame({"record_id": ids}), jobs=1, progress=False, counts=counts)
    assert counts == {"built": 1, "failed": 0, "copied": 1}
    np.testing.assert_array_equal(got[0], old[0])
    r2 = rows[df.record_id[2]]
    direct = get_extractor("asm", target=r2["target_json"]).extract(
        cache_mod.record_program(r2, cache_mod.dataset_task_scripts(ds)))
    np.testing.assert_allclose(got[1], direct.astype(np.float32))
    assert set(ids) <= set(asm_cache.read_cache(cache_mod.cache_root(ds, asm_cache.ASM_TAG)))
    counts.clear()
    asm_cache.dataset_asm(ds, pd.DataFrame({"record_id": ids}), jobs=1, progress=False, counts=counts)
    assert counts == {"built": 0, "failed": 0, "copied": 0}


def test_many_programs_build_their_assembly_over_the_cores_once(progs, vec_axpb, monkeypatch, tmp_path):
    """`programs_asm`: from `PARALLEL_MIN` programs on, worker processes, each program passed as its TVMScript text
    (the same rows, in the same order, as building them in this process); every row kept in the per-user cache, so
    a program asked again is read, not built; a failed build is not kept."""
    from perfcast.features import asm_cache

    target = '{"kind": "llvm", "mcpu": "haswell", "num-cores": 2}'
    programs = [vec_axpb, progs["mm"], vec_axpb, progs["ew"]]
    monkeypatch.setenv("PERFCAST_CACHE", str(tmp_path / "a"))
    here = asm_cache.programs_asm(programs, target, jobs=1)
    assert len(list((tmp_path / "a" / asm_cache.ASM_TAG).glob("*.npy"))) == 3  # three distinct programs
    monkeypatch.setenv("PERFCAST_CACHE", str(tmp_path / "b"))
    monkeypatch.setattr(asm_cache, "PARALLEL_MIN", 2)
    np.testing.assert_array_equal(asm_cache.programs_asm(programs, target, jobs=2), here)
    assert here.shape == (4, asm_cache.N_ASM) and not np.isnan(here).any()
    assert not np.array_equal(here[0], here[1]) and np.array_equal(here[0], here[2])  # order kept
    monkeypatch.setattr(asm_cache, "asm_rows", lambda *a: pytest.fail("built again instead of read from the cache"))
    np.testing.assert_array_equal(asm_cache.programs_asm(programs[::-1], target), here[::-1])
    assert asm_cache.programs_asm([], target).shape == (0, asm_cache.N_ASM)
    monkeypatch.undo()
    monkeypatch.setenv("PERFCAST_CACHE", str(tmp_path / "c"))
    arm = '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'  # refused by program_asm: NaN, and not cached
    assert np.isnan(asm_cache.programs_asm([vec_axpb], arm)).all()
    assert not list((tmp_path / "c" / asm_cache.ASM_TAG).glob("*.npy"))


@pytest.mark.parametrize("device, what", [("a100", "cuda"), ("graviton2", "llvm -mtriple=aarch64-linux-gnu")])
def test_asm_features_are_missing_for_a_device_that_is_not_x86(vec_axpb, device, what):
    """The asm features read x86 assembly: another target's build is refused (not its assembly counted as x86), a
    dataset's record of such a device is stored as missing, and a prediction for it gets NaN rows with a warning
    (the trees take NaN as missing, the networks' standardizer the mean)."""
    from perfcast.devices import get_device
    from perfcast.features.asm import not_x86, program_asm
    from perfcast.features.asm_cache import N_ASM, asm_rows
    from perfcast.features.cache import features_of_programs

    with pytest.warns(UserWarning, match=f"device '{device}' compiles for {what}: the model's x86 assembly features "
                                         "are missing for its programs"):
        X = features_of_programs([vec_axpb, vec_axpb], device, asm=True)
    assert X.asm.shape == (2, N_ASM) and np.isnan(X.asm).all()
    assert features_of_programs([vec_axpb], device).asm is None  # the other features do not need x86
    target = get_device(device).target_json
    assert not_x86(target) == what
    with pytest.raises(PerfcastError, match=f"target '{what}' is not x86"):
        program_asm(vec_axpb, target)
    assert np.isnan(asm_rows([(vec_axpb, target)])[0]).all()
    for ok in (None, '{"kind": "llvm", "mcpu": "haswell"}', '{"kind": "llvm", "mtriple": "x86_64-linux-gnu"}'):
        assert not_x86(ok) is None


def test_an_asm_build_that_hangs_or_crashes_is_killed_and_missing(vec_axpb, monkeypatch, tmp_path):
    """Asm builds run in one child process per batch: its rows equal the extractor's in this process; a build
    that outlives `timeout_s` is killed (the call returns in about that time, no child left) and one that kills
    its process is a crash, each NaN with one warning naming why, and the programs after it are built by a new
    child."""
    import multiprocessing as mp
    import time

    from perfcast.features import asm_cache

    target = '{"kind": "llvm", "mcpu": "haswell", "num-cores": 2}'
    direct = get_extractor("asm", target=target).extract(vec_axpb).astype(np.float32)
    built_by = tmp_path / "pids"
    built_by.mkdir()
    real = asm_cache._row_here

    def row(program, target_json, kind="asm"):  # what LLVM does to each program, and which process it does it in
        (built_by / str(len(list(built_by.iterdir())))).write_text(str(os.getpid()))
        if program == "hang":
            time.sleep(60)
        if program == "crash":
            os._exit(3)
        return real(program, target_json, kind)

    monkeypatch.setattr(asm_cache, "_row_here", row)
    rows = asm_cache.asm_rows([(vec_axpb, target)] * 3)
    assert all(np.array_equal(r, direct) for r in rows)
    pids = {f.read_text() for f in built_by.iterdir()}
    assert len(pids) == 1 and pids != {str(os.getpid())}  # one child, not this process
    for bad, why in (("hang", r"exceeded 0.5 s"), ("crash", "crashed")):
        for f in built_by.iterdir():
            f.unlink()
        t0 = time.perf_counter()
        with pytest.warns(UserWarning,
                          match=f"asm features: building a program {why}; its asm features are missing") as w:
            rows = asm_cache.asm_rows([(vec_axpb, target), (bad, target), (vec_axpb, target), (vec_axpb, target)],
                                      timeout_s=0.5)
        assert time.perf_counter() - t0 < 5 and len(w) == 1 and not mp.active_children()
        assert np.isnan(rows[1]).all() and rows[1].shape == (asm_cache.N_ASM,)
        assert all(np.array_equal(rows[i], direct) for i in (0, 2, 3))
        pid = [(built_by / str(i)).read_text() for i in range(4)]
        assert pid[0] == pid[1] and pid[2] == pid[3] and pid[1] != pid[2]  # a new child after the bad one


def test_asm_features_refuse_local_on_a_host_that_is_not_x86(monkeypatch):
    """`local`'s target names no mtriple: it builds for the host's triple, so on an ARM host it is not x86."""
    import tvm

    from perfcast.features.asm import not_x86

    monkeypatch.setattr(tvm.target.codegen, "llvm_get_system_triple", lambda: "aarch64-unknown-linux-gnu")
    for target in (None, '{"kind": "llvm", "mcpu": "neoverse-n1", "num-cores": 2}'):
        assert not_x86(target) == "llvm -mtriple=aarch64-unknown-linux-gnu"
    assert not_x86('{"kind": "llvm", "mtriple": "x86_64-linux-gnu"}') is None  # a named x86 triple still builds


def test_cli_data_features_caches_then_resumes(mlp_dataset, tmp_path):
    """`perfcast data features --asm`: every record's features and assembly features cached beside the dataset (the
    assembly rows equal a direct build of the record's program); a second run builds nothing; a device with no
    records is an error naming the devices."""
    import json
    import shutil

    from typer.testing import CliRunner

    from perfcast.cli.app import app
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.features.asm_cache import ASM_TAG, read_cache
    from perfcast.features.cache import dataset_task_scripts, record_program, rows_to_build

    src = mlp_dataset[0]
    d = tmp_path / "d"
    shutil.copytree(src, d, ignore=shutil.ignore_patterns("features"))
    runner = CliRunner()
    res = runner.invoke(app, ["data", "features", str(d), "--asm", "--jobs", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    ds = Dataset(d)
    ids = list(records_frame(ds)["record_id"])
    assert out["records"] == out["asm_built"] == len(ids) >= 60 and out["asm_failed"] == 0
    cached = read_cache(d / "features" / ASM_TAG)
    assert set(cached) == set(ids) and out["cache"][1] == str(d / "features" / ASM_TAG)
    row = next(iter(rows_to_build(ds, {ids[-1]}).values()))[0]
    direct = get_extractor("asm", target=row["target_json"]).extract(record_program(row, dataset_task_scripts(ds)))
    np.testing.assert_allclose(cached[ids[-1]], direct.astype(np.float32))
    res = runner.invoke(app, ["data", "features", str(d), "--asm", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["asm_built"] == 0
    res = runner.invoke(app, ["data", "features", str(d), "--device", "nosuch"])
    assert isinstance(res.exception, PerfcastError) and "no ok record of device 'nosuch'" in str(res.exception)
    assert str(res.exception).endswith("(or measure it: perfcast collect --device nosuch --out DIR)")


def test_cli_data_features_mca_caches_then_resumes(mlp_dataset, tmp_path):
    """`perfcast data features --mca` on six records of three tasks: each record's llvm-mca columns cached under
    DIR/features/mca1/, equal to its program's extracted directly; a second run builds nothing."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from typer.testing import CliRunner

    from perfcast.cli.app import app
    from perfcast.data.schema import MeasureRecord, TaskRecord, from_row
    from perfcast.data.store import Dataset
    from perfcast.features.asm_cache import read_cache
    from perfcast.features.cache import dataset_task_scripts, record_program, rows_to_build

    src = Dataset(mlp_dataset[0])
    ids = list(mlp_dataset[1].groupby("workload_key").head(2)["record_id"])
    recs = src.read("records")
    recs = recs.filter(pc.is_in(recs["record_id"], pa.array(ids))).to_pylist()
    ds = Dataset(tmp_path / "d", create=True)
    assert ds.add_records([from_row(MeasureRecord, r) for r in recs]) == len(ids) == 6
    ds.add_tasks([from_row(TaskRecord, r) for r in src.read("tasks").to_pylist()])
    runner = CliRunner()
    res = runner.invoke(app, ["data", "features", str(ds.root), "--mca", "--jobs", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["records"], out["mca_built"], out["mca_failed"], out["mca_copied"]) == (6, 6, 0, 0)
    assert "asm_built" not in out and out["cache"][1] == str(ds.root / "features" / "mca1")
    cached = read_cache(ds.root / "features" / "mca1", "mca")
    assert set(cached) == set(ids)
    scripts = dataset_task_scripts(ds)
    for row in (r for rows in rows_to_build(ds, set(ids)).values() for r in rows):
        direct = get_extractor("mca", target=row["target_json"]).extract(record_program(row, scripts))
        np.testing.assert_array_equal(cached[row["record_id"]], direct.astype(np.float32))
    res = runner.invoke(app, ["data", "features", str(ds.root), "--mca", "--jobs", "1"])
    assert res.exit_code == 0 and "llvm-mca columns: 0 built, 0 of them failed (NaN), 0 copied" in res.stdout


def test_cache_of_the_device_tagged_name_is_moved_not_rebuilt(tmp_path):
    """Feature caches were kept under a tag that named the device features too (`ca6-ps1-an3-dev1`); the program
    features are the same, so `cache_root` moves such a directory to `CACHE_TAG` instead of rebuilding it."""
    from types import SimpleNamespace

    from perfcast import paths
    from perfcast.features.cache import CACHE_TAG, FEATURE_TAG, cache_root

    assert FEATURE_TAG == f"{CACHE_TAG}-dev2"
    old = paths.features_dir(tmp_path) / f"{CACHE_TAG}-dev1"
    old.mkdir(parents=True)
    (old / "part-0.parquet").write_bytes(b"cached")
    root = cache_root(SimpleNamespace(root=tmp_path))
    assert root == paths.features_dir(tmp_path) / CACHE_TAG and not old.exists()
    assert (root / "part-0.parquet").read_bytes() == b"cached"
