"""The model inputs of many programs at once, and their cache beside a dataset.

`ProgramFeatures` holds, for n programs, the three program feature sets every model reads:

- `leaves`   n arrays (n_leaves, 50): the compact AST's raw leaf vectors (`LEAF_FEATURES`, no positional encoding)
- `ordering` n arrays (n_leaves,): the compact AST's ordering vector (models add the positional encoding)
- `stores`   n arrays (n_stores, 164): TVM's PerStoreFeature rows
- `analytic` (n, 21): `ANALYTIC_FEATURES` as log2(1 + x)
- `device`   (n, 11): `DEVICE_FEATURES` of the device each program ran (or will run) on
- `asm`      (n, 55) or None: `ASM_FEATURES`, what LLVM made of each program, for the models that read them
  (`CostModel.needs_asm`); cached apart (`asm_cache`), because building every program takes hours

`dataset_features(ds, records)` computes them for a dataset's records, once: the result of every records partition
goes to `DIR/features/<CACHE_TAG>/<partition>.parquet` (or the user cache when DIR is read-only), so new
partitions add cache files and a change of a program extractor's version changes CACHE_TAG. A scheduled program is
rebuilt by replaying its trace on its task (about 15 ms; parsing the stored TVMScript takes about 100 ms).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .. import paths
from ..errors import PerfcastError
from .analytic import AnalyticExtractor
from .asm_cache import N_ASM
from .compact_ast import D as LEAF_DIM
from .compact_ast import CompactASTExtractor
from .device import DeviceExtractor
from .per_store import N_PER_STORE, PerStoreExtractor

N_ANALYTIC = len(AnalyticExtractor().feature_names())
N_DEVICE = len(DeviceExtractor().feature_names())
# the program features a cache holds (device features are computed from each record's spec when read, not cached)
CACHE_TAG = f"ca{CompactASTExtractor.version}-ps{PerStoreExtractor.version}-an{AnalyticExtractor.version}"
FEATURE_TAG = f"{CACHE_TAG}-dev{DeviceExtractor.version}"  # what a model was trained on
# Earlier feature tags whose features are the leading columns of today's (the versions since only appended columns):
# tag -> (compact-AST leaf columns, analytic columns). A model trained on one of them still loads and predicts; it
# reads `ProgramFeatures.prefix(...)` of today's features. Device features version 1 differs from 2 only by the
# rounding of a probed clock within its day-to-day drift (`devices.base.canonical_vector`).
PRIOR_TAGS = {"ca5-ps1-an2-dev1": (48, 19), "ca6-ps1-an3-dev1": (LEAF_DIM, N_ANALYTIC)}


@dataclass
class ProgramFeatures:
    """Features of n programs (see the module docstring); `take(idx)` selects rows."""

    leaves: list
    ordering: list
    stores: list
    analytic: np.ndarray
    device: np.ndarray
    asm: np.ndarray | None = None  # (n, N_ASM) `asm.ASM_FEATURES` when a model reads them (building is slow)

    def __len__(self) -> int:
        return len(self.leaves)

    def require_asm(self) -> np.ndarray:
        """`asm`, or the one-line error of a model that reads it when it was not loaded."""
        if self.asm is None:
            raise PerfcastError("this model reads the programs' assembly features and they were not loaded; load "
                                "them with perfcast.eval.workflow.load_data(asm=True) or "
                                "features_of_programs(asm=True)")
        return self.asm

    @property
    def leaf_dim(self) -> int:
        """Columns of the leaf vectors (`LEAF_DIM`, or fewer in a `prefix` view)."""
        return self.leaves[0].shape[1] if self.leaves and np.ndim(self.leaves[0]) == 2 else LEAF_DIM

    def prefix(self, leaf_dim: int, analytic_dim: int) -> "ProgramFeatures":
        """The features an earlier feature tag computed (see `PRIOR_TAGS`): the leading columns."""
        if self.leaf_dim == leaf_dim and self.analytic.shape[1] == analytic_dim:
            return self
        return ProgramFeatures([a[:, :leaf_dim] for a in self.leaves], self.ordering, self.stores,
                               self.analytic[:, :analytic_dim], self.device, self.asm)

    def take(self, idx) -> "ProgramFeatures":
        idx = np.asarray(idx, dtype=np.int64)
        return ProgramFeatures([self.leaves[i] for i in idx], [self.ordering[i] for i in idx],
                               [self.stores[i] for i in idx], self.analytic[idx], self.device[idx],
                               None if self.asm is None else self.asm[idx])

    def on_device(self, vector) -> "ProgramFeatures":
        """The same programs, every one on the device `vector` (a device feature vector, `N_DEVICE` long)."""
        v = np.asarray(vector, np.float32)
        if v.shape != (self.device.shape[1],):
            raise PerfcastError(f"a device vector of shape {v.shape}: these features take {self.device.shape[1]} "
                                "device features (DeviceSpec.feature_vector())")
        return replace(self, device=np.tile(v, (len(self), 1)))

    @staticmethod
    def concat(parts: list["ProgramFeatures"]) -> "ProgramFeatures":
        if not parts:
            return ProgramFeatures([], [], [], np.zeros((0, N_ANALYTIC), np.float32),
                                   np.zeros((0, N_DEVICE), np.float32))
        asm = None if any(p.asm is None for p in parts) else np.concatenate([p.asm for p in parts])
        return ProgramFeatures(sum((p.leaves for p in parts), []), sum((p.ordering for p in parts), []),
                               sum((p.stores for p in parts), []), np.concatenate([p.analytic for p in parts]),
                               np.concatenate([p.device for p in parts]), asm)


# ---- one program ----------------------------------------------------------------------------------------------
_CA, _AN = CompactASTExtractor(), AnalyticExtractor(log=True)


@functools.cache
def _per_store(target_json: str | None) -> PerStoreExtractor:
    """One extractor per target (building one creates a TVM target)."""
    target = json.loads(target_json) if target_json else None
    if target is not None:  # per-store features read only the kind, mcpu and core count
        target = {k: target[k] for k in ("kind", "mcpu", "num-cores") if k in target}
    return PerStoreExtractor(target=target)


def program_row(func, target_json: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(leaves, ordering, stores, analytic) of one scheduled PrimFunc / IRModule / TVMScript text."""
    ca = _CA.compact_ast(func)
    return (ca.leaves.astype(np.float32), ca.ordering.astype(np.int32),
            _per_store(target_json).extract(func).astype(np.float32), _AN.extract(func).astype(np.float32))


