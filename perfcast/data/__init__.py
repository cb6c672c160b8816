"""The perfcast dataset: record schemas and the partitioned Parquet store."""

from .schema import SCHEMA_VERSION, MeasureRecord, NetworkTaskRecord, TaskRecord
from .store import Dataset

__all__ = ["SCHEMA_VERSION", "MeasureRecord", "NetworkTaskRecord", "TaskRecord", "Dataset"]
