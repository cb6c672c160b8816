"""Cross-device adaptation, leave one device out (CDMPP §7.3-7.4, Pruner §2.5, Moses §3.3).

    python bench/cross_device.py [--data DIR] [--targets KEY,...] [--ks 5,10,20,50]
                                 [--methods cmd,finetune,mtl,lottery,proxy,proxy:then=cmd] [--random-seeds 5]
                                 [--programs-per-task 8]
                                 [--param KEY=VALUE ...] [--adapt-param KEY=VALUE ...] [--json FILE] [--plot FILE]

`--param use_asm=true` gives the cdmpp the programs' assembly features (`perfcast data features --asm` first).

For each target device of the dataset (a device key: `local:mcpu=x86-64,threads=1@AMD EPYC/znver3`, ...): a `cdmpp`
model is trained on every *other* device's records (split `by_device`), scored on all the target's records (no
adaptation), then for each K, sampler and method: K tasks are chosen among the tasks the target has records of
(`kmeans`: seed 0; `random`: mean over `--random-seeds` seeds), up to `--programs-per-task` of the target's records of
each are the measurements, the model is adapted to them, and the MAPE on the target's records of the *other* tasks is
reported. The measuring time of K tasks is the recorded build + run time of those records (mean over samplers). A
`proxy` run also records the device the target was predicted as (`proxy`: a device key; `proxy_scale`: its factor).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--targets", default=None, help="device keys to hold out (default: every device with >= 100 tasks)")
    ap.add_argument("--ks", default="5,10,20,50")
    ap.add_argument("--methods", default="cmd,finetune,mtl,lottery")
    ap.add_argument("--random-seeds", type=int, default=5)
    ap.add_argument("--programs-per-task", type=int, default=8)
    ap.add_argument("--param", action="append", default=["use_analytic=true"], help="cdmpp parameter KEY=VALUE")
    ap.add_argument("--adapt-param", action="append", default=[], help="adaptation parameter KEY=VALUE (all methods)")
    ap.add_argument("--base-dir", default=None,
                    help="keep each target's base model here and reuse it in later runs with the same --param")
    ap.add_argument("--json", default=None, help="write the full result here")
    ap.add_argument("--plot", default=None, help="PNG: MAPE vs K per method and sampler, one panel per target")
    ap.add_argument("--replot", default=None, help="only redraw --plot (and the tables) from this --json result")
    a = ap.parse_args()
    if a.replot:
        with open(a.replot) as f:
            out = json.load(f)
        _print_summary(out)
        if a.plot:
            _plot(out, a.plot)
        return

    from perfcast.adapt.workflow import adapt_model, mape_of, proxy_of, recorded_seconds, select_tasks
    from perfcast.cli.model_cmd import _parse_params
    from perfcast.devices.base import DeviceSpec
    from perfcast.eval.workflow import load_data

    params = _parse_params(a.param)
    ds, df, X = load_data(a.data, progress=False, asm=bool(params.get("use_asm")))  # --param use_asm=true
    y = df["latency_s"].to_numpy()
    keys = df["device_key"].to_numpy()
    tasks_per_dev = df.groupby("device_key")["workload_key"].nunique()
    targets = a.targets.split(",") if a.targets else sorted(tasks_per_dev[tasks_per_dev >= 100].index)
    ks = [int(k) for k in a.ks.split(",")]
    methods = a.methods.split(",")
    aparams = _parse_params(a.adapt_param)
    out = {"targets": {}, "ks": ks, "methods": methods, "random_seeds": a.random_seeds}
    print(f"{len(df)} records, devices: " + ", ".join(f"{k} ({n} tasks)" for k, n in tasks_per_dev.items()))
    for tgt in targets:
        t0 = time.time()
        base = _base_model(a.base_dir, tgt, params, (ds, df, X))
        is_t = keys == tgt
        src = np.flatnonzero(~is_t)
        wk = df["workload_key"].to_numpy()
        vec = DeviceSpec.from_json(df["device_spec_json"][np.flatnonzero(is_t)[0]]).feature_vector()
        cand = set(wk[is_t])
        res = {"records": int(is_t.sum()), "tasks": len(cand),
               "base_mape": mape_of(base, X.take(np.flatnonzero(is_t)), y[is_t]),
               "base_train_s": round(time.time() - t0, 1), "runs": []}
        print(f"\n{tgt}: {res['records']} records of {res['tasks']} tasks; base model (trained on the other devices) "
              f"ready in {res['base_train_s']:.0f} s; MAPE without adaptation {res['base_mape']:.1%}")
        for k in ks:
            if k >= len(cand):
                continue
            picks = [("kmeans", 0)] + [("random", s) for s in range(a.random_seeds)]
            for sampler, seed in picks:
                chosen = select_tasks(base, df.iloc[np.flatnonzero(is_t)].reset_index(drop=True),
                                      X.take(np.flatnonzero(is_t)), vec, k, sampler, seed)
                meas = np.concatenate([np.flatnonzero(is_t & (wk == t))[: a.programs_per_task] for t in chosen])
                held = np.flatnonzero(is_t & ~np.isin(wk, chosen))
                secs = recorded_seconds(df, meas)
                before = mape_of(base, X.take(held), y[held])
                for method in methods:
                    t1 = time.time()
                    name, mparams = _method_spec(method, aparams)
                    m = adapt_model(base, name, X.take(meas), y[meas], X.take(src), y[src], mparams, seed=seed)
                    after = mape_of(m, X.take(held), y[held])
                    px = proxy_of(m, df, X, tgt)  # proxy: the source device the target is predicted as
                    res["runs"].append({**({"proxy": px["device_key"], "proxy_scale": px["scale"]} if px else {}),
                                        "k": k, "sampler": sampler, "seed": seed, "method": method,
                                        "mape_before": before, "mape_after": after, "programs": int(len(meas)),
                                        "held_out": int(len(held)), "measure_s": secs,
                                        "adapt_s": round(time.time() - t1, 2)})
            _print_k(res["runs"], k, methods)
        out["targets"][tgt] = res
    _print_summary(out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    if a.plot:
        _plot(out, a.plot)
        print(f"plot: {a.plot}")


def _base_model(base_dir, tgt: str, params: dict, loaded):
    """cdmpp trained on every device but `tgt` (split by_device), from `base_dir` when a run kept it there."""
    import hashlib
    from pathlib import Path

    from perfcast.eval.workflow import train
    from perfcast.models import load_model

    path = None
    if base_dir:
        path = Path(base_dir) / hashlib.sha1(json.dumps([tgt, params], sort_keys=True).encode()).hexdigest()[:12]
        if (path / "model.json").exists():
            print(f"base model for {tgt}: {path}")
            return load_model(path)
    base = train(model="cdmpp", split="by_device", split_params={"test_device": tgt}, params=params,
                 loaded=loaded, progress=False)["estimator"]
    if path is not None:
        base.save(path)
    return base


def _method_spec(spec: str, aparams: dict) -> tuple[str, dict]:
    """`NAME[:KEY=VALUE[;KEY=VALUE]]` (e.g. `proxy:then=cmd`) -> (name, the --adapt-param values with these)."""
    from perfcast.cli.model_cmd import _parse_params

    name, _, rest = spec.partition(":")
    return name, {**aparams, **_parse_params([kv for kv in rest.split(";") if kv])}


def _mean(runs, **sel) -> float:
    v = [r["mape_after"] for r in runs if all(r[k] == w for k, w in sel.items())]
    return float(np.mean(v)) if v else float("nan")


def _print_k(runs, k, methods) -> None:
    cur = [r for r in runs if r["k"] == k]
    secs = np.mean([r["measure_s"] for r in cur])
    cells = "  ".join(f"{m} {_mean(cur, method=m, sampler='kmeans'):.1%}/{_mean(cur, method=m, sampler='random'):.1%}"
                      for m in methods)
    print(f"  K={k:3d} (measuring {secs:5.0f} s)  kmeans/random: {cells}", flush=True)


def _print_summary(out) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="cross-device MAPE after adaptation (kmeans / random mean)")
    t.add_column("target")
    t.add_column("none")
    for k in out["ks"]:
        t.add_column(f"K={k} best")
    wins, total = 0, 0
    for tgt, res in out["targets"].items():
        row = [tgt.split("@")[0] + " @" + tgt.split("@")[-1].split("/")[-1], f"{res['base_mape']:.1%}"]
        for k in out["ks"]:
            cur = [r for r in res["runs"] if r["k"] == k]
            if not cur:
                row.append("-")
                continue
            best = min(out["methods"], key=lambda m: _mean(cur, method=m, sampler="kmeans"))
            km, rd = _mean(cur, method=best, sampler="kmeans"), _mean(cur, method=best, sampler="random")
            row.append(f"{best} {km:.1%} / {rd:.1%}")
            for m in out["methods"]:
                total += 1
                wins += _mean(cur, method=m, sampler="kmeans") < _mean(cur, method=m, sampler="random")
        t.add_row(*row)
    Console().print(t)
    if total:
        print(f"kmeans beats the random mean in {wins} of {total} (target, K, method) cells")


def _plot(out, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(out["targets"])
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.8), squeeze=False)
    for ax, (tgt, res) in zip(axes[0], out["targets"].items()):
        for i, m in enumerate(out["methods"]):  # one colour per method; solid kmeans, dashed random
            for sampler, style in (("kmeans", "-"), ("random", "--")):
                ks = [k for k in out["ks"] if any(r["k"] == k for r in res["runs"])]
                ax.plot(ks, [100 * _mean([r for r in res["runs"] if r["k"] == k], method=m, sampler=sampler)
                             for k in ks], style, color=f"C{i}", marker="o", label=f"{m} ({sampler})")
        ax.axhline(100 * res["base_mape"], color="grey", lw=1, label="no adaptation")
        ax.set_xscale("log")
        ax.set_xticks(out["ks"], [str(k) for k in out["ks"]])
        ax.minorticks_off()
        ax.set_xlabel("tasks measured on the target (K)")
        ax.set_ylabel("MAPE on the target's other tasks (%)")
        ax.set_title(f"{tgt.split('@')[0]} @ {tgt.split('/')[-1]}", fontsize=9)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
