"""Which tasks to measure on a new device.

`kmeans` is CDMPP's clustering-based sampling (Algorithm 1, §5.3): KMeans splits all programs' latent features into
k clusters, sorted by size (largest first); Ψ[e, τ] is the mean distance of task τ's programs to the centre of cluster
e; for each cluster in turn, the candidate task with the smallest Ψ[e, ·] is picked and leaves the candidate set.
`random` picks k tasks uniformly (the control).
"""

from __future__ import annotations

import numpy as np

from ..errors import PerfcastError
from .base import Sampler, register_sampler


def check_budget(k: int) -> None:
    if k < 1:
        raise PerfcastError(f"--budget-tasks {k} makes no sense; use K >= 1 (CDMPP saturates near 50)")


def _check(task_of_row: np.ndarray, k: int) -> np.ndarray:
    tasks = np.unique(np.asarray(task_of_row).astype(str))
    check_budget(k)
    if k > len(tasks):
        raise PerfcastError(f"--budget-tasks {k} exceeds the {len(tasks)} tasks to choose from; use K <= {len(tasks)}")
    return tasks


@register_sampler
class RandomSampler(Sampler):
    name = "random"

    def select(self, task_of_row, Z, k, seed=0):
        tasks = _check(task_of_row, k)
        return [str(t) for t in np.random.default_rng(seed).choice(tasks, size=k, replace=False)]


@register_sampler
class KMeansSampler(Sampler):
    name = "kmeans"

    def select(self, task_of_row, Z, k, seed=0):
        from sklearn.cluster import KMeans

        tasks = _check(task_of_row, k)
        task_of_row = np.asarray(task_of_row).astype(str)
        Z = np.asarray(Z, np.float64)
        Z = (Z - Z.mean(0)) / np.where(Z.std(0) > 1e-12, Z.std(0), 1.0)
        km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(Z)  # line 3
        order = np.argsort(-np.bincount(km.labels_, minlength=k), kind="stable")  # sorted by cluster size
        # Ψ[e, τ]: mean distance of task τ's programs to centre e (lines 4-7)
        dist = np.linalg.norm(Z[:, None, :] - km.cluster_centers_[None, :, :], axis=2)  # (n, k)
        col = {t: i for i, t in enumerate(tasks)}
        idx = np.array([col[t] for t in task_of_row])
        psi = np.zeros((k, len(tasks)))
        np.add.at(psi.T, idx, dist)
        psi /= np.bincount(idx, minlength=len(tasks))[None, :]
        chosen: list[str] = []
        free = np.ones(len(tasks), bool)
        for e in order:  # lines 9-15
            j = int(np.argmin(np.where(free, psi[e], np.inf)))
            chosen.append(str(tasks[j]))
            free[j] = False
        return chosen
