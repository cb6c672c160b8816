"""Named train/val/test splits of a table of measurement records (a pandas DataFrame, one row per record).

The DataFrame needs the columns the split uses: `workload_key` (the task), `networks` (the networks the task occurs
in: a tuple, list or array of names), `device_id`; `record_id` identifies rows but no split reads it. A split returns
a `Split`: three sorted int64 arrays of positional indices into the DataFrame (`df.iloc[split.train]`), pairwise
disjoint and together covering every row, plus its name and the effective parameters (seed included).

- `random`: records shuffled and cut 8:1:1.
- `by_network`: records of tasks that occur in a held-out network are test; the other tasks go 9:1 to train/val.
- `by_task`: whole tasks held out, 10 % for test and 10 % for val.
- `by_device`: records of one device are test; the other devices' records go 9:1 to train/val.

`get_split(name, **params)` binds the parameters and returns `fn(df, seed=0) -> Split`; an unknown name raises
UnknownNameError listing the known ones. Every split is seeded with `numpy.random.default_rng(seed)` and is a pure
function of (df, seed, params). A held-out part's size is `round(frac * n)` (halves round up); an empty train, val or
test part is a PerfcastError naming the part and the fix, never a silent fallback.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from ..errors import PerfcastError, UnknownNameError

PARTS = ("train", "val", "test")
DEFAULT_TEST_NETWORKS = ("resnet50", "mobilenet_v2", "bert_tiny")


@dataclass(frozen=True, eq=False)
class Split:
    """Positional indices (sorted, read-only int64 arrays) of the train, val and test records of a DataFrame."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for part in PARTS:
            arr = np.sort(np.asarray(getattr(self, part), dtype=np.int64).reshape(-1))
            arr.flags.writeable = False
            object.__setattr__(self, part, arr)

    def sizes(self) -> dict[str, int]:
        """Number of records in each part."""
        return {part: int(len(getattr(self, part))) for part in PARTS}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes().items())
        return f"Split({self.name}({args}): {sizes})"


# ----------------------------------------------------------------------------------------------------------- helpers


def _n_held_out(frac: float, n: int) -> int:
    """round(frac * n), halves rounded up (not numpy's round-half-to-even)."""
    return int(np.floor(frac * n + 0.5))


def _check_fracs(name: str, **fracs: float) -> None:
    for key, frac in fracs.items():
        if not 0.0 < float(frac) < 1.0:
            raise PerfcastError(f"split {name}: {key}={frac!r} is not in (0, 1); pass a fraction such as 0.1")
    if sum(fracs.values()) >= 1.0:
        given = ", ".join(f"{k}={v}" for k, v in fracs.items())
        raise PerfcastError(f"split {name}: {given} leave nothing for train; make their sum less than 1")


