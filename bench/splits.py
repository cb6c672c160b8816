"""How much does a model gain from having seen other programs of the same task? One model recipe trained and
scored under several named splits of the same data, in one process (one data load):

- `random`: records shuffled 8:1:1, so almost every test program's task has other programs in training;
- `by_task`: whole tasks held out (10 % test, 10 % val), as random programs of unseen operators;
- `by_network`: the held-out networks' tasks (resnet50, mobilenet_v2, bert_tiny), the bundled model's split.

If `random` is far below `by_task`, the error on unseen networks is about tasks the model has not seen, and more
distinct tasks (shapes, operators) would help more than more programs of the tasks already collected; if they are
close, the program representation itself is the limit. Test MAPE, Kendall tau and top-1 per split; no measuring.

`--task-fractions 0.25,0.5,1` also asks how the error scales with the number of distinct training tasks: for each
fraction f, the records of a seeded random (1 - f) share of the tasks that occur in none of the held-out networks
are dropped before splitting (so the by_network test part stays the same programs), and every split is trained
again on what is left. `--subsample programs` drops a (1 - f) share of those tasks' records instead (every task
kept): at the same number of training programs, is it better to have more tasks or more programs per task?
`--drop suites` asks which data is worth more per collected program: it drops every task that occurs only in layer
suites (`layers:...`, `op_kinds:...`; few programs each) outside the held-out networks; `--drop networks` drops
random tasks (seeded) that occur only in real networks until at least as many records are gone (fewer tasks, many
programs each). Tasks of both kinds stay in either case.
`--measured-before 2026-11-28T14:50` trains on the records measured before that time only (UTC, ISO 8601): with and
without it, the same recipe says what a data round added (the test part is the same as long as the round measured no
program of a test task). A program the round re-measured under a newer protocol is dropped, not replaced by its
older record: "before" is the data minus the round's records. A recipe that reads the assembly columns
(`--param features=program_asm`, `--param use_asm=true`) gets them loaded (`asm1`, committed beside the dataset).

    python bench/splits.py [--model lgbm] [--param features=program --param target_scale=work]
                           [--splits random,by_task,by_network] [--task-fractions 1] [--subsample tasks]
                           [--drop suites|networks] [--measured-before ISO_TIME] [--data DIR] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="lgbm", help="model recipe (a registry name; default lgbm)")
    ap.add_argument("--param", action="append", default=None,
                    help="KEY=VALUE model parameter (default: features=program, target_scale=work)")
    ap.add_argument("--splits", default="random,by_task,by_network")
    ap.add_argument("--task-fractions", default="1",
                    help="comma-separated shares of the non-held-out tasks to keep, each in (0, 1] (default 1)")
    ap.add_argument("--subsample", default="tasks", choices=["tasks", "programs"],
                    help="what --task-fractions drops: whole tasks (default) or programs of every task")
    ap.add_argument("--drop", default=None, choices=["suites", "networks"],
                    help="drop the suite-only tasks, or as many records of network-only tasks (see above)")
    ap.add_argument("--measured-before", default=None,
                    help="only records measured before this UTC time, e.g. 2026-11-28T14:50 (default: all)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.cli.model_cmd import _parse_params
    from perfcast.errors import PerfcastError
    from perfcast.eval import held_out_task_mask
    from perfcast.eval.workflow import load_data, train
    from perfcast.models import get_model

    params = _parse_params(a.param or ["features=program", "target_scale=work"])
    try:
        fractions = [float(f) for f in a.task_fractions.split(",") if f.strip()]
    except ValueError:
        fractions = []
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise PerfcastError(f"--task-fractions {a.task_fractions!r}: each share must be in (0, 1], e.g. 0.25,0.5,1")
    loaded = load_data(a.data, progress=False, measured_before=a.measured_before,
                       asm=get_model(a.model, **params).needs_asm)  # features=program_asm reads the asm columns
    out = {"model": a.model, "params": params, "seed": a.seed, "measured_before": a.measured_before, "runs": []}
    if a.drop is not None:
        loaded = drop_kind(loaded, a.drop, a.seed)
    out["drop"] = a.drop
    for f in fractions:
        part = keep_task_fraction(loaded, f, a.seed, a.subsample)
        n_tasks = int(part[1].loc[~held_out_task_mask(part[1]), "workload_key"].nunique())
        for split in [s.strip() for s in a.splits.split(",") if s.strip()]:
            t0 = time.perf_counter()
            r = train(model=a.model, split=split, params=params, seed=a.seed, progress=False, loaded=part)
            o = r["test"]["overall"]
            out["runs"].append({"fraction": f, "subsample": a.subsample, "split": split, "sizes": r["sizes"],
                                "tasks_outside_test_networks": n_tasks,
                                "mape": o["mape"], "kendall_tau": o["kendall_tau"], "top1": o["top1"],
                                "seconds": time.perf_counter() - t0})
    if a.json:
        print(json.dumps(out, indent=1))
        return
    before = f", records measured before {a.measured_before}" if a.measured_before else ""
    dropped = f", without the {a.drop} tasks of --drop" if a.drop else ""
    print(f"{a.model} {params}, seed {a.seed}{before}{dropped}")
    for o in out["runs"]:
        print(f"{o['subsample']} x{o['fraction']:<5} {o['split']:>11}: test MAPE {100 * o['mape']:.1f} %, "
              f"Kendall tau {o['kendall_tau']:.3f}, top-1 {o['top1']:.3f} ({o['sizes']['train']:,} train / "
              f"{o['sizes']['test']:,} test programs, {o['tasks_outside_test_networks']:,} tasks outside the test "
              f"networks, {o['seconds']:.0f} s)")


def drop_kind(loaded, kind: str, seed: int):
    """`loaded` without the tasks outside the held-out networks that occur only in layer suites (`kind="suites"`), or
    without seeded random tasks that occur only in real networks, at least as many records (`kind="networks"`)."""
    import numpy as np

    from perfcast.eval import held_out_task_mask
    from perfcast.layerwise.suite import PREFIX

    suite_prefixes = (PREFIX, "op_kinds:")  # layer suites, and the op-kinds suite (layerwise/suites/op_kinds.py)
    ds, df, X = loaded
    outside = df[~held_out_task_mask(df)]
    nets = outside.groupby("workload_key")["networks"].agg(lambda c: {n for ns in c for n in ns})
    suite_only = nets[nets.map(lambda ns: all(n.startswith(suite_prefixes) for n in ns))].index
    if kind == "suites":
        drop = set(suite_only)
    else:
        net_only = np.sort(nets[nets.map(lambda ns: not any(n.startswith(suite_prefixes) for n in ns))].index)
        sizes = outside.groupby("workload_key").size()
        order = np.random.default_rng(seed).permutation(net_only)
        need = int(sizes[suite_only].sum())
        n = int(np.searchsorted(np.cumsum(sizes[order].to_numpy()), need)) + 1
        drop = set(order[:n])
    keep = np.flatnonzero(~df["workload_key"].isin(drop).to_numpy())
    return ds, df.iloc[keep].reset_index(drop=True), X.take(keep)


def keep_task_fraction(loaded, fraction: float, seed: int, subsample: str = "tasks"):
    """`loaded` = (dataset, records, features) without the records of a seeded random (1 - fraction) share of the
    tasks outside the by_network test part (`perfcast.eval.held_out_task_mask`, so that part stays the same
    programs), or with `subsample="programs"` without a (1 - fraction) share of those tasks' records."""
    import numpy as np

    from perfcast.eval import held_out_task_mask

    if fraction >= 1:
        return loaded
    ds, df, X = loaded
    outside = ~held_out_task_mask(df)
    rng = np.random.default_rng(seed)
    if subsample == "programs":
        others = np.flatnonzero(outside)
        dropped = rng.permutation(others)[round(fraction * len(others)):]
        keep = np.setdiff1d(np.arange(len(df)), dropped)
    else:
        tasks = np.sort(df.loc[outside, "workload_key"].unique())
        drop = set(rng.permutation(tasks)[round(fraction * len(tasks)):])
        keep = np.flatnonzero(~df["workload_key"].isin(drop).to_numpy())
    return ds, df.iloc[keep].reset_index(drop=True), X.take(keep)


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
