"""Target transforms: latency (s) <-> the standardized value a model regresses (CDMPP §5.2, Table 3).

Every transform maps latency in microseconds through a fitted monotone function and then standardizes
(z = (t - mean) / std over the training targets). `boxcox` (the default) and `yeo-johnson` fit their lambda with
scikit-learn's PowerTransformer; `quantile` maps through the empirical quantiles (uniform output); `log` and `none`
fit nothing. `inverse_torch` is the differentiable inverse a relative-error loss (MAPE) needs.

`target_scale` is the per-program divisor applied before any of that (a model's `target_scale` parameter):
`none` (1) or `work`, the program's static work 1 + flops + bytes read + bytes written (the analytic features), so
that the model regresses seconds per unit of work, an efficiency that transfers between tasks of different sizes
more easily than the latency itself. A relative error (MAPE) is the same on either scale.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UnknownNameError

TRANSFORMS = ("boxcox", "yeo-johnson", "quantile", "log", "none")
SCALES = ("none", "work")
US = 1e6  # the transforms act on microseconds


def target_scale(kind: str, X) -> np.ndarray:
    """(n,) divisor of each program's latency for `target_scale=kind` (see the module docstring); X is a
    `ProgramFeatures` (its `analytic` columns are log2(1 + x) of `ANALYTIC_FEATURES`, flops first)."""
    if kind not in SCALES:
        raise UnknownNameError("target scale", kind, list(SCALES))
    if kind == "none":
        return np.ones(len(X))
    a = np.exp2(np.asarray(X.analytic, np.float64)[:, :3]) - 1  # flops, bytes_read, bytes_written
    return 1.0 + a.sum(axis=1)


class TargetTransform:
    def __init__(self, kind: str = "boxcox"):
        if kind not in TRANSFORMS:
            raise UnknownNameError("target transform", kind, list(TRANSFORMS))
        self.kind = kind

    # ---- the monotone map on microseconds ----------------------------------------------------------------------
    def _forward(self, u: np.ndarray) -> np.ndarray:
        from scipy import special

        if self.kind == "boxcox":
            return special.boxcox(u, self.lambda_)
        if self.kind == "yeo-johnson":
            lam = self.lambda_
            return np.log1p(u) if lam == 0 else ((u + 1) ** lam - 1) / lam
        if self.kind == "quantile":
            return np.interp(u, self.quantiles_, self.references_)
        if self.kind == "log":
            return np.log(u)
        return u

    def fit(self, latency_s) -> "TargetTransform":
        from sklearn.preprocessing import PowerTransformer

        u = np.asarray(latency_s, dtype=np.float64).reshape(-1) * US
        self.lambda_ = 0.0
        if self.kind in ("boxcox", "yeo-johnson"):
            pt = PowerTransformer(method="box-cox" if self.kind == "boxcox" else "yeo-johnson", standardize=False)
            self.lambda_ = float(pt.fit(u.reshape(-1, 1)).lambdas_[0])
        if self.kind == "quantile":
            from sklearn.preprocessing import QuantileTransformer

            qt = QuantileTransformer(n_quantiles=min(1000, len(u)), output_distribution="uniform").fit(u.reshape(-1, 1))
            self.quantiles_ = qt.quantiles_[:, 0].astype(np.float64)
            self.references_ = qt.references_.astype(np.float64)
        t = self._forward(u)
        self.mean_, self.std_ = float(t.mean()), float(t.std() or 1.0)
        # predictions are kept within 100x of the training latencies: a program (or device) far outside the
        # training data otherwise extrapolates to absurd times through the inverse power transform
        self.range_s_ = (float(u.min()) / US / 100, float(u.max()) / US * 100)
        return self

    def transform(self, latency_s) -> np.ndarray:
        u = np.asarray(latency_s, dtype=np.float64) * US
        return (self._forward(u) - self.mean_) / self.std_

    def inverse(self, z) -> np.ndarray:
        import torch

        with torch.no_grad():
            y = self.inverse_torch(torch.as_tensor(np.asarray(z, dtype=np.float64))).numpy()
        r = getattr(self, "range_s_", None)
        return np.clip(y, r[0], r[1]) if r is not None else y

    def inverse_torch(self, z):
        """Latency in seconds from standardized values, differentiable (a torch tensor in, one out)."""
        import torch

        t = z * self.std_ + self.mean_
        lam = self.lambda_
        # log(u) is capped at the largest latency `inverse` returns (100x the training maximum): beyond it exp()
        # overflows float32, and inf in the forward pass is NaN in the backward pass (a diverging fine-tuning step)
        r = getattr(self, "range_s_", None)
        cap = math.log(r[1] * US) if r is not None else 80.0
        exp = lambda v: torch.exp(torch.clamp(v, max=cap))  # noqa: E731
        if self.kind == "boxcox":
            u = exp(t) if lam == 0 else exp(torch.log1p(torch.clamp(lam * t, min=-1 + 1e-6)) / lam)
        elif self.kind == "yeo-johnson":
            u = torch.expm1(torch.clamp(t, max=cap)) if lam == 0 \
                else exp(torch.log1p(torch.clamp(lam * t, min=-1 + 1e-6)) / lam) - 1
        elif self.kind == "quantile":
            q = torch.as_tensor(self.quantiles_, dtype=t.dtype)
            r = torch.as_tensor(self.references_, dtype=t.dtype)
            tc = torch.clamp(t, float(r[0]), float(r[-1]))
            i = torch.clamp(torch.searchsorted(r, tc.detach()), 1, len(r) - 1)
            w = (tc - r[i - 1]) / torch.clamp(r[i] - r[i - 1], min=1e-12)
            u = q[i - 1] + w * (q[i] - q[i - 1])
        elif self.kind == "log":
            u = exp(t)
        else:
            u = t
        return torch.clamp(u, min=1e-6) / US  # at least 1 ps: a relative error needs a positive prediction

    # ---- persistence -------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {"kind": self.kind, "lambda": self.lambda_, "mean": self.mean_, "std": self.std_}
        if getattr(self, "range_s_", None) is not None:
            d["range_s"] = list(self.range_s_)
        if self.kind == "quantile":
            d.update(quantiles=self.quantiles_.tolist(), references=self.references_.tolist())
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TargetTransform":
        t = cls(d["kind"])
        t.lambda_, t.mean_, t.std_ = d["lambda"], d["mean"], d["std"]
        if "range_s" in d:
            t.range_s_ = tuple(d["range_s"])
        if t.kind == "quantile":
            t.quantiles_, t.references_ = np.asarray(d["quantiles"]), np.asarray(d["references"])
        return t
