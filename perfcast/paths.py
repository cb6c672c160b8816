"""Every path rule of perfcast in one place.

A perfcast dataset is a directory::

    DIR/
      perfcast_dataset.json            marker: schema version, created, what produced it
      records/part-*.parquet           measured programs (one row per program and device)
      tasks/part-*.parquet             task table: workload key -> TIR of the unscheduled task
      networks/part-*.parquet          network -> task mapping with weights (occurrences)
      journal/*.jsonl                  records measured but not yet flushed to Parquet (crash safety)
      collection/*.json                the settings and machine of each collection run
      summary/latency_hist.png         written by `perfcast data summary`
      features/<tag>/part-*.parquet    model inputs of each records partition (a cache; see perfcast.features.cache)
      .compact/, .compact.json         while `perfcast data compact` runs: its new partitions and its manifest

Collecting, importing and merging only ever add partitions, so git keeps every version of a growing dataset;
`perfcast data compact` is the one command that rewrites them (sorted by task, a few large ones).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER = "perfcast_dataset.json"
RECORDS = "records"
TASKS = "tasks"
NETWORKS = "networks"
JOURNAL = "journal"
COLLECTION = "collection"
SUMMARY = "summary"


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def bundled_dataset_dir() -> Path:
    """The dataset shipped with the package (collected on the development machine)."""
    return package_dir() / "data" / "bundled"


def cache_dir() -> Path:
    """Per-user cache (probe results, worker scratch); override with PERFCAST_CACHE."""
    root = os.environ.get("PERFCAST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "perfcast"
    )
    p = Path(root)
    p.mkdir(parents=True, exist_ok=True)
    return p


def host_gate_file() -> Path:
    """Per-user file of the host gate's sentinel readings (`collect.sentinel.HostGate`): each part's recent readings
    per host, target and thread count, kept across runs."""
    return cache_dir() / "host_gate.json"


def program_asm_dir(tag: str) -> Path:
    """Per-user cache of single programs' assembly features (`features.asm_cache.programs_asm`), by feature tag."""
    p = cache_dir() / tag
    p.mkdir(parents=True, exist_ok=True)
    return p


def marker(root: Path) -> Path:
    return Path(root) / MARKER


def records_dir(root: Path) -> Path:
    return Path(root) / RECORDS


def tasks_dir(root: Path) -> Path:
    return Path(root) / TASKS


def networks_dir(root: Path) -> Path:
    return Path(root) / NETWORKS


def journal_dir(root: Path) -> Path:
    return Path(root) / JOURNAL


def collection_dir(root: Path) -> Path:
    return Path(root) / COLLECTION


def summary_dir(root: Path) -> Path:
    return Path(root) / SUMMARY


FEATURES = "features"


def features_dir(root: Path) -> Path:
    return Path(root) / FEATURES


COMPACT = ".compact"


def compact_staging_dir(root: Path) -> Path:
    """Where `perfcast data compact` writes the new partitions (mirroring DIR's layout) before they replace the old."""
    return Path(root) / COMPACT


def compact_manifest(root: Path) -> Path:
    """A compaction's commit point: which staged files move in and which old ones go (see `perfcast.data.compact`)."""
    return Path(root) / (COMPACT + ".json")


def bundled_layerwise_dir() -> Path:
    """The layerwise models shipped with the package (trained on the layers collected on the development machine)."""
    return package_dir() / "layerwise" / "bundled"


def bundled_model_dir() -> Path:
    """The model shipped with the package (trained on the bundled dataset)."""
    return package_dir() / "models" / "bundled"


def bundled_search_model_dir() -> Path:
    """The model `perfcast tune --cost-model perfcast` steers searches with by default: a tree model without
    assembly features (the bundled model builds every program with LLVM, too slow for thousands of candidates)."""
    return package_dir() / "models" / "bundled_search"


def bundled_context_file() -> Path:
    """The in-network context fits shipped with the package, per device key (`perfcast.e2e.context`)."""
    return package_dir() / "e2e" / "bundled" / "context.json"