def features_of_programs(programs, device="local", target_json: str | None = None,
                         asm: bool = False) -> ProgramFeatures:
    """Features of TIR programs (IRModules, PrimFuncs or TVMScript texts) to run on `device` (id or DeviceSpec);
    with `asm`, also their assembly's (each program built for the device's target, ~0.25 s each; many programs are
    built over the cores, `asm_cache.programs_asm`; NaN, with a warning, for a device that is not x86)."""
    from ..devices import DeviceSpec, get_device

    spec = device if isinstance(device, DeviceSpec) else get_device(str(device))
    if target_json is None:
        target_json = spec.target_json or None
    rows = [program_row(p, target_json) for p in programs]
    dev = np.tile(np.asarray(spec.feature_vector(), np.float32), (len(rows), 1))
    X = _from_rows(rows, dev)
    if asm:
        from .asm_cache import programs_asm

        X.asm = programs_asm(list(programs), target_json, device_id=spec.device_id)
    return X


def _from_rows(rows, device: np.ndarray) -> ProgramFeatures:
    an = np.stack([r[3] for r in rows]) if rows else np.zeros((0, N_ANALYTIC), np.float32)
    return ProgramFeatures([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], an,
                           np.asarray(device, np.float32).reshape(-1, N_DEVICE))


# ---- a dataset's records --------------------------------------------------------------------------------------
_TASK_MODULES: dict[str, object] = {}  # workload key -> parsed task, kept across partitions (parsing costs ~0.1 s)


def _task_module(script: str):
    import tvm
    import tvm.script

    m = tvm.script.from_source(script)
    return m if hasattr(m, "functions_items") else tvm.IRModule({"main": m})


def record_program(r: dict, task_scripts: dict[str, str]):
    """The scheduled program of a record (a dict with workload_key, trace_json, tir_script): its trace replayed on
    its task (`task_scripts`: workload key -> the task's TVMScript), or its stored TVMScript parsed."""
    from .._tvm.util import apply_trace

    tasks = _TASK_MODULES
    if len(tasks) > 4096:
        tasks.clear()
    if r["trace_json"] and r["workload_key"] in task_scripts:
        try:
            if r["workload_key"] not in tasks:
                tasks[r["workload_key"]] = _task_module(task_scripts[r["workload_key"]])
            return apply_trace(tasks[r["workload_key"]], r["trace_json"])
        except Exception:  # noqa: BLE001  (a trace that no longer replays: parse the stored program instead)
            pass
    return _task_module(r["tir_script"])


BUILD_COLUMNS = ["record_id", "workload_key", "trace_json", "tir_script", "target_json"]


def dataset_task_scripts(ds) -> dict[str, str]:
    """workload key -> the task's TVMScript, of every task of `ds` (what `record_program` replays traces on)."""
    tasks = ds.read("tasks", ["workload_key", "tir_script"]).to_pydict()
    return dict(zip(tasks["workload_key"], tasks["tir_script"]))


