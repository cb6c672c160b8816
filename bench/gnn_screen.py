"""Does a graph of the loop nest beat the compact-AST Transformer? A GraphSAGE screen (TPU paper §3, on TIR).

The compact AST (CDMPP) keeps only the leaf stores; each leaf's loop context is folded into its vector (nest depth,
the four innermost extents, counts of vectorized / unrolled / parallel loops) and the tree is left to a positional
encoding. The graph here keeps the tree: one node per `For` loop (log2 extent, ForKind, auto-unroll pragma, log2 of
the times its body runs, depth), one per leaf store (its 50 compact-AST columns) and a root; edges loop -> child
loop, innermost loop -> leaf, root -> top-level loops and loopless leaves, and leaf <-> leaf where two stores share
a buffer (the data flow). Every edge is used both ways. Three SAGE layers (hidden 128, residual, LayerNorm), add +
mean + max pooling, and an MLP over the program's analytic and assembly columns (what the cdmpp member's analytic
head reads) feed a head predicting the standardized log latency (MSE; default kernels weighted like the members);
AdamW, early stopping on validation MAPE.

For a sample of one device's records (`bench/asm_features.py`'s: per task its default kernel plus random others,
`--per-train` of a training task, `--per-test` of a held-out one), per seed on the by_network split: the bundled
ensemble's cdmpp member (`use_analytic`, `use_asm`) and lgbm member (`program_asm`, latency per unit of work)
through `perfcast.eval.workflow.train`, the GNN on the same split, and the log-space means lgbm+cdmpp and lgbm+gnn.
The graphs are built by replaying each record's trace (`--jobs` processes; ~100 records a second on 2) and kept in
`--cache` (an .npz; a rerun reads them). Needs torch-geometric: `pip install -e '.[gnn]'`. No measuring.

    python bench/gnn_screen.py [--device KEY] [--per-train 24] [--per-test 60] [--seeds 0 1] [--epochs 80]
                               [--cache FILE] [--jobs 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

DEVICE = "local@Intel(R) Xeon(R) Processor/rocketlake"
N_LOOP = 9  # log2 extent, ForKind one-hot (5), log2(1 + auto-unroll), log2 body runs, depth
N_TYPE = 3  # root, loop, leaf
CHUNK = 256  # records a worker builds at a time
SAVE_EVERY = 10  # chunks between saves of the cache


def program_graph(func) -> tuple[np.ndarray, np.ndarray]:
    """(node features (n, N_TYPE + N_LOOP + 50) float32, edges (2, e) int64, one direction) of a PrimFunc."""
    from perfcast.features._tir import lg, walk
    from perfcast.features.compact_ast import D, leaf_vector

    w = walk(func)
    rows, edges, loop_node = [np.zeros(N_TYPE + N_LOOP + D)], [], {}
    rows[0][0] = 1.0
    for path, runs in zip(w.loop_paths, w.loop_iterations):
        key = tuple(x.var for x in path)
        if key in loop_node:  # the same nest reached again (an IfThenElse's branches): one node
            continue
        x = path[-1]
        r = np.zeros(N_TYPE + N_LOOP + D)
        r[1] = 1.0
        r[N_TYPE:N_TYPE + N_LOOP] = [lg(x.extent), *(float(x.kind == k) for k in range(5)),
                                     math.log2(1 + x.auto_unroll), lg(runs), len(path)]
        loop_node[key] = len(rows)
        edges.append((loop_node.get(key[:-1], 0), len(rows)))
        rows.append(r)
    leaf_nodes = []
    for leaf in w.leaves:
        r = np.zeros(N_TYPE + N_LOOP + D)
        r[2] = 1.0
        r[N_TYPE + N_LOOP:] = leaf_vector(leaf)
        leaf_nodes.append(len(rows))
        edges.append((loop_node.get(tuple(x.var for x in leaf.loops), 0), len(rows)))
        rows.append(r)
    for i, a in enumerate(w.leaves):
        for j in range(i + 1, len(w.leaves)):
            if a.buffers & w.leaves[j].buffers:
                edges.append((leaf_nodes[i], leaf_nodes[j]))
    return np.array(rows, np.float32), np.array(edges, np.int64).reshape(-1, 2).T


def chunk_graphs(rows: list[dict], task_scripts: dict[str, str]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(record id, node features, edges) of each stored record row, its program rebuilt by trace replay."""
    from perfcast.features.base import as_primfunc
    from perfcast.features.cache import record_program

    return [(r["record_id"], *program_graph(as_primfunc(record_program(r, task_scripts)))) for r in rows]


