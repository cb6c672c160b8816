"""Cross-device adaptation: samplers (which tasks to measure) and methods (how to adapt); see `base`."""

from . import cmd, finetune, lottery, momentum, proxy, sampling  # noqa: F401  (register the implementations)
from .base import Method, Sampler, get_method, get_sampler, list_methods, list_samplers

__all__ = ["Method", "Sampler", "get_method", "get_sampler", "list_methods", "list_samplers"]
