"""Training objectives (CDMPP §5.2, Eq. 3 and Table 4) on standardized targets z and latencies y (s).

`mse+mape` = MSE(z_hat, z) + lam * MAPE(inverse(z_hat), y): the scale-insensitive hybrid. The paper sets lam so the
two terms have the same order of magnitude (1e-3 on its raw scale); our MSE is on standardized targets (order 1),
so the default lam is 1. `mspe` is the mean squared percentage error, `log_mse` the TPU paper's log-space MSE.
"""

from __future__ import annotations

from ..errors import UnknownNameError

LOSSES = ("mse+mape", "mse", "mape", "mspe", "log_mse")


def make_loss(name: str, transform, lam: float = 1.0):
    """loss(z_hat, z, y, w=None) -> scalar tensor; `transform` is the fitted TargetTransform, `w` optional
    per-sample weights (mean 1 over the training set): each term is a weighted mean."""
    import torch

    if name not in LOSSES:
        raise UnknownNameError("loss", name, list(LOSSES))

    def rel(z_hat, y):
        return (transform.inverse_torch(z_hat) - y) / y

    def loss(z_hat, z, y, w=None):
        mean = torch.mean if w is None else (lambda t: torch.sum(w * t) / torch.sum(w))
        if name == "mse":
            return mean((z_hat - z) ** 2)
        if name == "mape":
            return mean(torch.abs(rel(z_hat, y)))
        if name == "mspe":
            return mean(rel(z_hat, y) ** 2)
        if name == "log_mse":
            return mean((torch.log(transform.inverse_torch(z_hat)) - torch.log(y)) ** 2)
        return mean((z_hat - z) ** 2) + lam * mean(torch.abs(rel(z_hat, y)))

    return loss