def save_graphs(cache: str, have: dict) -> None:
    ids = list(have)
    np.savez(cache + ".tmp.npz", ids=np.array(ids), x=np.concatenate([have[r][0] for r in ids]),
             e=np.concatenate([have[r][1] for r in ids], axis=1),
             x_offsets=np.cumsum([0] + [len(have[r][0]) for r in ids]),
             e_offsets=np.cumsum([0] + [have[r][1].shape[1] for r in ids]))
    os.replace(cache + ".tmp.npz", cache)


def load_graphs(ds, df, cache: str, jobs: int, progress: bool) -> list:
    """[(node features, edges)] of `df`'s records, built where `cache` lacks them (`perfcast.features.cache`'s
    chunked pool; saved every `SAVE_EVERY` chunks, so a kill loses at most that many)."""
    from perfcast.features.cache import dataset_task_scripts, map_chunks, rows_to_build, scripts_of

    have = {}
    if os.path.exists(cache):
        z = dict(np.load(cache))  # read each array once (an NpzFile re-reads an array on every access)
        ids, xo, eo = z["ids"], z["x_offsets"], z["e_offsets"]
        have = {str(r): (z["x"][xo[i]:xo[i + 1]], z["e"][:, eo[i]:eo[i + 1]]) for i, r in enumerate(ids)}
    rows = sorted((r for rs in rows_to_build(ds, set(df["record_id"]) - set(have)).values() for r in rs),
                  key=lambda r: r["workload_key"])  # a chunk parses few tasks
    if rows:
        scripts = dataset_task_scripts(ds)
        chunks = [rows[i:i + CHUNK] for i in range(0, len(rows), CHUNK)]
        done = [0]

        def on_done(_, res):
            have.update((rid, (x, e)) for rid, x, e in res)
            done[0] += 1
            if done[0] % SAVE_EVERY == 0:
                save_graphs(cache, have)

        map_chunks(chunk_graphs, [(c, scripts_of(c, scripts)) for c in chunks], on_done, jobs, progress, "graphs")
        save_graphs(cache, have)
    return [have[r] for r in df["record_id"]]