def _require_columns(df: pd.DataFrame, name: str, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise PerfcastError(f"split {name}: the data has no column {', '.join(missing)} "
                            f"(columns: {', '.join(map(str, df.columns))}); pass a table of measurement records")


def _require_nonempty(name: str, part: str, idx: np.ndarray, why: str, fix: str) -> None:
    if len(idx) == 0:
        raise PerfcastError(f"split {name}: {part} is empty: {why}; {fix}")


def _as_names(value: str | Iterable[str]) -> list[str]:
    """A list of names from a list/tuple or one string of comma-separated names (as a CLI passes it)."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _shuffled(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return values[rng.permutation(len(values))]


def _hold_out_tasks(tasks: np.ndarray, rng: np.random.Generator, *fracs: float) -> list[np.ndarray]:
    """Shuffle the distinct tasks and cut one group per fraction off the front (the rest is not returned)."""
    order = _shuffled(np.unique(tasks), rng)
    groups, start = [], 0
    for frac in fracs:
        stop = start + _n_held_out(frac, len(order))
        groups.append(order[start:stop])
        start = stop
    return groups


def _finish(name: str, params: dict[str, Any], train, val, test) -> Split:
    return Split(train=train, val=val, test=test, name=name, params=params)


# ------------------------------------------------------------------------------------------------------------ splits


def random_split(df: pd.DataFrame, seed: int = 0, *, val_frac: float = 0.1, test_frac: float = 0.1) -> Split:
    """Records shuffled with `default_rng(seed)`; the first round(test_frac * n) are test, the next round(val_frac
    * n) val, the rest train (8:1:1 by default). Programs of one task land in all three parts."""
    name = "random"
    _check_fracs(name, val_frac=val_frac, test_frac=test_frac)
    n = len(df)
    order = _shuffled(np.arange(n), np.random.default_rng(seed))
    n_test, n_val = _n_held_out(test_frac, n), _n_held_out(val_frac, n)
    test, val, train = order[:n_test], order[n_test:n_test + n_val], order[n_test + n_val:]
    fix = "collect more records or raise the fractions"
    _require_nonempty(name, "test", test, f"test_frac={test_frac} of {n} records rounds to 0", fix)
    _require_nonempty(name, "val", val, f"val_frac={val_frac} of {n} records rounds to 0", fix)
    _require_nonempty(name, "train", train, f"{n} records are all held out", "collect more records")
    return _finish(name, {"seed": seed, "val_frac": val_frac, "test_frac": test_frac}, train, val, test)


def _task_networks(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (record position, network name) pair; records of tasks in no network are dropped."""
    pairs = pd.DataFrame({"pos": np.arange(len(df)), "task": df["workload_key"].to_numpy(),
                          "network": df["networks"].to_numpy()}).explode("network")
    return pairs[pairs["network"].notna()]


def held_out_task_mask(df: pd.DataFrame,
                       test_networks: str | Iterable[str] = DEFAULT_TEST_NETWORKS) -> np.ndarray:
    """(n,) bool: the records `by_network` puts in its test part (before `eval_min_protocol`): every record of every
    task that occurs in any of `test_networks`, also the records whose own `networks` name only training networks.
    A name that no record's `networks` contains is an error listing the known networks, as for the split."""
    _require_columns(df, "by_network", ["workload_key", "networks"])
    wanted = _as_names(test_networks)
    pairs = _task_networks(df)
    known = sorted(set(pairs["network"].astype(str)))
    unknown = [w for w in wanted if w not in known]
    if not wanted or unknown:
        raise PerfcastError(f"split by_network: no record of networks {unknown or wanted} in the data; known networks: "
                            f"{', '.join(known) or '(none)'}; pick --test-networks among them")
    return np.isin(df["workload_key"].to_numpy(), pairs.loc[pairs["network"].isin(wanted), "task"].unique())


def by_network(df: pd.DataFrame, seed: int = 0, *, test_networks: str | Iterable[str] = DEFAULT_TEST_NETWORKS,
               val_frac: float = 0.1, eval_min_protocol: int = 0) -> Split:
    """Held-out networks: test is every record of every task that occurs in any of `test_networks`.

    Strict: a task shared by a test network and a training network (a conv layer of both ResNet-18 and ResNet-50)
    is test too, so no program of a test task ever reaches train or val; the test networks are thus measured as
    wholly unseen. Train/val are the remaining records, split by task: round(val_frac * n_tasks) whole tasks,
    chosen with `default_rng(seed)`, go to val, so validation is also on unseen tasks. Records of tasks that occur
    in no network (imported ones) are never test. `test_networks` may be one comma-separated string; a name that
    no record's `networks` contains is an error listing the known networks. `eval_min_protocol` scores (val and
    test) only records timed under that measurement protocol or newer (`perfcast.data.schema.PROTOCOLS`); the
    older records of val and test tasks are left out, training keeps every protocol.
    """
    name = "by_network"
    _check_fracs(name, val_frac=val_frac)
    is_test = held_out_task_mask(df, test_networks)
    wanted = _as_names(test_networks)
    tasks = df["workload_key"].to_numpy()
    rest = tasks[~is_test]
    (val_tasks,) = _hold_out_tasks(rest, np.random.default_rng(seed), val_frac)
    is_val = ~is_test & np.isin(tasks, val_tasks)
    train = np.flatnonzero(~is_test & ~is_val)
    scored = np.ones(len(df), bool)
    if eval_min_protocol:
        _require_columns(df, name, ["protocol"])
        scored = df["protocol"].to_numpy() >= eval_min_protocol
        _require_nonempty(name, "test", np.flatnonzero(is_test & scored),
                          f"no record of the test networks is of protocol >= {eval_min_protocol}",
                          "measure them again with `perfcast collect` or lower eval_min_protocol")
    val, test = np.flatnonzero(is_val & scored), np.flatnonzero(is_test & scored)
    n_rest = len(np.unique(rest))
    _require_nonempty(name, "train", np.union1d(train, val),
                      f"every task occurs in one of the test networks {wanted}", "hold out fewer networks")
    _require_nonempty(name, "val", np.flatnonzero(is_val), f"val_frac={val_frac} of the {n_rest} non-test tasks "
                      "rounds to 0", "raise val_frac or collect more networks")
    _require_nonempty(name, "val", val, f"no record of the val tasks is of protocol >= {eval_min_protocol}",
                      "collect the training networks again with `perfcast collect` or lower eval_min_protocol")
    _require_nonempty(name, "train", train, f"val_frac={val_frac} takes all {n_rest} non-test tasks",
                      "lower val_frac or collect more networks")
    params = {"seed": seed, "test_networks": wanted, "val_frac": val_frac}
    if eval_min_protocol:
        params["eval_min_protocol"] = int(eval_min_protocol)
    return _finish(name, params, train, val, test)


def by_task(df: pd.DataFrame, seed: int = 0, *, val_frac: float = 0.1, test_frac: float = 0.1) -> Split:
    """Held-out tasks: the distinct tasks are shuffled with `default_rng(seed)`; the first round(test_frac *
    n_tasks) are test, the next round(val_frac * n_tasks) val, the rest train; every record follows its task."""
    name = "by_task"
    _require_columns(df, name, ["workload_key"])
    _check_fracs(name, val_frac=val_frac, test_frac=test_frac)
    tasks = df["workload_key"].to_numpy()
    test_tasks, val_tasks = _hold_out_tasks(tasks, np.random.default_rng(seed), test_frac, val_frac)
    is_test, is_val = np.isin(tasks, test_tasks), np.isin(tasks, val_tasks)
    train, val, test = np.flatnonzero(~is_test & ~is_val), np.flatnonzero(is_val), np.flatnonzero(is_test)
    n_tasks, fix = len(np.unique(tasks)), "collect more tasks or raise the fractions"
    _require_nonempty(name, "test", test, f"test_frac={test_frac} of {n_tasks} tasks rounds to 0", fix)
    _require_nonempty(name, "val", val, f"val_frac={val_frac} of {n_tasks} tasks rounds to 0", fix)
    _require_nonempty(name, "train", train, f"all {n_tasks} tasks are held out", "collect more tasks")
    return _finish(name, {"seed": seed, "val_frac": val_frac, "test_frac": test_frac}, train, val, test)


def by_device(df: pd.DataFrame, seed: int = 0, *, test_device: str | None = None, val_frac: float = 0.1) -> Split:
    """Held-out device: test is every record of `test_device` (required); the other devices' records are shuffled
    with `default_rng(seed)` and round(val_frac * n_other) of them are val, the rest train. The same task may
    appear in all three parts (on different devices)."""
    name = "by_device"
    col = "device_key" if "device_key" in df.columns else "device_id"  # records_frame's machine-aware key
    _require_columns(df, name, [col])
    _check_fracs(name, val_frac=val_frac)
    devices = df[col].astype(str).to_numpy()
    known = ", ".join(sorted(set(devices))) or "(none)"
    if test_device is None:
        raise PerfcastError(f"split by_device needs test_device; known devices: {known}; pass --test-device")
    is_test = devices == str(test_device)
    test = np.flatnonzero(is_test)
    _require_nonempty(name, "test", test, f"no record of device {test_device!r}",
                      f"known devices: {known}; pick --test-device among them")
    other = _shuffled(np.flatnonzero(~is_test), np.random.default_rng(seed))
    n_val = _n_held_out(val_frac, len(other))
    val, train = other[:n_val], other[n_val:]
    _require_nonempty(name, "train", other, f"{test_device!r} is the only device in the data",
                      "add records of another device")
    _require_nonempty(name, "val", val, f"val_frac={val_frac} of {len(other)} other-device records rounds to 0",
                      "raise val_frac or collect more records")
    _require_nonempty(name, "train", train, f"val_frac={val_frac} takes all {len(other)} other-device records",
                      "lower val_frac or collect more records")
    return _finish(name, {"seed": seed, "test_device": str(test_device), "val_frac": val_frac},
                   train, val, test)


# ---------------------------------------------------------------------------------------------------------- registry

SPLITS: dict[str, Callable[..., Split]] = {
    "random": random_split,
    "by_network": by_network,
    "by_task": by_task,
    "by_device": by_device,
}


def list_splits() -> list[str]:
    return sorted(SPLITS)


def get_split(name: str, **params) -> Callable[..., Split]:
    """The split `name` with `params` bound: call the result as `fn(df, seed=0)` (a `seed` in params is a default).

    An unknown name raises UnknownNameError; a parameter the split does not take raises PerfcastError.
    """
    if name not in SPLITS:
        raise UnknownNameError("split", name, list_splits())
    fn = SPLITS[name]
    try:
        inspect.signature(fn).bind(None, **params)
    except TypeError as e:
        takes = [p for p in inspect.signature(fn).parameters if p != "df"]
        raise PerfcastError(f"bad parameters for split {name!r}: {e}; it takes {', '.join(takes)}") from e
    return functools.partial(fn, **params)
