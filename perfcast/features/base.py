"""Feature extractors: the interface, the program argument they accept, and a registry by name.

A `FeatureExtractor` turns one input into a numpy array and is a pure function of it (same input -> same array).
Program extractors (`input_kind == "program"`) take a tensor program: a TVM IRModule holding one PrimFunc, the
PrimFunc itself, or its TVMScript text (a record's `tir_script`); device extractors (`input_kind == "device"`) take
a `DeviceSpec` or a device id. `feature_names()` names the last axis of the output; `ndim` says whether the output
is one vector (1) or one row per program element (2: leaves, stores).

`get_extractor(name, **params)` builds a registered extractor; an unknown name raises UnknownNameError (a
ValueError) listing the known ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import PerfcastError, UnknownNameError


class FeatureExtractor:
    """Base class: subclasses set `name`, `version`, `input_kind`, `ndim` and implement the two methods."""

    name: str = ""
    version: int = 1  # bump when the output of the same input changes
    input_kind: str = "program"  # "program" | "device"
    ndim: int = 1  # 1: one vector per input; 2: (rows, len(feature_names())) per input

    def params(self) -> dict[str, Any]:
        """The constructor parameters (JSON-able) that, with name and version, identify the output."""
        return {}

    def feature_names(self) -> list[str]:
        """Names of the entries of the output's last axis; `len(feature_names())` is the documented length."""
        raise NotImplementedError

    @property
    def length(self) -> int:
        return len(self.feature_names())

    def extract(self, program) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})  # {self.name} v{self.version}"


_REGISTRY: dict[str, type[FeatureExtractor]] = {}


def register(cls: type[FeatureExtractor]) -> type[FeatureExtractor]:
    """Class decorator: register an extractor under `cls.name`."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"feature extractor {cls.name!r} is already registered ({_REGISTRY[cls.name].__name__})")
    _REGISTRY[cls.name] = cls
    return cls


def list_extractors() -> list[str]:
    return sorted(_REGISTRY)


def get_extractor(name: str, **params) -> FeatureExtractor:
    """The registered extractor `name` built with `params`."""
    if name not in _REGISTRY:
        raise UnknownNameError("feature extractor", name, list_extractors())
    cls = _REGISTRY[name]
    try:
        return cls(**params)
    except TypeError as e:
        raise PerfcastError(f"bad parameters for feature extractor {name!r}: {e}") from e


def as_primfunc(program):
    """The PrimFunc of a program given as an IRModule with one function, a PrimFunc, or TVMScript text."""
    if isinstance(program, str):
        import tvm.script

        program = tvm.script.from_source(program)
    if hasattr(program, "functions_items"):  # IRModule
        from .._tvm.util import main_func

        program = main_func(program)
    if not (hasattr(program, "body") and hasattr(program, "params")):
        raise TypeError(f"expected a TVM IRModule, PrimFunc or TVMScript text, got {type(program).__name__}")
    return program
