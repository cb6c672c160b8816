"""Where is a model's error: between tasks or within them? On the model's own split (default: the bundled model,
by_network), for its test part and, for comparison, its training part (both: all devices, or `--device`):

- the variance of the log error log(predicted / measured), split into the part shared by a task's programs on one
  device (a per-(task, device) offset: the task is mis-predicted as a whole) and the part within a task;
- within each (task, device) group of at least `--min-programs` programs: the slope of log predicted on log
  measured (1 = the model keeps the task's spread; below 1 = it flattens it, so fast programs come out too slow and
  slow ones too fast), the reverse slope of log measured on log predicted (1 = the flattening is the right
  shrinkage for what the model knows; above 1 = the model flattens more than it should, and stretching its
  within-task predictions would help) and the Spearman correlation (ranking quality), medians over the groups;
- MAPE, and the MAPE the same predictions would score scaled by the best constant factor (how much of the MAPE is a
  global calibration; MAPE's optimum lies below the median) and by the best factor of each (task, device) group (an
  oracle: the error left if each task's level were known, the within-task floor of this model's predictions);
- the winner's curse: the median predicted / measured of each group's measured-fastest program, against that of
  the model's own first choice (its predicted-fastest), over the same groups. A search keeps the measured-fastest,
  so a tuned kernel inherits the first (`perfcast.e2e.selection`);
- where the MAPE lies: the share of programs and of the summed error by predicted / measured ratio, MAPE by schedule
  kind (TVM default kernels, random schedules, imported search programs), the `--top` operator families (task name
  without its numbers) carrying most of the summed error, and the task-median oracle (every program predicted as
  its group's median measured latency: the spread within tasks a model must resolve).

No measuring: it reads the dataset and cached features.

    python bench/within_task.py [--model DIR] [--data DIR] [--device local] [--min-programs 6] [--json]
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import pandas as pd


def best_factor(ratio: np.ndarray) -> float:
    """The constant c minimizing mean |c * ratio - 1| (MAPE after scaling predictions whose predicted / measured is
    `ratio` by c): sum r_i |c - 1/r_i| is minimized by the median of 1/r_i weighted by r_i."""
    inv = 1.0 / ratio
    order = np.argsort(inv)
    cum = np.cumsum(ratio[order])
    return float(inv[order][np.searchsorted(cum, cum[-1] / 2)])


def analyse(e: np.ndarray, log_y: np.ndarray, groups: np.ndarray, min_programs: int) -> dict:
    """Figures of log errors `e` (log predicted - log measured) of programs with log latency `log_y` in `groups`."""
    from scipy.stats import spearmanr

    s = pd.Series(e)
    offset = s.groupby(groups).transform("mean").to_numpy()
    slopes, reverse, rhos, fastest, first = [], [], [], [], []
    for _, idx in pd.Series(np.arange(len(e))).groupby(groups):
        i = idx.to_numpy()
        if len(i) < min_programs or np.ptp(log_y[i]) == 0:
            continue
        lp = log_y[i] + e[i]
        slopes.append(np.polyfit(log_y[i], lp, 1)[0])
        if np.ptp(lp) > 0:
            reverse.append(np.polyfit(lp, log_y[i], 1)[0])
        rhos.append(spearmanr(log_y[i], lp).statistic)
        fastest.append(float(np.exp(e[i][np.argmin(log_y[i])])))
        first.append(float(np.exp(e[i][np.argmin(lp)])))
    ratio = np.exp(e)
    c = best_factor(ratio)
    per_group = pd.Series(ratio).groupby(groups).transform(lambda r: best_factor(r.to_numpy())).to_numpy()
    return {"programs": int(len(e)), "groups": int(len(set(groups))), "mape": float(np.mean(np.abs(np.expm1(e)))),
            "log_error_var": float(np.var(e)), "task_offset_var": float(np.var(offset)),
            "within_task_var": float(np.var(e - offset)),
            "within_share": float(np.var(e - offset) / np.var(e)) if np.var(e) > 0 else float("nan"),
            "groups_with_slope": len(slopes),
            "median_within_slope": float(np.median(slopes)) if slopes else float("nan"),
            "median_reverse_slope": float(np.median(reverse)) if reverse else float("nan"),
            "median_within_spearman": float(np.nanmedian(rhos)) if rhos else float("nan"),
            "median_ratio_measured_fastest": float(np.median(fastest)) if fastest else float("nan"),
            "median_ratio_predicted_fastest": float(np.median(first)) if first else float("nan"),
            "best_factor": c, "mape_after_best_factor": float(np.mean(np.abs(c * ratio - 1))),
            "mape_with_task_factor_known": float(np.mean(np.abs(per_group * ratio - 1)))}


RATIO_BINS = ((0.0, 0.5), (0.5, 0.8), (0.8, 1.25), (1.25, 2.0), (2.0, np.inf))


def family(task_name: str) -> str:
    """`fused_conv2d3_add7_relu2` -> `fused_conv2d_add_relu`: the operator family of a task name."""
    return re.sub(r"(?<=[a-z_])\d+(?=_|$)", "", task_name)


def breakdown(e: np.ndarray, log_y: np.ndarray, groups: np.ndarray, kinds: np.ndarray, names: np.ndarray,
              top: int) -> dict:
    """Where the summed absolute percentage error of log errors `e` lies (see the module docstring)."""
    ratio = np.exp(e)
    ape = np.abs(ratio - 1)
    total = float(ape.sum())
    med = pd.Series(log_y).groupby(groups).transform("median").to_numpy()
    fam = np.array([family(n) for n in names])
    fams = [{"family": f, "programs": int((fam == f).sum()), "mape": float(ape[fam == f].mean()),
             "error_share": float(ape[fam == f].sum() / total)} for f in sorted(set(fam))]
    return {"task_median_oracle_mape": float(np.mean(np.abs(np.expm1(med - log_y)))),
            "by_ratio": {f"[{lo:g}, {hi:g})": {"programs": float(((ratio >= lo) & (ratio < hi)).mean()),
                                               "error_share": float(ape[(ratio >= lo) & (ratio < hi)].sum() / total)}
                         for lo, hi in RATIO_BINS},
            "by_kind": {k: {"programs": int((kinds == k).sum()), "mape": float(ape[kinds == k].mean())}
                        for k in sorted(set(kinds))},
            "families": sorted(fams, key=lambda d: -d["error_share"])[:top]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--device", default="", help="only records of this device id or key (default: all devices)")
    ap.add_argument("--min-programs", type=int, default=6, help="smallest (task, device) group given a slope")
    ap.add_argument("--top", type=int, default=8, help="operator families listed by their share of the error")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.eval.workflow import own_split, records_of_device

    m, ds, df, X, name, sp = own_split(a.model, a.data)
    y = df["latency_s"].to_numpy()
    keep = records_of_device(df, a.device)[1] if a.device else np.ones(len(df), bool)
    out = {"model": m.name, "split": name, "device": a.device or "all", "parts": {}}
    for part, rows in (("test", sp.test), ("train", sp.train)):
        idx = rows[keep[rows]]
        if not len(idx):
            continue
        e = np.log(m.predict(X.take(idx))) - np.log(y[idx])
        groups = (df["workload_key"].iloc[idx].astype(str) + "|" + df["device_key"].iloc[idx].astype(str)).to_numpy()
        out["parts"][part] = analyse(e, np.log(y[idx]), groups, a.min_programs)
        out["parts"][part]["where"] = breakdown(e, np.log(y[idx]), groups, df["schedule_kind"].to_numpy()[idx],
                                                df["task_name"].to_numpy()[idx], a.top)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{m.name} on its {name} split, device {out['device']}")
    for part, r in out["parts"].items():
        print(f"  {part:5s} {r['programs']:6d} programs in {r['groups']} (task, device) groups: MAPE "
              f"{r['mape']:.1%}; log-error variance {r['log_error_var']:.3f} = task offsets "
              f"{r['task_offset_var']:.3f} + within tasks {r['within_task_var']:.3f} ({r['within_share']:.0%})")
        print(f"        within-task slope {r['median_within_slope']:.2f}, Spearman "
              f"{r['median_within_spearman']:.2f}, reverse slope {r['median_reverse_slope']:.2f} (median of "
              f"{r['groups_with_slope']} groups); best constant "
              f"factor x{r['best_factor']:.2f} -> MAPE {r['mape_after_best_factor']:.1%}; "
              f"each group's best factor known -> {r['mape_with_task_factor_known']:.1%}")
        print(f"        predicted / measured of each group's measured-fastest program {r['median_ratio_measured_fastest']:.2f}"
              f", of its predicted-fastest {r['median_ratio_predicted_fastest']:.2f} (medians; the winner's curse)")
        w = r["where"]
        print(f"        task-median oracle MAPE {w['task_median_oracle_mape']:.1%}; by kind: " + ", ".join(
            f"{k} {v['programs']} MAPE {v['mape']:.1%}" for k, v in w["by_kind"].items()))
        print("        predicted / measured: " + ", ".join(
            f"{b} {v['programs']:.0%} of programs, {v['error_share']:.0%} of error" for b, v in w["by_ratio"].items()))
        print("        families by share of error: " + ", ".join(
            f"{f['family']} {f['error_share']:.0%} (MAPE {f['mape']:.0%}, {f['programs']})" for f in w["families"]))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a bad --device, --model or --data: one line, as the CLI says it
