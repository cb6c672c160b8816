"""How fast is this machine today, compared with when its records were measured? Re-time a few stored programs.

A cloud host's speed drifts: on the development machine (a KVM guest), `python bench/timing_repeatability.py --n
150` re-timed 150 stored programs 8 % slower (median ratio 1.084) than their labels, taken on earlier days, while
two passes minutes apart agreed within 3 % (median |log ratio| 0.029); by collection hour the ratios ranged from
1.00 to 1.13. A model trained on those labels predicts the host as it was, so whole networks measured today came
out 8-23 % slower than predicted.

`calibrate()` measures that drift the way the collector measures anything (isolated workers, the same timing
protocol): it rebuilds `programs` stored ok records of the device from their TVMScript, times them now, and
returns the median of now / stored, the speed ratio. `perfcast predict --calibrate` multiplies every kernel's
prediction by it. Only records timed by perfcast itself are references (imported meta-schedule timings were taken
another way), those of the current protocol when the device has any, else those of an older one (the labels the
model learned for that device; `Calibration.reference_protocol` says which, and callers warn that the ratio is
rougher); records of the bundled model's held-out networks never are (so calibrated figures on them stay figures on
unseen networks). Older-protocol references are TVM's default kernels where the device has any: on 2,332 znver4
programs timed under both protocols, the default kernels' protocol-1 labels agreed with protocol 2 (median ratio
1.008) where the random schedules' did not (1.222; the protocol-1 worker timed parallel programs on a shared core);
on the znver3 host (all protocol 1), 2026-11-29, 40 default references gave 1.185 and 1.137 (two seeds), 40 random
ones 1.245 and 1.230; drawn among labels <= REFERENCE_MAX_S, minutes later, 1.190 / 1.100 against 1.140 / 1.179
(`python bench/calibrate_kinds.py`): there the kinds agree within their seeds' spread. On the rocketlake host
(2026-12-06) they did not: `bench/main_job_error.py` found the mixed references 1.3-13.8 % above four networks'
own default kernels' ratio and default-kernel references nearer for all four in two sittings, so
`schedule_reference_kinds` calibrates a prediction of TVM's default kernels against default kernels.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import PerfcastError

REFERENCE_KINDS = ("default", "random")  # timed by perfcast itself
# references are drawn among programs whose label is at most this long, where there are enough of them: a timing
# costs rounds x repeats x latency, so one 0.3 s kernel costs ~3 s, and `predict --calibrate` is the README's main job
REFERENCE_MAX_S = 0.02
# how references are drawn: "short" uniformly among labels <= REFERENCE_MAX_S (when there are enough of them);
# "time" with probability proportional to the label among labels <= TIME_DRAW_MAX_S, so the references are the kind of
# program a network spends its time in (one 0.15 s reference costs ~2 s to time)
DRAWS = ("short", "time")
TIME_DRAW_MAX_S = 0.15


class NoReferences(PerfcastError):
    """The dataset has no record of the device to calibrate against (e.g. a CPU perfcast never measured)."""


@dataclass(frozen=True)
class Calibration:
    device_key: str
    speed_ratio: float  # median over the references of latency now / stored latency (> 1: slower today)
    ratio_p25: float
    ratio_p75: float
    programs: int  # references timed ok
    failed: int
    measure_s: float  # wall time of the calibration
    measured_at: str  # UTC, ISO 8601
    data: str  # the dataset the references came from
    reference_protocol: int  # the oldest measurement protocol among the references (`data.schema.PROTOCOLS`)
    reference_kinds: tuple[str, ...] = REFERENCE_KINDS  # the schedule kinds of the references
    draw: str = "short"  # how the references were drawn (`DRAWS`)

    @property
    def note(self) -> str:
        """'' for references of the current protocol, else a one-line caution."""
        from ..data.schema import MEASURE_PROTOCOL

        if self.reference_protocol >= MEASURE_PROTOCOL:
            return ""
        kinds = " and ".join({"default": "default kernels", "random": "random schedules"}[k]
                             for k in self.reference_kinds)
        return (f"{self.device_key} has no record timed under protocol {MEASURE_PROTOCOL}, so it was calibrated "
                f"against protocol-{self.reference_protocol} labels ({kinds}; repeatable to ~12 %, not ~3 %): "
                "a rough ratio")

    def to_dict(self) -> dict:
        return {**asdict(self), "note": self.note}


def reference_records(ds, device_key: str, programs: int, seed: int = 0,
                      exclude_networks: tuple[str, ...] = (), kinds: tuple[str, ...] | None = None,
                      draw: str = "short"):
    """`programs` ok records of `device_key` in `ds` timed by perfcast, under the current protocol when the device
    has such records (else under older ones, default kernels only where there are any), drawn with `seed` from
    tasks outside `exclude_networks` (among those with labels <= REFERENCE_MAX_S when there are `programs` of
    them), with their TVMScript (a DataFrame). `kinds` (schedule kinds among
    `REFERENCE_KINDS`) overrides the choice of kinds; `draw` (among `DRAWS`) how they are drawn."""
    from ..data.frame import records_frame
    from ..data.schema import MEASURE_PROTOCOL

    if programs < 1:
        raise PerfcastError(f"--programs {programs}: calibrating needs at least one reference program (try 40)")
    df = records_frame(ds)
    if kinds is not None and (not kinds or set(kinds) - set(REFERENCE_KINDS)):
        raise PerfcastError(f"reference kinds {tuple(kinds)!r}: choose among {REFERENCE_KINDS}")
    if draw not in DRAWS:
        raise PerfcastError(f"reference draw {draw!r}: choose among {DRAWS}")
    df = df[(df["device_key"] == device_key) & df["schedule_kind"].isin(kinds or REFERENCE_KINDS)]
    if exclude_networks:
        df = df[~df["networks"].map(lambda ns: bool(set(ns) & set(exclude_networks)))]
    if not df.empty and (df["protocol"] >= MEASURE_PROTOCOL).any():
        df = df[df["protocol"] >= MEASURE_PROTOCOL]
    elif kinds is None and not df.empty and (df["schedule_kind"] == "default").any():  # older: default kernels'
        df = df[df["schedule_kind"] == "default"]
    if df.empty:
        from .. import paths

        fix = (f"adapt the model to it, which measures it (`perfcast adapt --device {device_key.split('@')[0]} "
               "--out DIR`), and predict with --model DIR --calibrate"
               if Path(ds.root).resolve() == paths.bundled_dataset_dir().resolve() else
               f"measure some first: perfcast collect mlp --device local --programs-per-task 8 --out {ds.root}")
        raise NoReferences(f"no record of {device_key!r} timed by perfcast in {str(ds.root)!r} to calibrate "
                           f"against; {fix}")
    if draw == "time":
        capped = df[df["latency_s"] <= TIME_DRAW_MAX_S]
        df = capped if not capped.empty else df
        if len(df) > programs:  # (pandas' weighted draw refuses labels this skewed, numpy's does not)
            import numpy as np

            w = df["latency_s"].to_numpy(float)
            df = df.iloc[np.random.default_rng(seed).choice(len(df), programs, replace=False, p=w / w.sum())]
    else:
        short = df[df["latency_s"] <= REFERENCE_MAX_S]
        df = short if len(short) >= programs else df
        df = df.sample(min(programs, len(df)), random_state=seed)
    scripts = ds.read("records", ["record_id", "tir_script"]).to_pandas().drop_duplicates("record_id")
    return df.merge(scripts, on="record_id", how="left")


def time_stored(run, scripts: list[str], target_json: str, order=None, cache_s=None):
    """Latency (s) of each stored program (TVMScript) timed now by the open runner `run` (an `IsolatedRunner`), in
    `order` (default: as given), `run.slots` at a time; NaN where the program did not run ok. `cache_s`: as in
    `time_modules`."""
    import tvm
    import tvm.script

    from .._tvm.util import load_x86_intrinsics

    load_x86_intrinsics()
    return time_modules(run, [tvm.ir.save_json(tvm.script.from_source(s)) for s in scripts], target_json, order,
                        cache_s)


def time_modules(run, mod_jsons: list[str], target_json: str, order=None, cache_s=None):
    """Latency (s) of each program (an IRModule saved with `tvm.ir.save_json`) timed now by the open runner `run`,
    in `order` (default: as given), `run.slots` at a time; NaN where the program did not run ok. `cache_s`: an
    array as long as `mod_jsons` that gets the host gate's cache-part sentinel reading of each program's kept round
    (NaN without the gate), which tells whether the host was in its slow cache state then (`collect.sentinel`)."""
    import numpy as np

    order = list(range(len(mod_jsons))) if order is None else list(order)
    now = np.full(len(mod_jsons), np.nan)
    for i in range(0, len(order), run.slots):
        b = order[i:i + run.slots]
        for j, r in zip(b, run.run_batch([mod_jsons[j] for j in b], target_json)):
            if r["status"] == "ok":
                now[j] = r["latency_s"]
            if cache_s is not None:
                sentinel, rounds = r.get("round_sentinel_s", ()), r.get("round_latencies_s", ())
                ok = r["status"] == "ok" and len(sentinel) == len(rounds) > 0
                cache_s[j] = sentinel[rounds.index(r["latency_s"])][1] if ok else np.nan
    return now


def calibrate(device: str = "local", data: str | None = None, programs: int = 40, seed: int = 0,
              exclude_networks: tuple[str, ...] | None = None, kinds: tuple[str, ...] | None = None,
              draw: str = "short") -> Calibration:
    """Time `programs` stored programs of `device` now; see the module docstring. `exclude_networks` defaults to
    the bundled model's held-out networks; `kinds` and `draw` as in `reference_records`."""
    import numpy as np

    from .. import paths
    from ..data.store import Dataset
    from ..devices import get_device, require_local
    from ..devices.base import device_key
    from ..eval.splits import DEFAULT_TEST_NETWORKS
    from .collector import build_workers
    from .load import own_cpus
    from .measure import MeasureConfig
    from .worker import IsolatedRunner

    spec = get_device(device)
    require_local(spec, "calibrate")
    key = device_key(spec)
    root = data or str(paths.bundled_dataset_dir())
    excl = DEFAULT_TEST_NETWORKS if exclude_networks is None else tuple(exclude_networks)
    refs = reference_records(Dataset(root), key, programs, seed, excl, kinds, draw)
    t0 = time.time()
    with IsolatedRunner(spec.threads, MeasureConfig(), workers=build_workers(own_cpus())) as run:
        now = time_stored(run, list(refs["tir_script"]), spec.target_json)
    ok = np.isfinite(now)
    if not ok.any():
        raise PerfcastError(f"none of the {len(now)} reference programs of {key!r} ran; is the machine the one "
                            f"that measured them? (`perfcast devices`)")
    ratio = now[ok] / refs["latency_s"].to_numpy(float)[ok]
    return Calibration(device_key=key, speed_ratio=float(np.median(ratio)),
                       ratio_p25=float(np.percentile(ratio, 25)), ratio_p75=float(np.percentile(ratio, 75)),
                       programs=int(ok.sum()), failed=int((~ok).sum()), measure_s=time.time() - t0,
                       measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), data=root,
                       reference_protocol=int(refs["protocol"].min()),
                       reference_kinds=tuple(k for k in REFERENCE_KINDS if (refs["schedule_kind"] == k).any()),
                       draw=draw)


