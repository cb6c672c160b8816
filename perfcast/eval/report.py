"""Plots of a model's test predictions: predicted vs measured (log-log), error CDF, per-network error bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_report(result: dict, out) -> list[str]:
    """PNG files from an `evaluate()` result (which carries the test rows and predictions) into `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    preds = result["_predictions"]
    rows = preds["_rows"]
    name = result["model"]
    pred = preds[name]
    y = rows["latency_s"].to_numpy()
    files = []

    fig, ax = plt.subplots(figsize=(5.5, 5))
    nets = sorted({n for ns in rows["networks"] for n in ns}) or ["(no network)"]
    for net in nets:
        mask = rows["networks"].map(lambda ns, net=net: net in ns).to_numpy() if net != "(no network)" else \
            np.ones(len(y), bool)
        ax.scatter(y[mask] * 1e3, pred[mask] * 1e3, s=5, alpha=0.5, label=net)
    lo, hi = min(y.min(), pred.min()) * 1e3, max(y.max(), pred.max()) * 1e3
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured latency (ms)", ylabel="predicted latency (ms)",
           title=f"{name}: MAPE {result[name]['overall']['mape']:.1%} on {len(y)} test programs")
    ax.legend(fontsize=7)
    files.append(_save(fig, out / "pred_vs_measured.png"))

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for key, p in preds.items():
        if key != "_rows":
            e = np.sort(np.abs(p - y) / y)
            ax.plot(e, np.arange(1, len(e) + 1) / len(e), label=f"{key} (median {np.median(e):.1%})")
    ax.set(xscale="log", xlabel="relative error |pred - measured| / measured", ylabel="share of test programs",
           title="error CDF")
    for t in (0.05, 0.1, 0.2):
        ax.axvline(t, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    files.append(_save(fig, out / "error_cdf.png"))

    models = [k for k in result if isinstance(result[k], dict) and "per_network" in result[k]]
    nets = sorted({n for k in models for n in result[k]["per_network"]})
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(nets) + 2), 4))
    w = 0.8 / max(len(models), 1)
    for i, k in enumerate(models):
        vals = [result[k]["per_network"].get(n, {}).get("mape", np.nan) for n in nets]
        ax.bar(np.arange(len(nets)) + i * w, vals, w, label=k)
    ax.set_xticks(np.arange(len(nets)) + w * (len(models) - 1) / 2, nets, rotation=30, ha="right")
    ax.set(ylabel="MAPE", title="per-network error on the test split")
    ax.legend(fontsize=8)
    files.append(_save(fig, out / "per_network_mape.png"))
    return files


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return str(path)
