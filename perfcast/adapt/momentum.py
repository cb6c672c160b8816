"""`mtl`: Pruner's momentum transfer learning (Qiao et al., "Pruner", §2.5, Fig. 5).

The pre-trained model is the Siamese network; a clone of it (the target model) is trained on the target's
measurements, and after every step the Siamese weights follow it by momentum, P_s <- m P_s + (1 - m) P_t
(m = 0.99, as in MoCo). The Siamese network is the adapted model: it moves towards the target slowly, which keeps a
few noisy measurements from wrecking what it learned on the source devices.
"""

from __future__ import annotations

import copy

from .base import register_method
from .finetune import FineTune


@register_method
class MomentumTransfer(FineTune):
    name = "mtl"
    EXTRA = dict(momentum=0.99)

    def _trained_net(self, m):
        return copy.deepcopy(m.net_)  # the target model; m.net_ stays the Siamese network

    def _optimizer(self, net, p):
        import torch

        # the target model learns fast; the Siamese network's momentum sets the pace of adaptation
        return torch.optim.AdamW(net.parameters(), lr=5 * p["lr"], weight_decay=1e-4)

    def _after_step(self, m, net) -> None:
        import torch

        mom = self.p_["momentum"]
        with torch.no_grad():
            for ps, pt in zip(m.net_.parameters(), net.parameters()):
                ps.mul_(mom).add_(pt.detach(), alpha=1 - mom)