def reference_dataset(device: str = "local", model=None) -> str | None:
    """The dataset `--calibrate` takes `device`'s references from for `model`: a model adapted to that device names
    the measurements it learned the device from (`perfcast adapt --measure-out`, default MODEL/measurements), the
    labels its predictions of the device reproduce; else None, the bundled dataset (the bundled model's labels)."""
    if model is None:
        return None
    from ..devices import get_device
    from ..devices.base import device_key
    from ..models.base import read_model_meta

    path, meta = read_model_meta(model)
    adapted = (meta.get("info") or {}).get("adapted") or {}
    if adapted.get("device_key") != device_key(get_device(device)):
        return None
    for mine in (adapted.get("measurements"), path / "measurements"):
        if mine and (Path(mine) / "perfcast_dataset.json").exists():
            return str(mine)
    return None


def schedule_reference_kinds(schedules: str) -> tuple[str, ...] | None:
    """The reference kinds that calibrate a network predicted with `schedules` (`perfcast predict --schedules`):
    TVM's default kernels for "default", else None (the mixed draw). A host's speed drifts by kind of program: on
    the rocketlake host (2026-12-06, `bench/main_job_error.py`) the mixed references (95 % random schedules) read
    1.18-1.23 while resnet18's, mobilenet_v2's, resnet50's and bert_tiny's own default kernels ran 1.07-1.17x their
    labels, and default-kernel references 1.15-1.19."""
    return ("default",) if schedules == "default" else None


