"""Whole networks: predict (and measure) a network's latency from its kernels, in their in-network context."""

from .context import ContextFit, fit_context, load_context, measure_context
from .predict import lower_network, measure_network, predict_network

__all__ = ["predict_network", "measure_network", "lower_network", "ContextFit", "fit_context", "load_context",
           "measure_context"]
