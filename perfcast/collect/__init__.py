"""Collecting ground truth: networks -> tasks -> programs -> isolated measurements -> dataset records."""

from .base import Runner
from .collector import CollectConfig, CollectResult, collect, record_id
from .measure import MeasureConfig

__all__ = ["Runner", "CollectConfig", "CollectResult", "collect", "record_id", "MeasureConfig"]
