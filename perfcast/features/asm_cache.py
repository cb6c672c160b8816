"""The assembly features (`asm.ASM_FEATURES`) of a dataset's records, computed once and cached beside it, and the
same for the llvm-mca columns of their innermost loops (`mca.MCA_FEATURES`, `kind="mca"`, DIR/features/mca<version>/).

A record's program is rebuilt (its trace replayed on its task) and compiled by LLVM for the record's own target
(`target_json`: its device's CPU), so the records of every host are computed on this one; that costs ~0.25 s a
record, so `dataset_asm` works in chunks of `CHUNK` records over `jobs` processes and writes each chunk to
DIR/features/asm<version>/ as it finishes: a kill loses at most the chunks in flight, and the next call goes on.
A record of a program already cached for the same target (a program timed again) gets a copy of its row, unbuilt.
A program LLVM cannot build (or not within `BUILD_TIMEOUT_S`: a chunk's builds run in a child process, killed
then and replaced for the rest), or whose target is not x86 (`asm.not_x86`), gets NaN features (the tree models
take NaN as missing), never a lost chunk.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..collect.measure import MeasureConfig
from .asm import ASM_FEATURES, AsmExtractor
from .mca import McaExtractor

N_ASM = len(ASM_FEATURES)
KINDS = {"asm": AsmExtractor, "mca": McaExtractor}  # kind of built-program features -> its extractor
CHUNK = 256


def tag(kind: str) -> str:
    """The cache directory name of a kind of built-program features (`KINDS`): its name and version."""
    if kind not in KINDS:
        from ..errors import UnknownNameError

        raise UnknownNameError("kind of built-program features", kind, list(KINDS))
    return f"{kind}{KINDS[kind].version}"


def width(kind: str) -> int:
    """Columns of a kind of built-program features (`KINDS`)."""
    return len(KINDS[kind]().feature_names())


ASM_TAG = tag("asm")


@functools.cache
def _extractor(target_json: str | None, kind: str = "asm"):
    return KINDS[kind](target=target_json or None)


BUILD_TIMEOUT_S = MeasureConfig.build_timeout_s  # the collector's


def _row_here(program, target_json: str | None, kind: str = "asm") -> np.ndarray:
    try:
        return _extractor(target_json or None, kind).extract(program).astype(np.float32)
    except Exception:  # noqa: BLE001  (LLVM refusing one program must not lose the others)
        return np.full(width(kind), np.nan, np.float32)


def _rows_child(items, start: int, conn, kind: str) -> None:
    for i in range(start, len(items)):
        conn.send((i, _row_here(*items[i], kind=kind)))
    conn.close()


def asm_rows(items: list[tuple[object, str | None]], timeout_s: float | None = None,
             kind: str = "asm") -> list[np.ndarray]:
    """(N_ASM,) float32 asm features (`kind="mca"`: the llvm-mca columns) of each (program, target_json) of `items`
    (a TIR program or its TVMScript text, built for `target_json`; None: this machine); NaN where LLVM cannot
    build it.

    The programs are built one after another in one forked child (it inherits TVM and the programs: nothing is
    imported or pickled; a child per program cost 1.41-1.66x the time, `python bench/feature_speed.py --asm`). A
    program that crashes the child or whose build exceeds `timeout_s` (default `BUILD_TIMEOUT_S`, the collector's;
    a meta-schedule program with an explicitly unrolled 1,000-step reduction kept LLVM busy for over ten minutes,
    2026-12-05) gets NaN, with a warning, as the collector's builds do; the child is killed and a new one goes on
    with the next program."""
    import multiprocessing as mp
    import warnings

    timeout_s = BUILD_TIMEOUT_S if timeout_s is None else timeout_s
    ctx = mp.get_context("fork")
    rows: list = [None] * len(items)
    start = 0
    while start < len(items):
        recv, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_rows_child, args=(items, start, send, kind), daemon=True)
        child.start()
        send.close()
        why = ""
        try:
            while start < len(items):
                if not recv.poll(timeout_s):
                    why = f"exceeded {timeout_s:g} s"
                    break
                try:
                    i, rows[i] = recv.recv()
                except EOFError:  # the child died before answering
                    why = "crashed"
                    break
                start = i + 1
        finally:
            child.join(timeout=0 if why else 5)
            if child.is_alive():
                child.kill()
                child.join()
            recv.close()
        if why:
            warnings.warn(f"{kind} features: building a program {why}; its {kind} features are missing (NaN)",
                          stacklevel=2)
            rows[start] = np.full(width(kind), np.nan, np.float32)
            start += 1
    return rows


PARALLEL_MIN = 64  # programs: below this, building them in this process beats starting worker processes


def _texts_chunk(texts: list[str], target_json: str | None) -> list[np.ndarray]:
    return asm_rows([(t, target_json) for t in texts])


def programs_asm(programs, target_json: str | None, jobs: int | None = None, progress: bool = False,
                 device_id: str = "this device") -> np.ndarray:
    """(len(programs), N_ASM) float32 asm features of TIR programs built for `target_json`, row-aligned.

    Each program's row is kept in a per-user cache (`paths.program_asm_dir`, one .npy per program text and target),
    so a program predicted again (a network's kernels, a search's candidates) is not built again. From
    `PARALLEL_MIN` programs to build on (a tuned network's search candidates: ~2,000 builds of ~0.25 s), the builds
    run in `jobs` processes (default: every core), each program passed as its TVMScript text. A target that is not
    x86 (`asm.not_x86`) gives NaN rows (the trees' missing value, the networks' mean) and one warning."""
    import warnings

    from .. import paths
    from .asm import not_x86
    from .base import as_primfunc
    from .cache import map_chunks

    what = not_x86(target_json)
    if what is not None:
        if len(programs):
            warnings.warn(f"device {device_id!r} compiles for {what}: the model's x86 assembly features are missing "
                          "for its programs, so its predictions rest on the other features (expect a larger error)",
                          stacklevel=3)
        return np.full((len(programs), N_ASM), np.nan, np.float32)
    texts = [p if isinstance(p, str) else as_primfunc(p).script() for p in programs]
    target = json.dumps(_extractor(target_json or None)._target(), sort_keys=True)  # None: this host's, spelled out
    root = paths.program_asm_dir(ASM_TAG)
    files = [root / (hashlib.sha1(f"{target}\n{t}".encode()).hexdigest() + ".npy") for t in texts]
    rows: list = [np.load(f, allow_pickle=False) if f.exists() else None for f in files]
    todo = [i for i, r in enumerate(rows) if r is None]
    jobs = 1 if len(todo) < PARALLEL_MIN else jobs  # map_chunks builds in this process for jobs=1
    size = max(1, -(-len(todo) // (4 * (jobs or os.cpu_count() or 1))))  # ~4 chunks a worker: an even finish
    chunks = [([texts[i] for i in todo[k:k + size]], target_json) for k in range(0, len(todo), size)]
    got: dict[int, list] = {}
    map_chunks(_texts_chunk, chunks, got.__setitem__, jobs, progress, "asm features")
    for i, row in zip(todo, [row for k in range(len(chunks)) for row in got[k]]):
        rows[i] = row
        if not np.isnan(row).all():  # a failed build is not remembered: the next call tries again
            tmp = files[i].with_suffix(f".{os.getpid()}.tmp")
            with open(tmp, "wb") as fh:
                np.save(fh, row, allow_pickle=False)
            os.replace(tmp, files[i])
    return np.stack(rows).astype(np.float32) if rows else np.zeros((0, N_ASM), np.float32)


def _chunk(rows: list[dict], task_scripts: dict[str, str], kind: str = "asm") -> list[tuple[str, np.ndarray]]:
    from .cache import record_program

    # replayed in this process (a trace that does not replay raises, as it always did), built in the child
    made = asm_rows([(record_program(r, task_scripts), r["target_json"]) for r in rows], kind=kind)
    return [(r["record_id"], row) for r, row in zip(rows, made)]


def _write(root: Path, rows: list[tuple[str, np.ndarray]], kind: str = "asm") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = hashlib.sha1("".join(r[0] for r in rows).encode()).hexdigest()[:16]
    names = json.dumps(KINDS[kind]().feature_names()).encode()
    table = pa.table({"record_id": [r[0] for r in rows], kind: [r[1].tolist() for r in rows]},
                     schema=pa.schema([("record_id", pa.string()), (kind, pa.list_(pa.float32()))],
                                      metadata={f"{kind}_features".encode(): names}))
    tmp = root / f"{name}.tmp"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, root / f"{name}.parquet")


def read_cache(root: Path, kind: str = "asm") -> dict[str, np.ndarray]:
    """record id -> asm features (or `kind`'s), of every chunk file under `root`."""
    import pyarrow.parquet as pq

    out = {}
    n = width(kind)
    for f in sorted(Path(root).glob("*.parquet")):
        t = pq.read_table(f)
        flat = t.column(kind).combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, n)
        out.update(zip(t.column("record_id").to_pylist(), flat.astype(np.float32)))
    return out


def dataset_asm(ds, records, jobs: int | None = None, progress: bool = True,
                counts: dict | None = None, kind: str = "asm") -> np.ndarray:
    """(len(records), N_ASM) float32 asm features (`kind="mca"`: llvm-mca columns) of `records` (a DataFrame of
    `ds`'s records), row-aligned, computing the ones not cached yet (see the module docstring) or copying them from
    a cached record of the same program and target (`cache.same_program`: a program timed again). `counts`, when
    given, receives how many rows this call `built` (of them `failed`: NaN) and `copied`."""
    from .cache import cache_root, dataset_task_scripts, map_chunks, rows_to_build, same_program, scripts_of

    root = cache_root(ds, tag(kind))
    KINDS[kind].check_tools()  # a tool missing: one error now, not a NaN for every record
    found = read_cache(root, kind)
    need = set(records["record_id"]).difference(found)
    alias = same_program(ds, need, found) if need else {}
    if alias:
        copies = [(i, found[j]) for i, j in sorted(alias.items())]
        _write(root, copies, kind)
        found.update(copies)
        need.difference_update(alias)
    if need:
        scripts = dataset_task_scripts(ds)
        rows = [r for part_rows in rows_to_build(ds, need).values() for r in part_rows]
        rows.sort(key=lambda r: r["workload_key"])  # a chunk parses few tasks
        chunks = [rows[i:i + CHUNK] for i in range(0, len(rows), CHUNK)]

        def done(_, res):
            _write(root, res, kind)
            found.update(res)

        map_chunks(functools.partial(_chunk, kind=kind), [(c, scripts_of(c, scripts)) for c in chunks], done, jobs,
                   progress, f"{kind} features")
    if counts is not None:
        counts.update(built=len(need), failed=sum(int(np.isnan(found[i]).all()) for i in need), copied=len(alias))
    if not len(records):
        return np.zeros((0, width(kind)), np.float32)
    return np.stack([found[i] for i in records["record_id"]])
