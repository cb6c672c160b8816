"""What a model's training programs cover, and one line for programs outside it.

The bundled data is float32 networks: its tasks' buffers are float32, plus int32 / int64 index buffers of a few
gather kernels. A program that computes in another element type (an int8 quantized matmul, a float16 kernel) is
predicted from features that never saw its instructions: an int8 × int8 → int32 matmul tuned on the znver3 host
came out at a median 0.06–0.07 × its measured time, Kendall τ .24 (`python bench/outside_zoo.py --ops
int8_matmul`). So a trained model remembers its training programs' element types (`info["train_dtypes"]`: dtype →
training records, set by `perfcast.eval.workflow.train`) and every prediction path says when a program uses one it
never saw (`perfcast predict`, `perfcast predict-records`, `predict_programs`, the search cost model). A model saved
before this existed has no such entry and gives no warning.

Element types are read from the program's TVMScript: every quoted dtype (buffer declarations, allocations, casts).

A float32 program can still fall outside what the features tell apart: one that repeats loop-invariant work, a
reduction a schedule computed inside a loop it does not use (`_tir.Leaf.invariant_extent`; meta-schedule's
compute-at of a norm's statistics under the output's inner loop). LLVM hoists such work out of the loop in some
programs and runs it on every trip in others, and the features do not say which (`bench/invariant_work.py`), so
the prediction can be several times off either way. `recomputed_share` is the share of a program's counted work
such loops repeat; at RECOMPUTE_SHARE or more, `perfcast predict-records` (on a tuning database), `perfcast
predict` (per kernel), the search cost model (a count in its closing line) and `predict_programs` say so.
"""

from __future__ import annotations

import re

DTYPE_RE = re.compile(r'"((?:u?int|float|bfloat)\d+(?:x\d+)?|bool)"')
# a program whose loop-invariant loops repeat at least this share of its counted work is flagged: the bundled
# model's held-out programs of norm, softmax, mean and pooling tasks that do: MAPE 69.7 %, predicted / measured
# 0.20-3.06 (5th-95th percentile), the others 16.6 % (`python bench/invariant_work.py --tasks
# 'norm|softmax|mean|pool' --model-errors`, 2026-12-01)
RECOMPUTE_SHARE = 0.5


def program_dtypes(program) -> frozenset[str]:
    """The element types a program declares, allocates or casts to: its TVMScript's quoted dtypes
    ('float32', 'int8', ...). `program`: TVMScript text, a PrimFunc or an IRModule."""
    text = program if isinstance(program, str) else program.script()
    return frozenset(DTYPE_RE.findall(text))


def task_dtypes(ds) -> dict[str, frozenset[str]]:
    """{workload key: `program_dtypes` of the task's TVMScript} over a dataset's task table."""
    tasks = ds.read("tasks", columns=["workload_key", "tir_script"]).to_pandas()
    return {k: program_dtypes(s) for k, s in zip(tasks["workload_key"], tasks["tir_script"])}


def record_dtypes(ds, df) -> list[frozenset[str]]:
    """Each record's task's element types (none for a record whose task is not in the task table)."""
    per_task = task_dtypes(ds)
    return [per_task.get(k, frozenset()) for k in df["workload_key"]]


def training_dtypes(ds, df, idx) -> dict[str, int]:
    """{dtype: training records whose task uses it} over the records `idx` of `df`, most used first."""
    per_task = task_dtypes(ds)
    counts: dict[str, int] = {}
    for key, n in df["workload_key"].iloc[idx].value_counts().items():
        for d in per_task.get(key, ()):
            counts[d] = counts.get(d, 0) + int(n)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def unseen_dtypes(model, dtypes) -> list[str]:
    """The dtypes of `dtypes` that none of the model's training programs use ([] for a model that does not know
    its training dtypes)."""
    seen = (getattr(model, "info_", {}) or {}).get("train_dtypes")
    return [] if seen is None else sorted(set(dtypes) - set(seen))


def dtype_warning(model, programs_dtypes, what: str = "programs") -> str | None:
    """One line when some of the programs (their `program_dtypes`) compute in element types the model never trained
    on; None when all are covered (or the model does not know its training dtypes)."""
    return unseen_warning([unseen_dtypes(model, d) for d in programs_dtypes], what)


def unseen_warning(unseen: list, what: str = "programs") -> str | None:
    """The line for programs whose `unseen_dtypes` are `unseen` (one list per program, [] when covered)."""
    n = sum(bool(b) for b in unseen)
    if not n:
        return None
    types = sorted({t for b in unseen for t in b})
    return (f"{n} of {len(unseen)} {what} use {', '.join(types)}, which none of the model's training programs use: "
            f"their predictions are extrapolations and can be off many times over; measure them, or collect such "
            f"programs (`perfcast collect`) and retrain")


def counted_work(program) -> tuple[float, float]:
    """(a program's counted work: FLOPs + loads of every store times its executions, the same with the loops each
    store does not depend on run once: `_tir.Leaf.invariant_extent`). `program`: a PrimFunc, an IRModule or
    TVMScript text."""
    from ..features._tir import walk
    from ..features.base import as_primfunc

    leaves = walk(as_primfunc(program)).leaves
    full = sum((x.float_ops + x.n_loads) * x.executions for x in leaves)
    return float(full), float(sum((x.float_ops + x.n_loads) * x.executions / x.invariant_extent for x in leaves))


def recomputed_share(program) -> float:
    """The share of a program's counted work that loops it does not depend on repeat (`counted_work`): 0 for most
    programs, near 1 when a reduction runs inside a long loop it does not use."""
    full, once = counted_work(program)
    return 1.0 - once / full if full else 0.0


def recompute_warning(shares, what: str = "programs") -> str | None:
    """One line when some of the programs (their `recomputed_share`) repeat loop-invariant work; None otherwise."""
    n = sum(x >= RECOMPUTE_SHARE for x in shares)
    if not n:
        return None
    return (f"{n} of {len(shares)} {what} repeat loop-invariant work (a reduction computed inside a loop it does not "
            f"use), which LLVM hoists out of the loop in some programs and runs every time in others: their "
            f"predictions can be several times off either way (marked `recomputes`); measure them")
