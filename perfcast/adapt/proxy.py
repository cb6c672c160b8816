"""`proxy`: predict a new device as the source device it behaves most like, times a fitted factor.

A model trained on a handful of devices has seen a handful of device-feature vectors; a new device's vector lies
between or beyond them, where the device branch extrapolates (cdmpp trained on eight devices scored znver4 at 65-79 %
MAPE before any adaptation, `bench/cross_device.py`). This method does not move a single weight at first: for each
source device (the distinct device vectors of the source records) and for the target's own vector, it predicts the
target's measured programs with that vector and fits the one factor s minimising their MAPE (the weighted median of
measured / predicted, weights predicted / measured); the candidate with the lowest MAPE becomes the target's proxy.
The adapted model then replaces the target's device vector by the proxy's and multiplies by s
(`CostModel.device_proxy_`, saved in model.json), for every command. The program's own features (its compact AST,
its assembly built for the target) stay the target's.

`then=METHOD` (`finetune`, `cmd`, `mtl`, `lottery`) adapts the weights afterwards by that method on the target's
programs seen through the proxy (device vector replaced, latency divided by s); the other parameters go to it.
"""

from __future__ import annotations

import copy

import numpy as np

from ..errors import PerfcastError
from ..models.base import same_device
from .base import Method, get_method, register_method


def mape_scale(pred: np.ndarray, y: np.ndarray) -> float:
    """The factor s minimising mean |s * pred / y - 1|: the median of y / pred weighted by pred / y."""
    r = np.asarray(y, np.float64) / np.asarray(pred, np.float64)
    order = np.argsort(r)
    w = 1.0 / r[order]
    cum = np.cumsum(w)
    return float(r[order][np.searchsorted(cum, 0.5 * cum[-1])])


@register_method
class DeviceProxy(Method):
    name = "proxy"

    def _inner(self):
        p = dict(self.params)
        then = p.pop("then", "none")
        if then == "none":
            p.pop("seed", None)
            if p:
                raise PerfcastError(f"unknown parameter(s) {sorted(p)} for adaptation method 'proxy' without "
                                    "then=METHOD; pass then=cmd (or finetune, mtl, lottery) to adapt the weights too")
            return None
        if then == self.name:
            raise PerfcastError("proxy then=proxy adapts nothing more; pass then=cmd, finetune, mtl or lottery")
        return get_method(then, **p)

    def check_model(self, model) -> None:
        inner = self._inner()
        if inner is not None:
            inner.check_model(model)

    def adapt(self, model, X_tgt, y_tgt, X_src=None, y_src=None):
        inner = self._inner()
        y = np.asarray(y_tgt, np.float64)
        if len(y) == 0:
            raise PerfcastError("no measured target programs to adapt to; measure at least one task on the target")
        if X_src is None or len(X_src) == 0:
            raise PerfcastError("adaptation method 'proxy' picks among the source devices, and no source records "
                                "were given; adapt with a dataset that holds other devices' records")
        target = distinct_devices(X_tgt.device)
        if len(target) != 1:
            raise PerfcastError(f"the target programs are on {len(target)} different devices; adapt to one at a time")
        target = target[0]
        base = copy.copy(model)  # the target's earlier proxy, if any, is replaced
        base.device_proxy_ = [p for p in (getattr(model, "device_proxy_", None) or [])
                              if not same_device(np.float32(p["device"])[None], target)[0]]
        cands = distinct_devices(np.vstack([target[None], np.asarray(X_src.device, np.float32)]))  # (c, N_DEVICE)
        scores = []
        for c in cands:
            pred = base.predict(X_tgt.on_device(c))
            s = mape_scale(pred, y)
            scores.append((float(np.mean(np.abs(s * pred / y - 1.0))), s))
        best = int(np.argmin([m for m, _ in scores]))
        proxy, s = cands[best], scores[best][1]
        out = base if inner is None else inner.adapt(base, X_tgt.on_device(proxy), y / s, X_src, y_src)
        out = copy.copy(out)
        out.device_proxy_ = base.device_proxy_ + [{"device": target.tolist(), "as": proxy.tolist(), "scale": s}]
        out.adapt_info_ = {"method": self.name, "then": getattr(inner, "name", "none"), "scale": s,
                           "proxy_is_target": best == 0, "n_target": int(len(y)),
                           "candidates": [{"device": c.tolist(), "mape": m, "scale": sc}
                                          for c, (m, sc) in zip(cands, scores)],
                           "inner": getattr(out, "adapt_info_", None) if inner is not None else None}
        return out


def distinct_devices(A) -> np.ndarray:
    """(d, N_DEVICE) the distinct devices among the rows of A (`same_device`), in order of first appearance."""
    A = np.asarray(A, np.float32)
    uniq, first = np.unique(A, axis=0, return_index=True)
    out: list[np.ndarray] = []
    for v in uniq[np.argsort(first)]:
        if not out or not same_device(np.array(out), v).any():
            out.append(v)
    return np.array(out, np.float32).reshape(-1, A.shape[1])


def measured_proxy_mape(y_target, y_source, task_of_row, measured_tasks) -> float:
    """The error of the best a `proxy` could do through one source device, with a perfect model: each program's
    *measured* latency on the source times the one factor (`mape_scale`) fitted on the programs of
    `measured_tasks`; the MAPE on the programs of the other tasks. The rows are programs measured on both devices
    (`y_target[i]`, `y_source[i]`: the same program). `bench/device_oracle.py` reports it per device and K."""
    yt, ys = np.asarray(y_target, np.float64), np.asarray(y_source, np.float64)
    tasks = np.asarray(task_of_row)
    fit = np.isin(tasks, list(measured_tasks))
    if not fit.any():
        raise PerfcastError(f"none of the measured tasks {sorted(measured_tasks)[:3]} has a program measured on both "
                            "devices; pick tasks from task_of_row")
    if fit.all():
        raise PerfcastError(f"all {len(np.unique(tasks))} tasks were measured, none is left to score; "
                            "measure fewer tasks than the devices share")
    from ..eval.metrics import mape

    return mape(yt[~fit], mape_scale(ys[fit], yt[fit]) * ys[~fit])
