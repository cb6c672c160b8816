"""Training tables of the layerwise models: one row per measured layer, with its device, layer type, features
(`perfcast.layerwise.layer.FEATURES`) and metrics (`METRICS`; a metric a device cannot measure is NaN).

Two sources:
- a perfcast dataset (`table_from_dataset`): every ok record of a TVM default kernel whose TIR is a conv2d, dense or
  pooling layer (e.g. a collection of `layers:CONFIGS.json` suites), latency only: this machine has no power sensor
  (no RAPL counters are readable) and a CPU kernel's memory is exactly its argument and workspace bytes, known
  without measuring;
- the TVM_Profiling_Dataset sample (`table_from_csv`): A100, K80 (NVML power and memory) and a Xeon E5-2680
  (HDEEM power), the layerwise paper's own measurements.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PerfcastError
from .layer import FEATURES, Layer, features, layer_of_row, layer_of_tir

METRICS = ("latency_s", "power_w", "memory_bytes")
UNITS = {"latency_s": "s", "power_w": "W", "memory_bytes": "B", "energy_j": "J"}


def _frame(rows: list[dict]):
    import pandas as pd

    cols = ["device", "layer_type", "name", "workload_key", *FEATURES, *METRICS]
    return pd.DataFrame(rows, columns=cols)


def _row(device: str, name: str, layer: Layer, key: str = "", **metrics) -> dict:
    return {"device": device, "layer_type": layer.layer_type, "name": name, "workload_key": key,
            **dict(zip(FEATURES, features(layer))), **{m: metrics.get(m, float("nan")) for m in METRICS}}


def table_from_dataset(path, exclude_networks=None) -> "pd.DataFrame":
    """Layers among the default kernels of a perfcast dataset (median latency of each record).

    Tasks that occur in `exclude_networks` (default: the `by_network` split's test networks, resnet50,
    mobilenet_v2 and bert_tiny) are left out, so that those networks stay unseen, as for the cost model; so is
    every layer whose shapes equal a layer-suite entry taken from the same network of the Keras zoo
    (`resnet50:conv2_block1_2_conv`, ...; read from the suite's config file, which must still exist)."""
    import warnings

    import tvm

    from ..eval.splits import DEFAULT_TEST_NETWORKS
    from .suite import KERAS_NAMES, keras_model_of, load_suite

    from ..data.store import Dataset
    from ..devices.base import device_key_of_json

    ds = Dataset(path)
    rec = ds.read("records", ["workload_key", "task_name", "schedule_kind", "status", "latency_s",
                              "device_spec_json"]).to_pydict()
    tir = dict(zip(*ds.read("tasks", ["workload_key", "tir_script"]).to_pydict().values()))
    skip = set(DEFAULT_TEST_NETWORKS if exclude_networks is None else exclude_networks)
    nets = ds.read("networks", ["network", "source", "workload_key"]).to_pydict()
    for net, k in zip(nets["network"], nets["workload_key"]):
        if net in skip:
            tir.pop(k, None)
    keras = {KERAS_NAMES.get(n, n) for n in skip}
    banned: set = set()  # shapes of suite layers that come from an excluded network
    for src in sorted({s for n, s in zip(nets["network"], nets["source"]) if n.startswith("layers:")}) if keras \
            else []:
        try:
            banned |= {lc.layer() for lc in load_suite(src) if keras_model_of(lc.name) in keras}
        except PerfcastError:
            warnings.warn(f"layer suite {src} is gone: its layers from {sorted(keras)} cannot be left out")
    layers: dict[str, Layer | None] = {}
    keys: dict[str, str] = {}
    rows = []
    for k, name, kind, status, lat, spec in zip(rec["workload_key"], rec["task_name"], rec["schedule_kind"],
                                                 rec["status"], rec["latency_s"], rec["device_spec_json"]):
        if kind != "default" or status != "ok" or k not in tir:
            continue
        if k not in layers:
            layers[k] = layer_of_tir(tvm.script.from_source(tir[k])["main"])
        if layers[k] is None or layers[k] in banned:
            continue
        dev = keys.setdefault(spec, device_key_of_json(spec))
        rows.append(_row(dev, name, layers[k], k, latency_s=float(lat)))
    if not rows:
        raise PerfcastError(f"dataset {str(path)!r} has no measured default kernel of a conv2d, dense or pooling "
                            "layer; collect layers first: perfcast collect --network layers:CONFIGS.json@200 "
                            "--programs-per-task 1 --out DIR")
    return _frame(rows)


def table_from_csv(path) -> "pd.DataFrame":
    """The TVM_Profiling_Dataset sample: columns device, workload, batch_size, layer sizes, time_ms, power_w,
    memory_gb (a negative or missing memory is not measured)."""
    import math

    import pandas as pd

    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise PerfcastError(f"cannot read layer measurements {str(path)!r}: {e}") from None
    need = {"device", "workload", "batch_size", "time_ms"}
    if not need <= set(df.columns):
        raise PerfcastError(f"{str(path)!r} lacks the columns {sorted(need - set(df.columns))}; expected the "
                            "TVM_Profiling_Dataset sample layout (device, workload, batch_size, ..., time_ms, "
                            "power_w, memory_gb)")
    rows = []
    for r in df.to_dict("records"):
        mem = r.get("memory_gb")
        mem = float(mem) * 2**30 if mem is not None and not math.isnan(float(mem)) and float(mem) >= 0 else math.nan
        power = float(r["power_w"]) if "power_w" in r and r["power_w"] == r["power_w"] else math.nan
        rows.append(_row(str(r["device"]), str(r.get("layer_name", "")), layer_of_row(r),
                         latency_s=float(r["time_ms"]) / 1e3, power_w=power, memory_bytes=mem))
    return _frame(rows)


def layers_of_rows(rows) -> list[Layer]:
    """The `Layer` of each row of a training table (its type and the 15 integer features after it)."""
    n = len(FEATURES) - 5  # the integer fields of Layer; the last 5 features are derived from them
    return [Layer(lt, *(int(v) for v in r)) for lt, r in zip(rows.layer_type, rows[list(FEATURES[:n])].to_numpy())]


def load_table(source, exclude_networks=None) -> "pd.DataFrame":
    """A dataset directory, a TVM_Profiling_Dataset-style CSV, or a table Parquet file written by `save_table`."""
    p = Path(source)
    if not p.exists():
        raise PerfcastError(f"layer data {str(p)!r} not found; give a perfcast dataset directory (perfcast collect "
                            "--network layers:...) or a layer measurements CSV")
    if p.suffix == ".csv":
        return table_from_csv(p)
    if p.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(p)
    return table_from_dataset(p, exclude_networks)
