"""Does the work the compiled code really executes tell a model what LLVM did with loop-invariant work?

    python bench/asm_executed_work.py [--tasks 'mean|layer_norm|softmax'] [--work DIR] [--seeds 0,1]
                                      [--db DIR ...] [--json]

A reduction that meta-schedule placed inside a loop it does not use (`recomputes`, Programs outside the training
data) runs once per row when LLVM hoists it and once per element when it does not: the same TIR, 100x apart
(RMSNorm program 47 of stop 73's database: 42 µs; program 61: 18 ms). The assembly features count instructions,
not how often they run. This bench reads each loop's trip count from the assembly itself — the latch's
`cmp $N, %r` with the induction update (`inc`, `add $S`, `sub $-S`, `dec`) and the register's value set before
the loop (`mov $X`, `xor`) — and weighs every instruction by the product of its loops' trips (a loop whose count
the code does not state, such as the parallel runtime's chunk loop, counts once). On a 64x64x64 matmul the
executed floating-point lanes come out at exactly 2 * 64^3 for x86-64, haswell and znver4 code.

The screen: the records of the tasks matching `--tasks` (all devices), each built for its target (cached in
`--work`, ~20 min for 11,929 records on 2 cores), a LightGBM on log latency trained on their by_network training
part (seed 0 split) with and without these columns (the tree member's `program` vector, device and the 55 assembly
columns in both), early-stopped on the validation part, scored on the test part: overall, on the programs that
recompute (`recomputed_share` >= 0.5) and on the others; and on meta-schedule databases (`--db`, tuned on this
machine: `bench/outside_zoo.py --work DIR` makes them) with the median log ratio removed (the host's speed, which
`--calibrate` removes). Needs the assembly feature cache (`perfcast data features --asm`). No measuring.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from pathlib import Path

import numpy as np

_IMM_REG = re.compile(r"^\$(-?\d+),\s*(%\w+)$")
_REG_REG = re.compile(r"^(%\w+),\s*(%\w+)$")


def _base(reg: str) -> str:
    """The 64-bit register a name aliases: %ecx -> cx, %r13d -> r13, %sil -> si."""
    r = reg.lstrip("%")
    m = re.match(r"^r(\d+)[dwb]?$", r)
    if m:
        return "r" + m.group(1)
    r = re.sub(r"^[re]", "", r) if len(r) == 3 else r
    return {"al": "ax", "bl": "bx", "cl": "cx", "dl": "dx", "sil": "si", "dil": "di"}.get(r, r)


def _value_before(func, a: int, reg: str):
    """The immediate `reg` holds when the loop starting at `a` is entered (`mov $X` or `xor r, r` among the 40
    instructions above it), or None."""
    for i in range(a - 1, max(-1, a - 40), -1):
        m, ops = func[i]
        parts = [p.strip() for p in ops.split(",")]
        if m.startswith("label:") or not parts or _base(parts[-1]) != reg or "(" in ops:
            continue
        if m.startswith("xor") and len(parts) == 2 and _base(parts[0]) == reg:
            return 0
        mm = _IMM_REG.match(ops.strip())
        return int(mm.group(1)) if m.startswith("mov") and mm else None
    return None


def trip_count(func, a: int, b: int) -> float | None:
    """How many times the loop (a, b) of `asm.loops` runs, as its latch and preheader state it; None otherwise."""
    window = [(m, o) for m, o in func[max(a, b - 6):b] if not m.startswith("label:")]
    bound = reg = None
    for m, o in reversed(window):
        if m.startswith("test"):
            return None
        if m.startswith("cmp"):
            mm, rr = _IMM_REG.match(o.strip()), _REG_REG.match(o.strip())
            if mm:
                bound, reg = int(mm.group(1)), _base(mm.group(2))
            elif rr:  # cmp %bound, %iv with the bound an immediate set before the loop
                for x, y in ((rr.group(1), rr.group(2)), (rr.group(2), rr.group(1))):
                    v = _value_before(func, a, _base(x))
                    if v is not None:
                        bound, reg = v, _base(y)
                        break
            break
    if reg is None and window:  # no compare: the jump reads the flags of the update (count to zero)
        parts = [p.strip() for p in window[-1][1].split(",")]
        reg, bound = (_base(parts[-1]), 0) if parts and parts[-1].startswith("%") else (None, None)
    if reg is None:
        return None
    step = None
    for m, o in func[a:b]:
        parts = [p.strip() for p in o.split(",")]
        if m.startswith("label:") or not parts or not parts[-1].startswith("%") or _base(parts[-1]) != reg:
            continue
        if m.startswith(("inc", "dec")):
            step = 1 if m.startswith("inc") else -1
        elif m.startswith(("add", "sub")) and len(parts) == 2 and parts[0].startswith("$"):
            step = int(parts[0][1:]) * (1 if m.startswith("add") else -1)
    if not step:
        return None
    start = _value_before(func, a, reg)
    if start is None:
        if step < 0 or not bound or bound <= 0:
            return None
        start = 0  # counting up from zero, set in a way the scan does not read
    if func[b][0] in ("jle", "jbe") and step > 0:
        bound += 1
    n = (bound - start) / step
    return float(np.ceil(n)) if 1 <= n <= 1e7 else None


def executed_figures(asm_text: str) -> dict[str, float]:
    """Per instruction class (`asm.CLASSES`) the executed count, the total, memory accesses, floating-point lanes,
    and how many loops had a readable / unreadable trip count."""
    from perfcast.features.asm import CLASSES, _lanes, classify, loops, parse

    mem = ("vload", "vstore", "load", "store", "spill", "gather", "scatter", "broadcast")
    out = {**{f"x_{c}": 0.0 for c in CLASSES}, "x_total": 0.0, "x_mem": 0.0, "x_fp_lanes": 0.0,
           "x_known_loops": 0.0, "x_unknown_loops": 0.0}
    for func in parse(asm_text):
        w = np.ones(len(func))
        for a, b in loops(func):
            t = trip_count(func, a, b)
            out["x_unknown_loops" if t is None else "x_known_loops"] += 1
            if t is not None:
                w[a:b + 1] *= t
        for i, (m, ops) in enumerate(func):
            if m.startswith("label:"):
                continue
            c = classify(m, ops)
            out[f"x_{c}"] += w[i]
            out["x_total"] += w[i]
            out["x_mem"] += w[i] * (c in mem)
            out["x_fp_lanes"] += w[i] * _lanes(c, m)
    return out


def _row(args) -> np.ndarray:
    program, target = args  # TVMScript text or PrimFunc; target JSON text ("" or None: this machine) or a Target
    from perfcast.features.asm import program_asm
    from perfcast.features.base import as_primfunc

    if isinstance(target, str) and not target:
        target = None
    try:
        f = executed_figures(program_asm(as_primfunc(program), target))
        return np.log2(1.0 + np.array(list(f.values()), np.float64)).astype(np.float32)
    except Exception:  # noqa: BLE001 - a program LLVM refuses is a row of NaN, not a lost run
        return np.full(len(executed_figures("")), np.nan, np.float32)


def _build(df, scripts, work: Path, regex: str):
    """(record ids, executed-work rows) of the records whose task matches `regex` (`scripts`: record id -> its
    TVMScript), cached in `work`."""
    import multiprocessing

    import pandas as pd
    from tqdm import tqdm

    path = work / f"executed_{hashlib.sha1(regex.encode()).hexdigest()[:10]}.parquet"
    if path.exists():
        t = pd.read_parquet(path)
        return t.record_id.to_numpy(), t.drop(columns="record_id").to_numpy(np.float32)
    sub = df[df.task_name.str.contains(regex, regex=True)]
    if sub.empty:
        from perfcast.errors import PerfcastError

        raise PerfcastError(f"no record's task matches {regex!r}; pass another --tasks regex")
    with multiprocessing.Pool() as pool:
        jobs = zip(scripts.loc[sub.record_id], sub.target_json)
        rows = list(tqdm(pool.imap(_row, jobs, chunksize=16), total=len(sub), desc="building"))
    t = pd.DataFrame(np.vstack(rows), columns=list(executed_figures("")))
    t.insert(0, "record_id", sub.record_id.to_numpy())
    work.mkdir(parents=True, exist_ok=True)
    t.to_parquet(path)
    return t.record_id.to_numpy(), t.drop(columns="record_id").to_numpy(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="mean|layer_norm|softmax", help="regex of the task names to screen on")
    ap.add_argument("--work", default="runs/executed", help="where the built rows are cached")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--db", action="append", default=[], help="a meta-schedule database tuned on this machine")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import lightgbm as lgb
    import pandas as pd

    from perfcast.data.importer import database_records
    from perfcast.eval.coverage import recomputed_share
    from perfcast.eval.workflow import load_data, make_split
    from perfcast.features.asm import program_asm
    from perfcast.features.base import as_primfunc
    from perfcast.features.cache import features_of_programs
    from perfcast.models.gbdt import program_matrix

    t0 = time.time()
    ds, df, X = load_data(None, asm=True)
    scripts = ds.read("records", ["record_id", "tir_script"]).to_pandas().drop_duplicates("record_id")
    scripts = scripts.set_index("record_id").tir_script
    ids, E = _build(df, scripts, Path(a.work), a.tasks)
    rows = pd.Series(np.arange(len(df)), index=df.record_id.to_numpy()).loc[ids].to_numpy()
    sp = make_split(df, "by_network", 0, None)
    tr, va, te = (np.intersect1d(part, rows) for part in (sp.train, sp.val, sp.test))
    E_all = np.full((len(df), E.shape[1]), np.nan, np.float32)
    E_all[rows] = E
    base = np.column_stack([program_matrix(X, use_device=True), X.asm])
    sets = {"without": base, "with": np.column_stack([base, E_all])}
    y = np.log(df.latency_s.to_numpy())
    rec = np.array([recomputed_share(as_primfunc(scripts[r])) >= 0.5 for r in df.record_id.to_numpy()[te]])
    dbs = []
    for db in a.db:
        recs = [r for r in database_records(db) if r.measured]
        progs = [r.program() for r in recs]
        Xd = features_of_programs(progs, "local", asm=True)
        b = np.column_stack([program_matrix(Xd, use_device=True), Xd.asm])
        e = np.vstack([_row((p, r.target)) for p, r in zip(progs, recs)])
        dbs.append((Path(db).name, {"without": b, "with": np.column_stack([b, e])},
                    np.log([r.measured_s for r in recs])))

    def mape(p, t):
        return float(np.mean(np.abs(np.exp(p - t) - 1.0)))

    out = {"records": {"train": len(tr), "val": len(va), "test": len(te), "test_recomputing": int(rec.sum())}}
    for seed in [int(s) for s in a.seeds.split(",")]:
        for name, M in sets.items():
            g = lgb.LGBMRegressor(n_estimators=3000, learning_rate=0.03, num_leaves=63, min_child_samples=20,
                                  subsample=0.8, subsample_freq=1, colsample_bytree=0.5, random_state=seed,
                                  verbose=-1)
            g.fit(M[tr], y[tr], eval_set=[(M[va], y[va])], callbacks=[lgb.early_stopping(100, verbose=False)])
            p = g.predict(M[te])
            r = {"test": mape(p, y[te]), "recomputing": mape(p[rec], y[te][rec]),
                 "others": mape(p[~rec], y[te][~rec])}
            for dbn, mats, yd in dbs:
                q = g.predict(mats[name])
                r[dbn] = mape(q - np.median(q - yd), yd)
            out[f"seed {seed}, {name}"] = r
    out["seconds"] = round(time.time() - t0)
    if a.json:
        print(json.dumps(out))
        return
    print(f"{a.tasks}: {out['records']}; LightGBM on log latency, MAPE (databases: the median ratio removed)")
    for k, r in out.items():
        if k.startswith("seed"):
            print(f"{k:18s} " + "  ".join(f"{n} {100 * v:.1f} %" for n, v in r.items()))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
