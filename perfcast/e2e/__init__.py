"""Whole networks: predict (and measure) a network's latency from its kernels."""

from .predict import measure_network, predict_network

__all__ = ["predict_network", "measure_network"]
