"""`lottery`: Moses' lottery-ticket transfer (Zhao et al., "Moses", §3.3).

At the start of every epoch the criterion xi = |w * dL/dw| is computed on the target's measurements; in each weight
tensor the `ratio` share of entries with the largest xi are *transferable* and are updated by gradient descent; the
others (domain-variant) are not trained and decay towards zero: w <- w (1 - lr * decay) per step. Moses finds the
ratio uncritical between 0.3 and 0.7 (§4.2.3) and uses 0.5.
"""

from __future__ import annotations

from .base import register_method
from .finetune import FineTune


@register_method
class LotteryTransfer(FineTune):
    name = "lottery"
    EXTRA = dict(ratio=0.5, decay=1.0)

    def _epoch_start(self, m, net, train, z_all, y_all, loss_fn) -> None:
        import torch

        net.train()
        net.zero_grad()
        for L, seq, vec, idx in train.batches(4096):
            t = torch.from_numpy(idx)
            loss_fn(net(seq, vec), z_all[t], y_all[t]).backward()
        self.masks_ = {}
        for name, w in net.named_parameters():
            if w.grad is None:  # not used by these programs (a leaf-count head): leave it alone
                self.masks_[name] = torch.zeros_like(w, dtype=torch.bool)
                continue
            xi = (w.detach() * w.grad).abs()
            k = max(1, int(round(self.p_["ratio"] * xi.numel())))
            thr = torch.topk(xi.flatten(), k).values[-1]
            self.masks_[name] = (xi >= thr) & (xi.max() > 0)
        net.zero_grad()

    def _before_step(self, m, net) -> None:
        self.frozen_ = {name: w.detach().clone() for name, w in net.named_parameters()}

    def _after_step(self, m, net) -> None:
        import torch

        shrink = 1 - self.p_["lr"] * self.p_["decay"]
        with torch.no_grad():
            for name, w in net.named_parameters():
                if w.grad is not None:  # (no gradient in this batch: the optimizer did not touch it)
                    # domain-variant entries: no gradient step, only decay
                    w.copy_(torch.where(self.masks_[name], w, self.frozen_[name] * shrink))
