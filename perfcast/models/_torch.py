"""The training loop shared by the neural cost models (cdmpp, mlp).

A neural model turns each program into a sequence of rows (leaves or stores) of a fixed width plus per-program
vectors (device, analytic features). Programs are grouped by sequence length so that a batch needs no padding
(CDMPP §5.1: "no padding sparsity"); a batch is drawn from one group. Training: AdamW, CyclicLR (triangular,
between lr/10 and lr, CDMPP Appendix B), the chosen loss on standardized targets (`perfcast.models.losses`), early
stopping on the validation MAPE with the best weights kept. `seed` seeds numpy and torch.

`rank_lambda` > 0 adds a within-task pairwise ranking term (the TPU paper's pairwise rank loss for tile selection,
`tpu-learned-performance-model.txt` §3.3, as an auxiliary term beside the regression loss): every training program
of a batch is paired with another program of its group (`fit(groups=...)`: one task on one device) and leaf count,
drawn at random each step, and the pair adds softplus(-sign(y_i - y_j) (z_i - z_j) / RANK_TEMPERATURE), a logistic
(RankNet) loss on the predicted standardized targets; pairs whose latencies differ by less than RANK_MARGIN (in log)
are left out (timing noise). The regression loss sees the batch's own programs only, so the term changes the
objective, not which programs are regressed. `rank_lambda` > 0 without `groups` is an error.

`weight_average="ema"` (a perfcast addition; default "none", the paper's loop) keeps an exponential moving average
of the weights (`torch.optim.swa_utils.AveragedModel`, updated after every optimizer step, decay 1 - 1 / (`ema_cycles`
x the steps of one LR cycle)) and validates, early-stops and keeps that average instead of the trained weights. The
triangular CyclicLR never anneals, so the trained weights at any epoch sit wherever the last cycle left them; their
average over about a cycle is the point those cycles circle (Polyak averaging; Izmailov et al. 2018, "Averaging
Weights Leads to Wider Optima", with cyclic LR). The trained weights' validation MAPE stays in the history
(`val_mape_raw`), so one run shows both. Without validation programs the epoch is chosen by the trained weights'
training loss, as in the plain loop, and the average at that epoch is kept.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np

from ..errors import PerfcastError
from .base import CostModel
from .losses import make_loss
from .targets import TargetTransform

TRAIN_DEFAULTS = dict(epochs=150, batch_size=256, lr=2e-3, weight_decay=1e-4, loss="mse+mape", loss_lambda=1.0,
                      target="boxcox", target_scale="none", patience=25, seed=0, threads=0, verbose=False,
                      cmd_alpha=0.0, cmd_moments=5, rank_lambda=0.0, weight_average="none", ema_cycles=1.0)
WEIGHT_AVERAGES = ("none", "ema")
RANK_TEMPERATURE = 0.05  # standardized-target units: ~10 % of latency within a task is ~1 logit
RANK_MARGIN = 0.05  # |log(y_i / y_j)| below this is timing noise, not an order


def round_weights(net) -> None:
    """Rounds `net`'s floating-point parameters and buffers to float16 precision in place (still float32 tensors),
    except a tensor with a value float16 cannot hold (|x| > 65504), which stays as it is. Training and adapting end
    with it, so `save` can store the weights as float16 losslessly: half the file (the bundled cdmpp member 11.0 ->
    5.5 MB) for a change of at most 2^-11 of a weight (absolute 3e-8 below float16's normal range, 6.1e-5)."""
    import torch

    with torch.no_grad():
        for t in net.state_dict().values():
            if t.is_floating_point() and torch.isfinite(h := t.half()).all():
                t.copy_(h.float())


def compact_state(state: dict) -> dict:
    """`state` (a state_dict) with every float32 tensor that float16 holds exactly stored as float16, the others
    as they are: a lossless way to halve a `round_weights`ed network's file; loading casts back
    (`load_state_dict` copies into the float32 parameters)."""
    import torch

    out = {}
    for k, t in state.items():
        if t.dtype == torch.float32 and torch.equal(t.half().float(), t):
            t = t.half()
        out[k] = t
    return out


def cmd(a, b, moments: int = 5):
    """Central Moment Discrepancy (Zellinger et al. 2017; CDMPP Eq. 6) between two batches of latents (n, d):
    ||E a - E b|| + sum_{k=2..K} ||c_k(a) - c_k(b)||, with c_k the k-th central moment per dimension. The latents
    are squashed with tanh first so that every moment is bounded (the [a, b] = [-1, 1] range of the original)."""
    import torch

    a, b = torch.tanh(a), torch.tanh(b)
    ma, mb = a.mean(0), b.mean(0)
    out = torch.linalg.vector_norm(ma - mb)
    ca, cb = a - ma, b - mb
    for k in range(2, moments + 1):
        out = out + torch.linalg.vector_norm((ca ** k).mean(0) - (cb ** k).mean(0)) / 2 ** k
    return out


class Standardizer:
    """Column-wise (x - mean) / std fitted on training rows. A column constant in training (e.g. every device
    feature when the training data holds one device) is scaled by max(|mean|, 1) instead, so that an unseen value
    (another device's vector width) lands at a relative distance, not at hundreds of standard deviations. "Constant"
    includes jitter: a spread below 1e-3 of the column's magnitude (one CPU probed in two sessions, 2,445.1 vs
    2,445.3 MHz) would otherwise put another CPU millions of "standard deviations" away. NaN entries (a feature
    that could not be computed) are left out of the fit and map to 0, the mean."""

    def fit(self, rows: np.ndarray) -> "Standardizer":
        rows = np.asarray(rows, np.float64)
        known = ~np.isnan(rows)  # NaN (a feature that could not be computed) is left out of the moments
        n = known.sum(axis=0)
        x = np.where(known, rows, 0.0)
        self.mean_ = x.sum(axis=0) / np.maximum(n, 1)
        std = np.sqrt(np.where(known, (x - self.mean_) ** 2, 0.0).sum(axis=0) / np.maximum(n, 1))
        std = np.where(n > 0, std, 1.0)
        scale = np.maximum(np.abs(self.mean_), 1.0)
        self.std_ = np.where(std > 1e-3 * scale, std, scale)
        return self

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Standardized rows; NaN becomes 0, the training mean."""
        return np.nan_to_num((x - self.mean_) / self.std_, nan=0.0).astype(np.float32)

    def to_dict(self) -> dict:
        return {"mean": self.mean_.tolist(), "std": self.std_.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "Standardizer":
        s = cls()
        s.mean_, s.std_ = np.asarray(d["mean"]), np.asarray(d["std"])
        return s


class Groups:
    """Programs grouped by sequence length: per length L, tensors seq (g, L, F) and vec (g, V) and row indices."""

    def __init__(self, seqs: list[np.ndarray], vecs: np.ndarray):
        import torch

        self.by_len: dict[int, tuple] = {}
        lengths = np.array([len(s) for s in seqs])
        for L in np.unique(lengths):
            idx = np.flatnonzero(lengths == L)
            seq = torch.from_numpy(np.stack([seqs[i] for i in idx]).astype(np.float32))
            self.by_len[int(L)] = (seq, torch.from_numpy(vecs[idx].astype(np.float32)), idx)
        self.n = len(seqs)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None, positions: bool = False):
        """(L, seq, vec, idx) batches; shuffled across and within groups when `rng` is given; with `positions`,
        (L, seq, vec, idx, sel): sel are the batch's positions within its length group."""
        plan = []
        for L, (_, _, idx) in self.by_len.items():
            order = rng.permutation(len(idx)) if rng is not None else np.arange(len(idx))
            plan += [(L, order[i:i + batch_size]) for i in range(0, len(idx), batch_size)]
        if rng is not None:
            plan = [plan[i] for i in rng.permutation(len(plan))]
        for L, sel in plan:
            seq, vec, idx = self.by_len[L]
            yield (L, seq[sel], vec[sel], idx[sel]) + ((sel,) if positions else ())


class Partners:
    """Random pairing within groups: for a length group's positions, another position of the same label."""

    def __init__(self, groups: Groups, labels: np.ndarray):
        self.by_len = {}
        for L, (_, _, idx) in groups.by_len.items():
            lab = labels[idx]
            order = np.argsort(lab, kind="stable")  # positions sorted by label
            sorted_lab = lab[order]
            start = np.searchsorted(sorted_lab, sorted_lab, side="left")
            size = np.searchsorted(sorted_lab, sorted_lab, side="right") - start
            rank = np.empty(len(idx), np.int64)
            rank[order] = np.arange(len(idx))  # where each position sits in `order`
            self.by_len[L] = (order, start[rank], size[rank], rank)

    def draw(self, L: int, sel: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One partner position per position of `sel` (same length group and label, never itself); -1 for a
        position alone in its group."""
        order, start, size, rank = self.by_len[L]
        s, n, r = start[sel], size[sel], rank[sel]
        k = (rng.random(len(sel)) * np.maximum(n - 1, 1)).astype(np.int64)  # 0 .. n-2
        k = k + (s + k >= r)  # skip the program itself
        return np.where(n > 1, order[np.minimum(s + k, len(order) - 1)], -1)


def rank_loss(z_i, z_j, y_i, y_j):
    """Mean logistic pairwise loss of predicted standardized targets against the measured order (0 when no pair
    differs by more than RANK_MARGIN)."""
    import torch

    d = torch.log(y_i) - torch.log(y_j)
    keep = torch.abs(d) > RANK_MARGIN
    if not bool(keep.any()):
        return torch.zeros(())
    s = torch.sign(d[keep])
    return torch.nn.functional.softplus(-s * (z_i[keep] - z_j[keep]) / RANK_TEMPERATURE).mean()


class TorchCostModel(CostModel):
    """Base of the neural cost models: subclasses give the network and the program -> (sequence, vector) map."""

    ARCH_DEFAULTS: dict = {}

    def __init__(self, **params):
        unknown = set(params) - set(TRAIN_DEFAULTS) - set(self.ARCH_DEFAULTS)
        if unknown:
            raise PerfcastError(f"unknown parameter(s) {sorted(unknown)} for model {self.name!r}; known: "
                                f"{sorted(set(TRAIN_DEFAULTS) | set(self.ARCH_DEFAULTS))}")
        super().__init__(**{**TRAIN_DEFAULTS, **self.ARCH_DEFAULTS, **params})

    # ---- subclass hooks ----------------------------------------------------------------------------------------
    def _fit_inputs(self, X) -> None:
        """Fit input normalizers on the training programs."""
        raise NotImplementedError

    def _inputs(self, X) -> tuple[list[np.ndarray], np.ndarray]:
        """Per-program sequences (L_i, F) and per-program vectors (n, V), normalized."""
        raise NotImplementedError

    def _build_net(self, X):
        raise NotImplementedError

    def _input_state(self) -> dict:
        raise NotImplementedError

    def _load_input_state(self, state: dict) -> None:
        raise NotImplementedError

    # ---- training ----------------------------------------------------------------------------------------------
    def _fit(self, X, y, X_val, y_val) -> None:
        import torch

        p = self.params
        if p["rank_lambda"] > 0 and getattr(self, "_groups", None) is None:
            raise PerfcastError(f"rank_lambda={p['rank_lambda']} needs the programs' task labels: pass "
                                "fit(..., groups=...) (perfcast train does), or set rank_lambda=0")
        if p["weight_average"] not in WEIGHT_AVERAGES:
            raise PerfcastError(f"weight_average={p['weight_average']!r} is not one of {list(WEIGHT_AVERAGES)}; "
                                "e.g. --param weight_average=ema")
        try:
            ema_cycles = float(p["ema_cycles"])
        except (TypeError, ValueError):
            ema_cycles = float("nan")
        if not ema_cycles > 0:
            raise PerfcastError(f"ema_cycles={p['ema_cycles']!r} must be a positive number of LR cycles, e.g. 1")
        torch.manual_seed(p["seed"])
        rng = np.random.default_rng(p["seed"])
        if p["threads"]:
            torch.set_num_threads(p["threads"])
        self.target_ = TargetTransform(p["target"]).fit(y)
        self._fit_inputs(X)
        self.net_ = self._build_net(X)
        train = Groups(*self._inputs(X))
        z_all = torch.from_numpy(self.target_.transform(y).astype(np.float32))
        y_all = torch.from_numpy(y.astype(np.float32))
        w = getattr(self, "_sample_weight", None)
        w_all = torch.from_numpy(w.astype(np.float32)) if w is not None else None
        val = Groups(*self._inputs(X_val)) if X_val is not None and len(X_val) else None
        loss_fn = make_loss(p["loss"], self.target_, p["loss_lambda"])
        opt = torch.optim.AdamW(self.net_.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])
        steps = max(1, sum(1 for _ in train.batches(p["batch_size"])))
        sched = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=p["lr"] / 10, max_lr=p["lr"],
                                                  step_size_up=2 * steps, cycle_momentum=False)
        ema = None
        if p["weight_average"] == "ema":  # one LR cycle is 2 x step_size_up = 4 epochs of steps
            from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

            decay = 1.0 - 1.0 / max(1.0, ema_cycles * 4 * steps)
            ema = AveragedModel(self.net_, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
        target = getattr(self, "_X_target", None)
        tgt = Groups(*self._inputs(target)) if target is not None and p["cmd_alpha"] > 0 else None
        tgt_batches = []
        labels = getattr(self, "_groups", None)
        pairs = Partners(train, labels) if p["rank_lambda"] > 0 else None
        n_pairs = 0
        best, best_state, stale, history = np.inf, None, 0, []

        def val_mape(net) -> float:  # not eval.metrics.mape, which raises on a NaN prediction: a diverged epoch
            # scores NaN here and counts as a stale one (early stopping keeps the best weights before it)
            return float(np.mean(np.abs(self._predict_groups(val, net) - y_val) / y_val))

        t0 = time.time()
        for epoch in range(p["epochs"]):
            self.net_.train()
            total = 0.0
            for L, seq, vec, idx, sel in train.batches(p["batch_size"], rng, positions=True):
                t = torch.from_numpy(idx)
                wt = w_all[t] if w_all is not None else None
                B = len(idx)
                if pairs is not None:  # the batch's programs, then one partner of each (same task, device, L)
                    part = pairs.draw(L, sel, rng)
                    has = part >= 0
                    gseq, gvec, gidx = train.by_len[L]
                    seq = torch.cat([seq, gseq[part[has]]])
                    vec = torch.cat([vec, gvec[part[has]]])
                z = self.net_.encode(seq, vec)  # (B [+ partners], z)
                out = self.net_.decode(z)
                loss = loss_fn(out[:B], z_all[t], y_all[t], wt)
                if tgt is not None:  # CDMPP Eq. 7: the task loss plus alpha * CMD(source latents, target latents)
                    if not tgt_batches:
                        tgt_batches = list(tgt.batches(p["batch_size"], rng))
                    _, tseq, tvec, _ = tgt_batches.pop()
                    loss = loss + p["cmd_alpha"] * cmd(z[:B], self.net_.encode(tseq, tvec), p["cmd_moments"])
                if pairs is not None and has.any():
                    tj = torch.from_numpy(gidx[part[has]])
                    ti = t[torch.from_numpy(has)]
                    loss = loss + p["rank_lambda"] * rank_loss(out[:B][torch.from_numpy(has)], out[B:], y_all[ti],
                                                               y_all[tj])
                    n_pairs += int(has.sum())
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net_.parameters(), 5.0)
                opt.step()
                sched.step()
                if ema is not None:
                    ema.update_parameters(self.net_)
                total += float(loss.detach()) * B  # per-batch weighted mean, reported unweighted
            kept = ema.module if ema is not None else self.net_  # the weights validated and kept
            score = val_mape(kept) if val else total / len(y)
            history.append({"epoch": epoch, "train_loss": total / len(y), "val_mape": score if val else None})
            if ema is not None and val:
                history[-1]["val_mape_raw"] = val_mape(self.net_)
            if p["verbose"]:
                print(f"epoch {epoch:3d} loss {total / len(y):.4f} val_mape {score:.4f}", flush=True)
            if score < best - 1e-5:
                best, best_state, stale = score, copy.deepcopy(kept.state_dict()), 0
            else:
                stale += 1
                if stale >= p["patience"]:
                    break
        if best_state is not None:
            self.net_.load_state_dict(best_state)
        round_weights(self.net_)  # what `save` stores, so a saved model predicts as the trained one
        self.info_ = {"epochs": len(history), "best_val_mape": best if val else None,
                      "train_seconds": time.time() - t0, "samples_per_second": len(y) * len(history) /
                      max(time.time() - t0, 1e-9), "history": history, "rank_pairs": n_pairs}

    # ---- prediction --------------------------------------------------------------------------------------------
    def _predict_groups(self, groups: Groups, net=None) -> np.ndarray:
        """Latencies of `groups`' programs by `net` (default: the model's network), left in eval mode."""
        import torch

        net = self.net_ if net is None else net
        net.eval()
        z = np.zeros(groups.n, np.float32)
        with torch.no_grad():
            for L, seq, vec, idx in groups.batches(4096):
                z[idx] = net(seq, vec).numpy()
        return self.target_.inverse(z)

    def _predict(self, X) -> np.ndarray:
        return self._predict_groups(Groups(*self._inputs(X)))

    def latent(self, X) -> np.ndarray:
        """The encoder's output z (n, d) of each program (CDMPP's latent representation)."""
        import torch

        groups = Groups(*self._inputs(self.proxied(X)[0]))
        out = None
        self.net_.eval()
        with torch.no_grad():
            for L, seq, vec, idx in groups.batches(4096):
                z = self.net_.encode(seq, vec).numpy()
                if out is None:
                    out = np.zeros((groups.n, z.shape[1]), np.float32)
                out[idx] = z
        return out if out is not None else np.zeros((0, 0), np.float32)

    # ---- persistence -------------------------------------------------------------------------------------------
    def _save_state(self, path: Path) -> dict:
        import torch

        torch.save(compact_state(self.net_.state_dict()), path / "weights.pt")
        return {"target": self.target_.to_dict(), "inputs": self._input_state(), "file": "weights.pt"}

    def _load_state(self, path: Path, state: dict) -> None:
        import torch

        self.target_ = TargetTransform.from_dict(state["target"])
        self._load_input_state(state["inputs"])
        self.net_ = self._build_net(None)
        self.net_.load_state_dict(torch.load(path / state["file"], weights_only=True))
        self.net_.eval()