def rows_to_build(ds, need: set[str]) -> dict[Path, list[dict]]:
    """records partition -> the stored rows (`BUILD_COLUMNS`) of its records in `need`, for the partitions that
    hold any; a record in no partition (e.g. still in a journal) is an error naming the command that fixes it."""
    import pyarrow.parquet as pq

    out: dict[Path, list[dict]] = {}
    for part in ds._parts("records"):
        ids = pq.read_table(part, columns=["record_id"]).column("record_id").to_pylist()
        idx = [i for i, x in enumerate(ids) if x in need]
        if idx:
            out[part] = pq.read_table(part, columns=BUILD_COLUMNS).take(idx).to_pylist()
    missing = need.difference(r["record_id"] for rows in out.values() for r in rows)
    if missing:
        raise PerfcastError(f"{len(missing)} records (e.g. {min(missing)!r}) are not in {str(ds.root)!r}'s "
                            "partitions; records still in a journal (of a collection running or killed) are not "
                            "readable yet: let it finish, or rerun the killed `perfcast collect ... --out DIR`, "
                            "which first moves its journal into partitions")
    return out


def same_program(ds, need: set[str], have) -> dict[str, str]:
    """Record id in `need` -> a record id in `have` of the same program (workload key and program hash) built for
    the same target: a program timed again (a newer measurement protocol) is a new record whose program features
    its earlier record already has, so they are copied, not computed again."""
    if not have:
        return {}
    cols = ["record_id", "workload_key", "program_hash", "target_json"]
    t = ds.read("records", cols).to_pydict()
    key_of = {r: (w, h, tj) for r, w, h, tj in zip(*(t[c] for c in cols))}
    first: dict[tuple, str] = {}
    for rid in have:
        if rid in key_of:
            first.setdefault(key_of[rid], rid)
    return {rid: first[key_of[rid]] for rid in need if key_of.get(rid) in first}


def _compute_partition(rows: list[dict], task_scripts: dict[str, str]) -> list[tuple]:
    """Feature rows of records (dicts with record_id, workload_key, trace_json, tir_script, target_json)."""
    return [(r["record_id"], *program_row(record_program(r, task_scripts), r["target_json"])) for r in rows]


def _write_cache(path: Path, rows: list[tuple]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "record_id": [r[0] for r in rows],
        "n_leaves": pa.array([len(r[1]) for r in rows], pa.int32()),
        "leaves": [r[1].ravel().tolist() for r in rows],
        "ordering": [r[2].tolist() for r in rows],
        "n_stores": pa.array([len(r[3]) for r in rows], pa.int32()),
        "stores": [r[3].ravel().tolist() for r in rows],
        "analytic": [r[4].tolist() for r in rows],
    }, schema=pa.schema([("record_id", pa.string()), ("n_leaves", pa.int32()), ("leaves", pa.list_(pa.float32())),
                         ("ordering", pa.list_(pa.int32())), ("n_stores", pa.int32()),
                         ("stores", pa.list_(pa.float32())), ("analytic", pa.list_(pa.float32()))],
                        metadata={b"feature_tag": CACHE_TAG.encode()}))
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def _read_cache(path: Path) -> dict[str, tuple]:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    out = {}
    ids, nl, lv, od, ns, st, an = (t.column(c).to_pylist() if c in ("record_id", "n_leaves", "n_stores")
                                   else t.column(c) for c in ("record_id", "n_leaves", "leaves", "ordering",
                                                               "n_stores", "stores", "analytic"))
    lv_flat = lv.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    st_flat = st.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    od_flat = od.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    an_arr = an.combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, N_ANALYTIC)
    a = b = c = 0
    for i, rid in enumerate(ids):
        out[rid] = (lv_flat[a:a + nl[i] * LEAF_DIM].reshape(nl[i], LEAF_DIM), od_flat[c:c + nl[i]],
                    st_flat[b:b + ns[i] * N_PER_STORE].reshape(ns[i], N_PER_STORE), an_arr[i])
        a += nl[i] * LEAF_DIM
        b += ns[i] * N_PER_STORE
        c += nl[i]
    return out


def cache_file_tag(path: Path) -> str | None:
    """The feature tag a cache file was written under (its Parquet metadata; None if it has none), without the
    device-feature suffix older tags had (`-dev1`: the program features are the same, see `cache_root`)."""
    import pyarrow.parquet as pq

    tag = (pq.read_schema(path).metadata or {}).get(b"feature_tag")
    return None if tag is None else tag.decode().removesuffix("-dev1")


def cache_root(ds, tag: str = CACHE_TAG) -> Path:
    """Where a dataset's feature cache lives: DIR/features/<tag>, or the user cache if DIR is read-only."""
    root = paths.features_dir(ds.root) / tag
    old = root.with_name(f"{tag}-dev1")  # the same features, kept there while the tag named the device features too
    try:
        if tag == CACHE_TAG and old.is_dir() and not root.exists():
            old.rename(root)  # moved, not rebuilt
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-test"
        probe.write_text("")
        probe.unlink()
        return root
    except OSError:
        h = hashlib.sha1(str(Path(ds.root).resolve()).encode()).hexdigest()[:12]
        alt = paths.cache_dir() / "features" / h / tag
        alt.mkdir(parents=True, exist_ok=True)
        return alt


