"""TVM meta-schedule's own per-store features (`ms.feature_extractor.PerStoreFeature`, Ansor's feature set).

Before the first TuneContext is built the x86 tensor intrinsics are registered with `load_x86_intrinsics()`:
`TuneContext.__init__` runs `import tvm.s_tir.tensor_intrin`, which takes 20-40 s on this machine otherwise.
"""

from __future__ import annotations

import json

import numpy as np

from .base import FeatureExtractor, as_primfunc, register

N_PER_STORE = 164
N_WORKLOAD = 8  # extra columns with extract_workload=True (172 in all)
REDUCTIONS = ("sum", "mean")


def default_target() -> dict:
    """This CPU's LLVM name with 2 cores (fixed, so the default does not change with the process's CPU count)."""
    import tvm

    return {"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(), "num-cores": 2}


@register
class PerStoreExtractor(FeatureExtractor):
    """PerStoreFeature of a program -> float64 array (n_stores, 164), or (164,) with `aggregate=True`.

    `target`: the TVM target as a dict or its JSON (default: this CPU, `{"kind": "llvm", "mcpu": <system cpu>,
    "num-cores": 2}`); the features of vectorised loops depend on it. `extract_workload=True` appends
    TVM's 8 workload columns (172). `aggregate=True` reduces the rows with `reduce` ("sum" or "mean") into one
    vector, the flattening a single-vector model (e.g. an XGBoost baseline) needs; no stores give zeros.
    """

    name = "per_store"
    version = 1

    def __init__(self, target: dict | str | None = None, aggregate: bool = False, reduce: str = "sum",
                 extract_workload: bool = False):
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
        if isinstance(target, str):
            target = json.loads(target)
        self.target = dict(target) if target is not None else None
        self.aggregate = bool(aggregate)
        self.reduce = reduce
        self.extract_workload = bool(extract_workload)
        self._tvm_target = None

    @property
    def ndim(self) -> int:  # type: ignore[override]
        return 1 if self.aggregate else 2

    def params(self) -> dict:
        return {"target": self.target_dict(), "aggregate": self.aggregate, "reduce": self.reduce,
                "extract_workload": self.extract_workload}

    def target_dict(self) -> dict:
        if self.target is None:
            self.target = default_target()
        return self.target

    def feature_names(self) -> list[str]:
        n = N_PER_STORE + (N_WORKLOAD if self.extract_workload else 0)
        prefix = f"{self.reduce}_" if self.aggregate else ""
        return [f"{prefix}per_store_{i:03d}" for i in range(n)]

    def per_store(self, program) -> np.ndarray:
        import tvm

        from .._tvm.util import load_x86_intrinsics

        load_x86_intrinsics()  # before TuneContext: see the module docstring
        from tvm.s_tir import Schedule
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        func = as_primfunc(program)
        if self._tvm_target is None:
            self._tvm_target = tvm.target.Target(self.target_dict())
        mod = tvm.IRModule({"main": func})
        ctx = ms.TuneContext(mod=mod, target=self._tvm_target)
        fe = ms.feature_extractor.PerStoreFeature(extract_workload=self.extract_workload)
        cand = ms.MeasureCandidate(Schedule(mod), ArgInfo.from_prim_func(func))
        out = fe.extract_from(ctx, [cand])[0].numpy()
        return np.asarray(out, dtype=np.float64).reshape(-1, self.length)

    def extract(self, program) -> np.ndarray:
        rows = self.per_store(program)
        if not self.aggregate:
            return rows
        if rows.shape[0] == 0:
            return np.zeros(self.length)
        return rows.sum(axis=0) if self.reduce == "sum" else rows.mean(axis=0)
