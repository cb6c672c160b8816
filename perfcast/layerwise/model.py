"""Layerwise multi-metric models (`ai-driven-performance-modeling-inference.txt` §5-§6): one regressor per
(device, layer type, metric), each chosen among the paper's families by cross-validated MAPE, and a network as the
sum of its layers (energy E = sum of T_n * P_n).

`LayerwiseModel.fit(table)` takes a training table (`perfcast.layerwise.table`); every group with at least
`min_rows` measured rows gets a model. Saving writes `layerwise.json` (parameters and the selection with every
family's CV error) and `table.parquet` (the training rows); loading refits the selected family of each group on
those rows with the same seed, so no estimator is ever pickled.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import PerfcastError
from ..eval.metrics import mape
from .base import list_families, make_regressor
from .layer import FEATURES, Layer, features
from .table import METRICS, layers_of_rows

MODEL_FILE = "layerwise.json"
TABLE_FILE = "table.parquet"
FORMAT = 1


class LayerwiseModel:
    """`families`: the candidates (default: all six); `folds`: K of the K-fold selection; `min_rows`: smallest group
    that gets a model; `max_cv_mape`: a group whose best family's CV MAPE is above this gets no model either (its
    layers are left to the kernel cost model: e.g. 57 network convolutions of one target are too few to learn)."""

    def __init__(self, families: tuple[str, ...] | None = None, folds: int = 5, min_rows: int = 100,
                 max_cv_mape: float = 0.6, seed: int = 0):
        self.families = families
        self.folds = folds
        self.min_rows = min_rows
        self.max_cv_mape = max_cv_mape
        self.seed = seed

    # --- training ---------------------------------------------------------------------------------------------
    def _candidates(self) -> list[str]:
        fams = list(self.families) if self.families else list_families()
        for f in fams:
            make_regressor(f)  # an unknown name fails here, before any fitting
        return fams

    def cv_errors(self, X: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """MAPE of each family under K-fold cross-validation (shuffled, seeded)."""
        from sklearn.model_selection import KFold

        out = {}
        kf = KFold(n_splits=min(self.folds, len(y)), shuffle=True, random_state=self.seed)
        for fam in self._candidates():
            pred = np.empty_like(y)
            for tr, te in kf.split(X):
                pred[te] = make_regressor(fam, self.seed).fit(X[tr], y[tr]).predict(X[te])
            out[fam] = mape(y, pred)
        return out

    def fit(self, table) -> "LayerwiseModel":
        if self.folds < 2:
            raise PerfcastError(f"folds={self.folds} cannot select a model; use folds >= 2")
        self._candidates()
        self.table_ = table.reset_index(drop=True)
        self.selection_: dict[tuple[str, str, str], dict] = {}
        self.estimators_: dict = {}
        for (dev, lt), g in table.groupby(["device", "layer_type"], sort=True):
            for metric in METRICS:
                ok = g[metric].notna() & (g[metric] > 0)
                if ok.sum() < self.min_rows:
                    continue
                X, y = g.loc[ok, list(FEATURES)].to_numpy(float), g.loc[ok, metric].to_numpy(float)
                errs = self.cv_errors(X, y)
                best = min(errs, key=errs.get)
                used = errs[best] <= self.max_cv_mape
                self.selection_[(dev, lt, metric)] = {"family": best, "cv_mape": errs, "rows": int(ok.sum()),
                                                      "used": bool(used)}
                if used:
                    self.estimators_[(dev, lt, metric)] = make_regressor(best, self.seed).fit(X, y)
        if not self.estimators_:
            raise PerfcastError(f"no (device, layer type, metric) group has {self.min_rows} measured layers and a "
                                f"CV MAPE under {self.max_cv_mape:.0%}; collect more layers or lower min_rows")
        return self

    # --- prediction -------------------------------------------------------------------------------------------
    def _check(self) -> None:
        if not hasattr(self, "selection_"):
            raise PerfcastError("the layerwise model is not trained; call fit() or load one")

    def devices(self) -> list[str]:
        self._check()
        return sorted({d for d, _, _ in self.estimators_})

    def check_device(self, device: str) -> None:
        """Raise a one-line error naming the commands that add `device` when the model has no data of it."""
        if device not in self.devices():
            raise PerfcastError(f"the layerwise model has no data of device {device!r} (it has "
                                f"{', '.join(self.devices())}); collect layers on it with `perfcast collect "
                                "--network layers:CONFIGS.json@200 --programs-per-task 1 --device D --out DIR` "
                                "and train with `perfcast layerwise train --data DIR`")

    def covers(self, device: str, layer_type: str, metric: str = "latency_s") -> bool:
        self._check()
        return (device, layer_type, metric) in self.estimators_

    def predict(self, device: str, layers: list[Layer], metric: str = "latency_s") -> np.ndarray:
        """One value per layer in the metric's unit; NaN for a layer type without a model on that device.
        metric "energy_j" is latency x power per layer."""
        self._check()
        if metric == "energy_j":
            return self.predict(device, layers, "latency_s") * self.predict(device, layers, "power_w")
        if metric not in METRICS:
            raise PerfcastError(f"unknown metric {metric!r}; known: {', '.join(METRICS + ('energy_j',))}")
        self.check_device(device)
        out = np.full(len(layers), np.nan)
        by_type: dict[str, list[int]] = {}
        for i, layer in enumerate(layers):
            by_type.setdefault(layer.layer_type, []).append(i)
        for lt, idx in by_type.items():
            est = self.estimators_.get((device, lt, metric))
            if est is not None:
                out[idx] = est.predict(np.array([features(layers[i]) for i in idx], float))
        return out

    # --- persistence ------------------------------------------------------------------------------------------
    def save(self, path) -> Path:
        self._check()
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        self.table_.to_parquet(p / TABLE_FILE, index=False)
        meta = {"format": FORMAT, "perfcast_version": __version__,
                "params": {"families": list(self.families) if self.families else None, "folds": self.folds,
                           "min_rows": self.min_rows, "max_cv_mape": self.max_cv_mape, "seed": self.seed},
                "selection": [{"device": d, "layer_type": lt, "metric": m, **v}
                              for (d, lt, m), v in sorted(self.selection_.items())]}
        (p / MODEL_FILE).write_text(json.dumps(meta, indent=1))
        return p

    @classmethod
    def load(cls, path) -> "LayerwiseModel":
        import pandas as pd

        p = Path(path)
        if not (p / MODEL_FILE).exists():
            raise PerfcastError(f"{str(p)!r} is not a layerwise model (no {MODEL_FILE}); train one with "
                                "`perfcast layerwise train --data DIR --out MODEL`")
        meta = json.loads((p / MODEL_FILE).read_text())
        if meta.get("format") != FORMAT:
            raise PerfcastError(f"layerwise model {str(p)!r} has format {meta.get('format')}, this perfcast reads "
                                f"{FORMAT}; train it again with `perfcast layerwise train`")
        prm = meta["params"]
        m = cls(tuple(prm["families"]) if prm["families"] else None, prm["folds"], prm["min_rows"],
                prm["max_cv_mape"], prm["seed"])
        m.table_ = pd.read_parquet(p / TABLE_FILE)
        m.selection_, m.estimators_ = {}, {}
        for s in meta["selection"]:
            key = (s["device"], s["layer_type"], s["metric"])
            g = m.table_[(m.table_.device == key[0]) & (m.table_.layer_type == key[1])]
            g = g[g[key[2]].notna() & (g[key[2]] > 0)]
            m.selection_[key] = {k: s[k] for k in ("family", "cv_mape", "rows", "used")}
            if not s["used"]:
                continue
            m.estimators_[key] = make_regressor(s["family"], m.seed).fit(g[list(FEATURES)].to_numpy(float),
                                                                          g[key[2]].to_numpy(float))
        return m

    def summary(self) -> list[dict]:
        """One entry per group: device, layer type, metric, rows, chosen family and every family's CV MAPE."""
        self._check()
        return [{"device": d, "layer_type": lt, "metric": m, **v} for (d, lt, m), v in sorted(self.selection_.items())]