def speed_ratio_or_note(device: str = "local", model=None, kinds: tuple[str, ...] | None = None,
                        data=None) -> tuple[float | None, str | None]:
    """For commands with `--calibrate`: (`calibrate(device)`'s speed ratio, its note or None), against the
    references of `data` (default: the dataset `reference_dataset(device, model)` names), of `kinds`
    (`schedule_reference_kinds`) where that dataset has any, else of every kind; a device the dataset has no record
    of gives (None, a note that its predictions stay uncalibrated)."""
    data = reference_dataset(device, model) if data is None else data
    try:
        try:
            cal = calibrate(device, data=data, kinds=kinds)
        except NoReferences:
            if kinds is None:
                raise
            cal = calibrate(device, data=data)  # (e.g. an adapted model's measurements without default kernels)
    except NoReferences as e:  # a CPU without records: predict as without --calibrate, and say so
        return None, f"not calibrated: {e}"
    return cal.speed_ratio, cal.note or None


def check_ratio(ratio: float) -> float:
    if not (math.isfinite(ratio) and ratio > 0):
        raise PerfcastError(f"speed ratio {ratio!r} is not a positive number; use the speed_ratio `perfcast "
                            f"calibrate` prints (1.0 = as fast as when the data was measured)")
    return float(ratio)
