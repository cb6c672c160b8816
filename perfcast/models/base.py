"""Cost models: the interface, a registry by name, and saving/loading a trained model directory.

A cost model follows scikit-learn: `__init__` stores parameters only, `fit(X, y, X_val=None, y_val=None)` learns
(state in attributes ending in `_`) and returns self, `predict(X)` gives latency in seconds. X is a
`perfcast.features.cache.ProgramFeatures`, y latency in seconds.

A saved model is a directory: `model.json` (name, params, feature tag, schema version, training summary) plus the
model's own weight files. `load_model(path)` checks the versions and says what to do on a mismatch.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__, paths
from ..errors import PerfcastError, UnknownNameError

MODEL_FILE = "model.json"
MODEL_FORMAT = 1  # bump when the layout of a model directory changes


class CostModel:
    """Base class: set `name`, implement `_fit`, `_predict`, `_save_state`, `_load_state`."""

    name: str = ""

    def __init__(self, **params: Any):
        self.params = dict(params)

    def get_params(self) -> dict:
        return dict(self.params)

    def fit(self, X, y, X_val=None, y_val=None, X_target=None, sample_weight=None, groups=None) -> "CostModel":
        """`X_target`: unlabeled programs of the domain to predict (other networks, another device); models that
        support it (cdmpp, mlp with `cmd_alpha` > 0) pull their latent distribution towards it (CDMPP Eq. 6-7).
        `sample_weight`: (n,) non-negative weight of each training program in the loss (scikit-learn's meaning),
        rescaled to mean 1; None weighs all alike. `groups`: (n,) labels of comparable programs (one task on one
        device); models with a within-group ranking term (`rank_lambda` > 0 of the neural models) use them, the
        others ignore them."""
        y = _check_targets(y, len(X)) / self.scale(X)
        if X_val is not None:
            y_val = _check_targets(y_val, len(X_val)) / self.scale(X_val)
        if X_target is not None and len(X_target):
            self._X_target = X_target
        if sample_weight is not None:
            self._sample_weight = _check_weights(sample_weight, len(X))
        if groups is not None:
            groups = np.asarray(groups)
            if len(groups) != len(X):
                raise PerfcastError(f"{len(X)} programs but {len(groups)} group labels; pass one label per program")
            self._groups = groups
        try:
            self._fit(X, y, X_val, y_val)
        finally:
            self.__dict__.pop("_X_target", None)
            self.__dict__.pop("_sample_weight", None)
            self.__dict__.pop("_groups", None)
        self.n_train_ = len(X)
        return self

    def predict(self, X) -> np.ndarray:
        if not hasattr(self, "n_train_"):
            raise PerfcastError(f"the {self.name} model is not trained; call fit() or load a trained model")
        if len(X) == 0:
            return np.zeros(0)
        X, factor = self.proxied(X)
        return np.asarray(self._predict(X), dtype=np.float64) * self.scale(X) * factor

    def proxied(self, X):
        """(X with every device the model was calibrated for replaced by its proxy device, (n,) factor of each
        row's prediction): the device proxies `perfcast adapt --method proxy` fitted (`device_proxy_`: a list of
        {"device": vector, "as": vector, "scale": s}); (X, 1) for a model without them."""
        proxies = getattr(self, "device_proxy_", None) or []
        factor = np.ones(len(X))
        if not proxies:
            return X, factor
        dev = np.array(X.device, dtype=np.float32, copy=True)  # (n, N_DEVICE)
        for p in proxies:
            rows = same_device(X.device, p["device"])
            dev[rows] = np.float32(p["as"])
            factor[rows] = p["scale"]
        return dataclasses.replace(X, device=dev), factor

    @property
    def needs_asm(self) -> bool:
        """Whether the model reads the programs' assembly features (`ProgramFeatures.asm`), which callers must then
        load (`load_data(asm=True)`, `features_of_programs(asm=True)`)."""
        return False

    def _view(self, X):
        """X as this model reads it: today's features, or their leading columns for a model loaded from an earlier
        compatible feature tag (`features.cache.PRIOR_TAGS`)."""
        dims = getattr(self, "input_dims_", None)
        return X if dims is None else X.prefix(*dims)

    def scale(self, X) -> np.ndarray:
        """(n,) divisor of the latencies the model regresses (`target_scale` parameter; 1 without it): `_fit` sees
        latency / scale and `_predict` returns it, `fit` and `predict` take and give seconds."""
        from .targets import target_scale

        return target_scale(self.params.get("target_scale", "none"), X)

    def save(self, path) -> Path:
        from ..features.cache import FEATURE_TAG

        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        tag = getattr(self, "feature_tag_", FEATURE_TAG)  # a model loaded from a prior tag keeps reading it
        meta = {"format": MODEL_FORMAT, "name": self.name, "params": self.saved_params(), "feature_tag": tag,
                "perfcast_version": __version__, "n_train": self.n_train_, "info": getattr(self, "info_", {})}
        if getattr(self, "device_proxy_", None):
            meta["device_proxy"] = self.device_proxy_
        meta["state"] = self._save_state(p)
        (p / MODEL_FILE).write_text(json.dumps(meta, indent=1))
        return p

    def saved_params(self) -> dict:
        """The parameters `save` writes, from which `load_model` constructs the model again: its own."""
        return self.params

    # subclass hooks
    def _fit(self, X, y, X_val, y_val) -> None:
        raise NotImplementedError

    def _predict(self, X) -> np.ndarray:
        raise NotImplementedError

    def _save_state(self, path: Path) -> dict:
        raise NotImplementedError

    def _load_state(self, path: Path, state: dict) -> None:
        raise NotImplementedError


def same_device(A, v) -> np.ndarray:
    """(n,) whether each row of A (n, N_DEVICE) is the device vector v: equal up to 1e-4 relative once both are
    canonical (`devices.base.canonical_vector`: a vector saved before the clock was rounded still matches)."""
    from ..devices.base import canonical_vector

    return np.isclose(canonical_vector(np.asarray(A, np.float32)), canonical_vector(np.float32(v)), rtol=1e-4,
                      atol=1e-6).all(axis=1)


def _check_targets(y, n: int) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(y) != n:
        raise PerfcastError(f"{n} programs but {len(y)} latencies; pass one latency per program")
    if len(y) == 0:
        raise PerfcastError("no training programs: the split left the training set empty")
    bad = ~np.isfinite(y) | (y <= 0)
    if bad.any():
        raise PerfcastError(f"latency {float(y[bad][0])!r} at index {int(np.argmax(bad))} is not a positive number of "
                            "seconds; train on records with status ok")
    return y


def _check_weights(w, n: int) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    if len(w) != n:
        raise PerfcastError(f"{n} programs but {len(w)} sample weights; pass one weight per program")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        raise PerfcastError(f"sample weight {float(w[bad][0])!r} at index {int(np.argmax(bad))} is not a finite "
                            "non-negative number")
    if w.sum() <= 0:
        raise PerfcastError("every sample weight is 0; give at least one training program a positive weight")
    return w * (n / w.sum())


_REGISTRY: dict[str, type[CostModel]] = {}


def register(cls: type[CostModel]) -> type[CostModel]:
    _REGISTRY[cls.name] = cls
    return cls


def list_models() -> list[str]:
    return sorted(_REGISTRY)


def get_model(name: str, **params) -> CostModel:
    if name not in _REGISTRY:
        raise UnknownNameError("model", name, list_models())
    return _REGISTRY[name](**params)


def read_model_meta(path=None) -> tuple[Path, dict]:
    """(directory, the parsed model.json) of a saved model (default: the bundled model), after checking its format
    and feature versions; reads no learned state."""
    from ..features.cache import FEATURE_TAG, PRIOR_TAGS

    p = Path(path) if path is not None else paths.bundled_model_dir()
    f = p / MODEL_FILE
    if not f.exists():
        if path is None:
            raise PerfcastError("the bundled model is missing from this installation; train one with "
                                "`perfcast train --out DIR` and pass --model DIR")
        raise PerfcastError(f"{str(p)!r} is not a perfcast model (no {MODEL_FILE}); train one with "
                            "`perfcast train --out DIR`")
    meta = json.loads(f.read_text())
    if meta.get("format") != MODEL_FORMAT:
        raise PerfcastError(f"model {str(p)!r} has format {meta.get('format')}, this perfcast reads {MODEL_FORMAT}; "
                            "retrain it with `perfcast train`")
    tag = meta.get("feature_tag")
    if tag != FEATURE_TAG and tag not in PRIOR_TAGS:
        raise PerfcastError(f"model {str(p)!r} was trained on features {meta.get('feature_tag')}, this perfcast "
                            f"computes {FEATURE_TAG}; retrain it with `perfcast train` (perfcast "
                            f"{meta.get('perfcast_version')} reads it as it is)")
    return p, meta


def load_model(path=None) -> CostModel:
    """A trained model from its directory (default: the bundled model)."""
    from ..features.cache import FEATURE_TAG, PRIOR_TAGS

    p, meta = read_model_meta(path)
    tag = meta.get("feature_tag")
    model = get_model(meta["name"], **meta["params"])
    model._load_state(p, meta["state"])
    model.n_train_ = meta["n_train"]
    model.info_ = meta.get("info", {})
    if meta.get("device_proxy"):
        model.device_proxy_ = meta["device_proxy"]
    if tag != FEATURE_TAG:
        model.feature_tag_, model.input_dims_ = tag, PRIOR_TAGS[tag]
    return model


def update_model_info(path, key: str, value) -> None:
    """Set `info[key] = value` in the saved model at `path` (a fitted figure that belongs to the model, e.g. its
    selection sigma), leaving its learned state untouched; written to a temporary file, then renamed."""
    p, meta = read_model_meta(path)
    meta.setdefault("info", {})[key] = value
    tmp = p / f"{MODEL_FILE}.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, p / MODEL_FILE)