def holdout_eval(table, model_params: dict | None = None, test_frac: float = 0.2, seed: int = 0) -> list[dict]:
    """The honest figure: per (device, layer type) a seeded random `test_frac` of the layers is held out, the
    families are selected and fitted on the rest, and MAPE is measured on the held-out layers, per metric, plus
    energy (predicted T x predicted P against measured T x P) where both are measured."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(table), bool)
    for _, idx in table.groupby(["device", "layer_type"]).indices.items():
        n = max(1, int(round(test_frac * len(idx)))) if len(idx) >= 5 else 0
        test[rng.choice(idx, n, replace=False)] = True
    model = LayerwiseModel(**(model_params or {}), seed=seed).fit(table[~test])
    out = []
    held = table[test]
    for (dev, lt), g in held.groupby(["device", "layer_type"], sort=True):
        layers = layers_of_rows(g)
        for metric in (*METRICS, "energy_j"):
            y = g["latency_s"] * g["power_w"] if metric == "energy_j" else g[metric]
            ok = (y.notna() & (y > 0)).to_numpy()
            if not ok.any() or (metric != "energy_j" and not model.covers(dev, lt, metric)) or \
                    (metric == "energy_j" and not (model.covers(dev, lt, "latency_s")
                                                   and model.covers(dev, lt, "power_w"))):
                continue
            p = model.predict(dev, [x for x, k in zip(layers, ok) if k], metric)
            fam = model.selection_[(dev, lt, metric)]["family"] if metric != "energy_j" else "T x P"
            out.append({"device": dev, "layer_type": lt, "metric": metric, "family": fam, "test_rows": int(ok.sum()),
                        "train_rows": int(((table.device == dev) & (table.layer_type == lt) & ~test).sum()),
                        "mape": mape(y.to_numpy()[ok], p),
                        "median_ape": float(np.median(np.abs(p - y.to_numpy()[ok]) / y.to_numpy()[ok]))})
    if not out:
        raise PerfcastError("no group has enough layers for a held-out evaluation (need >= 5 per device and type)")
    return out


def network_energy_note(device: str, model: LayerwiseModel) -> str | None:
    """Why a device has no energy figure."""
    if any(model.covers(device, lt, "power_w") for _, lt, _ in model.selection_):
        return None
    return (f"no power measurements of {device} (this machine exposes no RAPL/power sensor), so no energy figure; "
            "the energy path (E = sum T x P) is shown on the TVM_Profiling_Dataset devices")

