"""Networks: a specification record and a registry of built-in architectures (the "zoo").

A `NetworkSpec` names an architecture and carries a factory `batch_size -> (module.eval(), example_inputs)`.
Factories of the zoo are `LazyFactory` objects: they import their family module (and so torch) only when called,
so importing `perfcast.networks` does not load torch. Every factory builds with a fixed seed (random init, no
weights are downloaded) without disturbing the caller's global RNG state.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..errors import PerfcastError, UnknownNameError

if TYPE_CHECKING:  # pragma: no cover
    import torch

FAMILIES = ("cnn", "mobile", "transformer", "mlp")
SEED = 0


@dataclass(frozen=True)
class NetworkSpec:
    """A network architecture and how to build it."""

    name: str
    family: str  # "cnn" | "mobile" | "transformer" | "mlp"
    description: str
    paper: str  # citation
    published_params: int  # parameter count from the paper / reference implementation
    factory: Callable[[int], "tuple[torch.nn.Module, tuple[torch.Tensor, ...]]"]  # batch_size -> (module, inputs)

    def build(self, batch_size: int = 1) -> "tuple[torch.nn.Module, tuple[torch.Tensor, ...]]":
        """(module in eval mode, example inputs) for `batch_size`."""
        check_batch_size(batch_size)
        return self.factory(batch_size)


def check_batch_size(batch_size: Any) -> int:
    """Return `batch_size` if it is an integer >= 1, else raise a one-line PerfcastError."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise PerfcastError(f"bad batch size {batch_size!r}: it must be an integer >= 1 (e.g. --batch-size 1)")
    return batch_size


@dataclass(frozen=True)
class LazyFactory:
    """Factory that imports `perfcast.networks.<module>` when called and calls `<attr>(batch_size)` there.

    The build runs with torch's RNG seeded to `SEED` inside `torch.random.fork_rng()`, so the same batch size gives
    the same weights and inputs every time and the caller's RNG state is left alone. A plain dataclass, so specs
    pickle (e.g. to worker processes).
    """

    module: str
    attr: str

    def __call__(self, batch_size: int):
        check_batch_size(batch_size)
        import torch

        fn = getattr(importlib.import_module(f"{__package__}.{self.module}"), self.attr)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            module, inputs = fn(batch_size)
        return module.eval(), tuple(inputs)


_NETWORKS: dict[str, NetworkSpec] = {}


def register(spec: NetworkSpec) -> NetworkSpec:
    """Add (or replace) a network in the registry."""
    if spec.family not in FAMILIES:
        raise PerfcastError(f"bad family {spec.family!r} for network {spec.name!r}; use one of {', '.join(FAMILIES)}")
    _NETWORKS[spec.name] = spec
    return spec


def list_networks() -> list[str]:
    return sorted(_NETWORKS)


def get_network(name: str) -> NetworkSpec:
    """The registered network `name`; an unknown name raises UnknownNameError listing the known ones."""
    if name not in _NETWORKS:
        raise UnknownNameError("network", name, list_networks(),
                               hint="pass a zoo name, an .onnx file or file.py:factory")
    return _NETWORKS[name]


def count_params(module: "torch.nn.Module") -> int:
    """Number of parameters (shared/tied tensors counted once), as `sum(p.numel() for p in parameters())`."""
    return sum(p.numel() for p in module.parameters())
