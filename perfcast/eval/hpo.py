"""Architecture and hyper-parameter search for the cdmpp model with Optuna (CDMPP §5, "auto-tuner").

Trials are scored on the split's validation part only (whole held-out tasks for `by_network`), never on its
test part, so the test score of the chosen configuration stays honest.
"""

from __future__ import annotations

import numpy as np

from ..models import WEIGHT_AVERAGES
from .workflow import DEFAULT_WEIGHT, load_data, make_split, rank_groups, sample_weights

SPACE = {
    "d_model": [32, 64, 128],
    "layers": [1, 2, 3],
    "z_dim": [64, 128, 256],
    "decoder_hidden": [128, 256, 512],
    "decoder_layers": [1, 2, 3],
    "lr": (3e-4, 5e-3),
    "weight_decay": (1e-6, 1e-2),
    "batch_size": [128, 256, 512],
    "loss_lambda": (0.1, 10.0),
    "use_analytic": [False, True],
    "weight_average": list(WEIGHT_AVERAGES),
}


def search(data=None, trials: int = 20, split: str = "by_network", seed: int = 0, epochs: int = 60,
           timeout_s: float | None = None, progress: bool = True) -> dict:
    """Run `trials` Optuna trials (TPE, seeded); returns {"best_params", "best_val_mape", "trials": [...]}."""
    import optuna

    from ..models import get_model

    ds, df, X = load_data(data, progress=progress)
    sp = make_split(df, split, seed, None)
    y = df["latency_s"].to_numpy()
    Xtr, Xva = X.take(sp.train), X.take(sp.val)
    w = sample_weights(df.iloc[sp.train], DEFAULT_WEIGHT)  # the recipe `perfcast train` uses
    g = rank_groups(df.iloc[sp.train])

    def objective(trial):
        params = {}
        for k, v in SPACE.items():
            if isinstance(v, list):
                params[k] = trial.suggest_categorical(k, v)
            else:
                params[k] = trial.suggest_float(k, *v, log=True)
        m = get_model("cdmpp", epochs=epochs, seed=seed, **params).fit(Xtr, y[sp.train], Xva, y[sp.val],
                                                                      sample_weight=w, groups=g)
        return float(np.mean(np.abs(m.predict(Xva) - y[sp.val]) / y[sp.val]))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=trials, timeout=timeout_s, show_progress_bar=progress)
    return {"best_params": study.best_params, "best_val_mape": study.best_value,
            "trials": [{"params": t.params, "val_mape": t.value} for t in study.trials if t.value is not None]}