def graph_net(f_node: int, f_graph: int, hidden: int = 128, layers: int = 3):
    import torch
    from torch import nn
    from torch_geometric.nn import SAGEConv, global_add_pool, global_max_pool, global_mean_pool

    class GraphNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(nn.Linear(f_node, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.convs = nn.ModuleList(SAGEConv(hidden, hidden) for _ in range(layers))
            self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
            self.prog = nn.Sequential(nn.Linear(f_graph, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.head = nn.Sequential(nn.Linear(4 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                      nn.Linear(hidden, 1))

        def forward(self, x, edge_index, batch, g):  # x (nodes, f_node), g (graphs, f_graph) -> (graphs,)
            h = self.enc(x)
            for conv, norm in zip(self.convs, self.norms):
                h = h + torch.relu(norm(conv(h, edge_index)))
            pooled = torch.cat([global_add_pool(h, batch), global_mean_pool(h, batch), global_max_pool(h, batch)], 1)
            return self.head(torch.cat([pooled, self.prog(g)], 1)).squeeze(-1)

    return GraphNet()


def fit_predict_gnn(graphs, G, y, w, sp, seed: int, epochs: int, patience: int = 15) -> np.ndarray:
    """Train on sp.train (early stop on sp.val MAPE), return the predicted latency of sp.test."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader

    from perfcast.models._torch import Standardizer

    torch.manual_seed(seed)
    node_norm = Standardizer().fit(np.concatenate([graphs[i][0] for i in sp.train]))
    prog_norm = Standardizer().fit(G[sp.train])
    ly = np.log(y)
    ymu, ysd = ly[sp.train].mean(), ly[sp.train].std()
    w = np.ones(len(y)) if w is None else w

    def data(idx):
        return [Data(x=torch.from_numpy(node_norm(graphs[i][0])),
                     edge_index=torch.from_numpy(np.concatenate([graphs[i][1], graphs[i][1][::-1]], 1).copy()),
                     g=torch.from_numpy(prog_norm(G[i][None])),
                     y=torch.tensor([(ly[i] - ymu) / ysd], dtype=torch.float32),
                     w=torch.tensor([w[i]], dtype=torch.float32)) for i in idx]

    train, val, test = data(sp.train), data(sp.val), data(sp.test)
    net = graph_net(len(node_norm.mean_), G.shape[1])
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    gen = torch.Generator().manual_seed(seed)

    def predict(ds):
        net.eval()
        with torch.no_grad():
            out = [net(b.x, b.edge_index, b.batch, b.g) for b in DataLoader(ds, batch_size=512)]
        net.train()
        return np.exp(torch.cat(out).numpy().astype(np.float64) * ysd + ymu)

    best, best_state, bad = math.inf, None, 0
    for _ in range(epochs):
        for b in DataLoader(train, batch_size=128, shuffle=True, generator=gen):
            loss = (b.w * (net(b.x, b.edge_index, b.batch, b.g) - b.y) ** 2).sum() / b.w.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        v = float(np.mean(np.abs(predict(val) / y[sp.val] - 1)))
        if v < best:
            best, best_state, bad = v, {k: t.clone() for k, t in net.state_dict().items()}, 0
        else:
            bad += 1
            if bad >= patience:
                break
    net.load_state_dict(best_state)
    return predict(test)


def main(argv=None) -> None:
    from asm_features import RECIPES, mean_runs, nets_text, run_entry, run_text, sampled_records

    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import DEFAULT_WEIGHT, SEARCHED_WEIGHT, make_split, sample_weights, scores, train
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.features.cache import dataset_features

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled one)")
    ap.add_argument("--device", default=DEVICE, help=f"device key of the records used (default {DEVICE!r})")
    ap.add_argument("--per-train", type=int, default=24, help="programs per training task (default 24)")
    ap.add_argument("--per-test", type=int, default=60, help="programs per held-out task (default 60)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="split / model seeds (default 0 1)")
    ap.add_argument("--epochs", type=int, default=80, help="GNN epochs at most (default 80)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes building (default: all cores)")
    ap.add_argument("--cache", default=None, help="graphs .npz (default: graphs_<device CPU>.npz here)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    a = ap.parse_args(argv)
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        raise PerfcastError("this bench needs torch-geometric; install it with pip install -e '.[gnn]'") from None
    if a.jobs < 1 or a.epochs < 1:
        raise PerfcastError(f"--jobs {a.jobs} and --epochs {a.epochs} must be at least 1")
    cache = a.cache or f"graphs_{a.device.rsplit('/', 1)[1]}.npz"
    if not cache.endswith(".npz"):  # numpy.savez would append it, and the next run would not find the file
        raise PerfcastError(f"--cache {cache!r} must end in .npz, e.g. {cache}.npz")
    ds, df = sampled_records(a.data, a.device, a.per_train, a.per_test)
    X = dataset_features(ds, df, progress=not a.json)
    X.asm = dataset_asm(ds, df, progress=not a.json)
    graphs = load_graphs(ds, df, cache, a.jobs, not a.json)
    G = np.hstack([X.analytic, X.asm])  # standardized as the cdmpp member's analytic MLP reads them
    y = df["latency_s"].to_numpy()
    out = {"device": a.device, "records": len(df), "tasks": int(df["workload_key"].nunique()),
           "mean_nodes": float(np.mean([len(g[0]) for g in graphs])), "runs": []}
    members = {m: RECIPES[m][1] for m in ("cdmpp", "lgbm")}  # the bundled ensemble's members' recipes
    for seed in a.seeds:
        sp = make_split(df, "by_network", seed, None)
        nets = sp.params.get("test_networks")
        pred, secs = {}, {}
        for name, params in members.items():
            t0 = time.time()
            pred[name] = train(model=name, split="by_network", seed=seed, loaded=(ds, df, X), progress=False,
                               params=dict(params))["estimator"].predict(X.take(sp.test))
            secs[name] = time.time() - t0
        t0 = time.time()
        w = sample_weights(df, DEFAULT_WEIGHT, SEARCHED_WEIGHT)
        pred["gnn"] = fit_predict_gnn(graphs, G, y, w, sp, seed, a.epochs)
        secs["gnn"] = time.time() - t0
        for other in ("cdmpp", "gnn"):
            pred[f"lgbm+{other}"] = np.sqrt(pred["lgbm"] * pred[other])
        for name, p in pred.items():
            out["runs"].append({"seed": seed, "model": name, "seconds": secs.get(name),
                                **run_entry(scores(df, y, p, sp.test, nets))})
    out["mean"] = mean_runs(out["runs"], "model")
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{a.device}: {out['records']} records of {out['tasks']} tasks, {out['mean_nodes']:.1f} nodes a graph")
    for x in out["runs"]:
        print(f"  seed {x['seed']} {x['model']:11s} {run_text(x)}  ({nets_text(x)})")
    for m, v in out["mean"].items():
        print(f"  mean {m:11s} {run_text(v)}")

if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
