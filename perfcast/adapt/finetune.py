"""`finetune`: continue training every weight of a trained neural cost model on the target device's measured
programs - the plain transfer-learning baseline (Tenset's and CDMPP §7.4's "fine-tuning"), and the loop the other
methods (`cmd`, `mtl`, `lottery`) extend through four hooks.

A tree model (`xgb`, `lgbm`, or an ensemble's tree member) is adapted the trees' way by every method: up to
`tree_rounds` more trees boosted on the target programs' residuals (`_GBDT.boosted`), early-stopped the same way.
An ensemble's residual stage, fitted to what the source devices' members missed, gets the same after its members are
adapted: more trees on the target's measured / (adapted members' mean), so it corrects what they still miss there.

The loop: AdamW at lr 2e-4 (a tenth of cdmpp's), the model's own loss (e.g. MSE + MAPE on Box-Cox targets,
with the base model's fitted target transform and input normalizers kept), early stopping on the MAPE of a
`val_frac` share of the target programs (none when there are fewer than 5), the best weights kept.
"""

from __future__ import annotations

import copy

import numpy as np

from ..errors import PerfcastError
from .base import Method, register_method

DEFAULTS = dict(epochs=40, lr=2e-4, batch_size=64, val_frac=0.2, patience=8, seed=0, max_source=2000,
                tree_rounds=100)


@register_method
class FineTune(Method):
    name = "finetune"
    uses_source = False  # whether the loop draws replay batches of the source devices' records

    # ---- hooks -------------------------------------------------------------------------------------------------
    def _trained_net(self, m):
        """The module the optimizer updates (the model's own by default)."""
        return m.net_

    def _loss(self, m, net, seq, vec, z, y, loss_fn, src_batch):
        return loss_fn(net(seq, vec), z, y)

    def _before_step(self, m, net) -> None:
        pass

    def _after_step(self, m, net) -> None:
        pass

    def _epoch_start(self, m, net, train, z_all, y_all, loss_fn) -> None:
        pass

    def check_model(self, model) -> None:
        from ..models._torch import TorchCostModel
        from ..models.ensemble import EnsembleModel
        from ..models.gbdt import _GBDT

        if isinstance(model, EnsembleModel):  # every member is adapted
            for mm in model.members_:
                self.check_model(mm)
            return
        if not isinstance(model, (TorchCostModel, _GBDT)):
            raise PerfcastError(f"adaptation method {self.name!r} adapts the neural cost models (cdmpp, mlp), the "
                                f"tree models (xgb, lgbm) and ensembles of them; the model is {model.name!r}: pass "
                                "--model a directory of one of those")

    # ---- the loop ----------------------------------------------------------------------------------------------
    def adapt(self, model, X_tgt, y_tgt, X_src=None, y_src=None):
        import torch

        from ..eval.metrics import mape
        from ..models._torch import Groups, round_weights
        from ..models.ensemble import EnsembleModel
        from ..models.gbdt import _GBDT
        from ..models.losses import make_loss

        self.check_model(model)
        p = {**DEFAULTS, **self.params}
        unknown = set(p) - set(DEFAULTS) - set(getattr(self, "EXTRA", {}))
        if unknown:
            raise PerfcastError(f"unknown parameter(s) {sorted(unknown)} for adaptation method {self.name!r}")
        if isinstance(model, EnsembleModel):  # adapt each member on the same measurements
            adapted = [self.adapt(mm, X_tgt, y_tgt, X_src, y_src) for mm in model.members_]
            out = model.with_members(adapted)
            out.adapt_info_ = {"method": self.name, "members": [mm.adapt_info_ for mm in adapted]}
            if out.residual_ is not None:  # the stage, a tree model: adapted on the target's ratio to the members
                out.residual_ = self.adapt(out.residual_, X_tgt, out.residual_target(X_tgt, y_tgt))
                out.adapt_info_["residual"] = out.residual_.adapt_info_
            return out
        if isinstance(model, _GBDT):  # a tree model: continued boosting, whichever method (they act on weights)
            return model.boosted(X_tgt, y_tgt, rounds=p["tree_rounds"], val_frac=p["val_frac"], seed=p["seed"])
        p = {**getattr(self, "EXTRA", {}), **p}
        self.p_ = p
        y = np.asarray(y_tgt, np.float64)
        if len(y) == 0:
            raise PerfcastError("no measured target programs to adapt to; measure at least one task on the target")
        m = copy.deepcopy(model)
        y = y / m.scale(X_tgt)  # the latency per unit of work for a model with target_scale=work (MAPE unchanged)
        torch.manual_seed(p["seed"])
        rng = np.random.default_rng(p["seed"])
        n_val = int(round(p["val_frac"] * len(y))) if len(y) >= 5 else 0
        perm = rng.permutation(len(y))
        val_i, tr_i = perm[:n_val], perm[n_val:]
        train = Groups(*m._inputs(X_tgt.take(tr_i)))
        z_all = torch.from_numpy(m.target_.transform(y[tr_i]).astype(np.float32))
        y_all = torch.from_numpy(y[tr_i].astype(np.float32))
        val = Groups(*m._inputs(X_tgt.take(val_i))) if n_val else None
        src = None
        if self.uses_source:
            if X_src is None or len(X_src) == 0:
                raise PerfcastError(f"adaptation method {self.name!r} needs records of the source devices")
            keep = rng.permutation(len(X_src))[: p["max_source"]]
            ys = np.asarray(y_src, np.float64)[keep] / m.scale(X_src.take(keep))
            src = (Groups(*m._inputs(X_src.take(keep))), torch.from_numpy(m.target_.transform(ys).astype(np.float32)),
                   torch.from_numpy(ys.astype(np.float32)))
        loss_fn = make_loss(m.params["loss"], m.target_, m.params["loss_lambda"])
        net = self._trained_net(m)
        opt = self._optimizer(net, p)
        src_batches: list = []
        best, best_state, stale, history = np.inf, None, 0, []  # history: training loss per epoch
        for epoch in range(p["epochs"]):
            self._epoch_start(m, net, train, z_all, y_all, loss_fn)
            net.train()
            m.net_.train()
            total = 0.0
            for L, seq, vec, idx in train.batches(p["batch_size"], rng):
                t = torch.from_numpy(idx)
                sb = None
                if src is not None:
                    if not src_batches:
                        src_batches = list(src[0].batches(p["batch_size"], rng))
                    _, sseq, svec, sidx = src_batches.pop()
                    st = torch.from_numpy(sidx)
                    sb = (sseq, svec, src[1][st], src[2][st])
                loss = self._loss(m, net, seq, vec, z_all[t], y_all[t], loss_fn, sb)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
                self._before_step(m, net)
                opt.step()
                self._after_step(m, net)
                total += float(loss.detach()) * len(idx)
            history.append(total / max(len(tr_i), 1))
            if val is None:  # too few programs to hold some out: train every epoch
                continue
            score = mape(y[val_i], m._predict_groups(val))
            if score < best - 1e-6:
                best, best_state, stale = score, copy.deepcopy(m.net_.state_dict()), 0
            else:
                stale += 1
                if stale >= p["patience"]:
                    break
        if best_state is not None:
            m.net_.load_state_dict(best_state)
        round_weights(m.net_)  # as after training: what `save` stores
        m.net_.eval()
        m.adapt_info_ = {"method": self.name, "params": p, "epochs": len(history), "n_target": int(len(y)),
                         "best_val_mape": float(best) if val else None}
        return m

    def _optimizer(self, net, p):
        import torch

        return torch.optim.AdamW(net.parameters(), lr=p["lr"], weight_decay=1e-4)
