"""Adapting a trained cost model to a new device with a few measured tasks: the two interfaces and their registries.

- A **sampler** picks which tasks to measure on the target: `select(task_of_row, Z, k, seed) -> [task keys]`, where
  `Z` (n, d) are the model's latent representations of n programs and `task_of_row` (n,) their task keys.
- A **method** adapts a trained neural cost model to labelled target programs:
  `adapt(model, X_tgt, y_tgt, X_src, y_src) -> new model` (the input model is not modified; `X_src/y_src` are a
  replay sample of the source devices' records, used by the methods that need them).

Samplers: `kmeans` (CDMPP Algorithm 1), `random` (the control). Methods: `finetune`, `cmd` (CDMPP Eq. 7),
`mtl` (Pruner's momentum transfer learning), `lottery` (Moses), `proxy` (the source device the target behaves most
like, times a factor; optionally followed by one of the others). See the module of each.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnknownNameError


class Sampler:
    name: str = ""

    def select(self, task_of_row: np.ndarray, Z: np.ndarray, k: int, seed: int = 0) -> list[str]:
        raise NotImplementedError


class Method:
    name: str = ""

    def __init__(self, **params):
        self.params = dict(params)

    def check_model(self, model) -> None:
        """Raise a PerfcastError when this method cannot adapt `model` (checked before anything is measured)."""

    def adapt(self, model, X_tgt, y_tgt, X_src=None, y_src=None):
        raise NotImplementedError


_SAMPLERS: dict[str, type[Sampler]] = {}
_METHODS: dict[str, type[Method]] = {}


def register_sampler(cls: type[Sampler]) -> type[Sampler]:
    _SAMPLERS[cls.name] = cls
    return cls


def register_method(cls: type[Method]) -> type[Method]:
    _METHODS[cls.name] = cls
    return cls


def list_samplers() -> list[str]:
    return sorted(_SAMPLERS)


def list_methods() -> list[str]:
    return sorted(_METHODS)


def get_sampler(name: str) -> Sampler:
    if name not in _SAMPLERS:
        raise UnknownNameError("sampler", name, list_samplers())
    return _SAMPLERS[name]()


def get_method(name: str, **params) -> Method:
    if name not in _METHODS:
        raise UnknownNameError("adaptation method", name, list_methods())
    return _METHODS[name](**params)