def dataset_features(ds, records=None, jobs: int | None = None, progress: bool = True) -> ProgramFeatures:
    """Features of `records` (a DataFrame of `ds`'s records; default: all ok records), row-aligned with it.

    Wanted records whose features are not cached yet are copied from a cached record of the same program and target
    (`same_program`) or else computed with `jobs` processes (default: all cores, at most one per partition), and
    added to their partition's cache file (so a cache file may hold part of its partition: the records some caller
    wanted); records not in any partition (e.g. still in a journal) are an error.
    """
    from ..devices import DeviceSpec

    if records is None:
        from ..data.frame import records_frame

        records = records_frame(ds)
    root = cache_root(ds)
    wanted = set(records["record_id"])
    found: dict[str, tuple] = {}
    cached: dict[Path, list[str]] = {}  # cache file -> the record ids it holds
    for part in ds._parts("records"):
        cache = root / part.name
        if cache.exists():
            stored = cache_file_tag(cache)
            if stored not in (None, CACHE_TAG):  # a tried-and-removed version's cache under a reused number
                warnings.warn(f"feature cache {str(cache)!r} holds {stored} features, not {CACHE_TAG}: recomputing "
                              "its records (delete the directory to recompute them all at once)", stacklevel=2)
                continue
            rows = _read_cache(cache)
            found.update(rows)
            cached[cache] = list(rows)
    need = wanted.difference(found)
    if need:
        alias = same_program(ds, need, found)
        todo: list[tuple[Path, list[dict], list[tuple]]] = []  # (cache file, rows to compute, rows it already has)
        for part, rows in rows_to_build(ds, need).items():
            cache = root / part.name
            copies = [(r["record_id"], *found[alias[r["record_id"]]]) for r in rows if r["record_id"] in alias]
            keep = [(i, *found[i]) for i in cached.get(cache, [])] + copies
            rest = [r for r in rows if r["record_id"] not in alias]
            if rest:
                todo.append((cache, rest, keep))
            else:
                _write_cache(cache, keep)
            found.update((c[0], c[1:]) for c in copies)
        if todo:
            found.update(_compute(todo, dataset_task_scripts(ds), jobs, progress))
    devices = {s: np.asarray(DeviceSpec.from_json(s).feature_vector(), np.float32)
               for s in records["device_spec_json"].unique()}
    rows = [found[i] for i in records["record_id"]]
    return _from_rows(rows, np.stack([devices[s] for s in records["device_spec_json"]]) if rows else
                      np.zeros((0, N_DEVICE)))


def map_chunks(fn, chunks: list[tuple], on_done, jobs: int | None, progress: bool, label: str) -> None:
    """Call `fn(rows, task_scripts)` for each (rows, task_scripts) of `chunks` in `jobs` spawned processes (in this
    one for jobs=1) and hand each result to `on_done(i, result)` (i: the chunk's index) as it finishes, so that a
    kill loses only the chunks in flight; a rich bar counts rows."""
    import multiprocessing as mp

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    jobs = max(1, min(jobs or os.cpu_count() or 1, len(chunks)))
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  disable=not progress, transient=True) as bar:
        t = bar.add_task(label, total=sum(len(c[0]) for c in chunks))
        if jobs == 1:
            for i, (rows, scripts) in enumerate(chunks):
                on_done(i, fn(rows, scripts))
                bar.advance(t, len(rows))
            return
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            futs = {pool.submit(fn, rows, scripts): i for i, (rows, scripts) in enumerate(chunks)}
            for f in as_completed(futs):
                on_done(futs[f], f.result())
                bar.advance(t, len(chunks[futs[f]][0]))


def scripts_of(rows: list[dict], task_scripts: dict[str, str]) -> dict[str, str]:
    """The task scripts `rows` need (a worker process gets only those)."""
    return {r["workload_key"]: task_scripts[r["workload_key"]] for r in rows if task_scripts.get(r["workload_key"])}


def _compute(todo, task_scripts, jobs, progress) -> dict[str, tuple]:
    """Feature rows of `todo` (cache file, rows to compute, rows it already has), a process per partition."""
    found: dict[str, tuple] = {}

    def done(i, rows):
        cache, _, old = todo[i]
        _write_cache(cache, old + rows)
        found.update({r[0]: r[1:] for r in rows})

    map_chunks(_compute_partition, [(rs, scripts_of(rs, task_scripts)) for _, rs, _ in todo], done, jobs, progress,
               "features")
    return found
