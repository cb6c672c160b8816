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


def latent_pca_plot(base, adapted, X_src, X_tgt, path, seed: int = 0, n: int = 1500) -> tuple[str, dict]:
    """CDMPP Fig. 11: the latent representations z of source-device and target-device programs, projected by PCA,
    under the base model (left) and the adapted model (right). Returns (PNG path, CMD between the two latent sets
    before and after), the number the picture shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch
    from sklearn.decomposition import PCA

    from ..models._torch import cmd

    rng = np.random.default_rng(seed)
    si = rng.permutation(len(X_src))[:n]
    ti = rng.permutation(len(X_tgt))[:n]
    Xs, Xt = X_src.take(si), X_tgt.take(ti)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    dist = {}
    for ax, (title, m) in zip(axes, (("before adaptation", base), ("after adaptation", adapted))):
        zs, zt = m.latent(Xs), m.latent(Xt)
        dist[title] = float(cmd(torch.from_numpy(zs), torch.from_numpy(zt)))
        p = PCA(n_components=2, random_state=seed).fit(np.concatenate([zs, zt]))
        a, b = p.transform(zs), p.transform(zt)
        ax.scatter(a[:, 0], a[:, 1], s=4, alpha=0.4, label=f"source devices ({len(a)})")
        ax.scatter(b[:, 0], b[:, 1], s=4, alpha=0.4, label=f"target device ({len(b)})")
        ax.set_title(f"{title}: CMD {dist[title]:.3f}")
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
        ax.legend(fontsize=8, markerscale=3)
    fig.suptitle("latent representations z (PCA), CDMPP Fig. 11")
    fig.tight_layout()
    return _save(fig, Path(path)), dist
