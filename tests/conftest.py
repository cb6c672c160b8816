import os

import pytest

os.environ.setdefault("TVM_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def naive_matmul():
    """(m, n, k) -> TVM's untuned float32 matmul C = A @ B as hand-written TIR: loops i, j, k, a reduction block with
    an init store (two compact-AST leaves); B is read down its columns, rows 4n bytes apart."""
    from tvm.script import tirx as T

    def build(m: int, n: int, k: int):
        @T.prim_func(s_tir=True)
        def mm(A: T.Buffer((m, k), "float32"), B: T.Buffer((k, n), "float32"), C: T.Buffer((m, n), "float32")):
            for i, j, kk in T.grid(m, n, k):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, kk])
                    with T.init():
                        C[vi, vj] = T.float32(0.0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        return mm

    return build


@pytest.fixture(scope="session")
def matmul64():
    """A 64x64x64 matmul task module (TE -> PrimFunc named main)."""
    import tvm
    from tvm import te

    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), "k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.fixture(scope="session")
def recompute_rowsum():
    """Y = X - rowsum(X) over a 4x8 X, with the row sum S computed inside Y's j loop, which it does not use (a
    compute-at meta-schedule makes): j (8) repeats S's init and update stores; k (8) runs inside it."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def inv(X: T.Buffer((4, 8), "float32"), Y: T.Buffer((4, 8), "float32")):
        S = T.sblock_alloc_buffer((4,))
        for i in range(4):
            for j in range(8):
                for k in range(8):
                    with T.sblock("S"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        with T.init():
                            S[vi] = T.float32(0.0)
                        S[vi] = S[vi] + X[vi, vk]
                with T.sblock("Y"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    Y[vi, vj] = X[vi, vj] - S[vi]

    return inv


@pytest.fixture(scope="session")
def int8_matmul():
    """A hand-written int8 x int8 -> int32 matmul (a quantized dense layer): dtypes int8 (inputs), int32 (output,
    casts)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def qmm(A: T.Buffer((16, 32), "int8"), B: T.Buffer((24, 32), "int8"), C: T.Buffer((16, 24), "int32")):
        for i, j, k in T.grid(16, 24, 32):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = 0
                C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi, vk]) * T.Cast("int32", B[vj, vk])

    return qmm


@pytest.fixture(scope="session")
def target_json():
    import json

    from perfcast.devices import get_device

    return get_device("local:threads=1").target_json and json.dumps(
        json.loads(get_device("local:threads=1").target_json))


@pytest.fixture(scope="session")
def mlp_dataset(tmp_path_factory):
    """A dataset of the bundled dataset's mlp records, tasks and network rows, its feature cache filled."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from perfcast import paths
    from perfcast.data.frame import records_frame
    from perfcast.data.schema import MeasureRecord, NetworkTaskRecord, TaskRecord, from_row
    from perfcast.data.store import Dataset
    from perfcast.features.cache import dataset_features

    src = Dataset(paths.bundled_dataset_dir())
    df = records_frame(src)
    # the mlp at batch size 1 (the bundled data also has it at batch size 2: other tasks)
    nets = [r for r in src.read("networks").to_pylist() if r["network"] == "mlp" and r["batch_size"] == 1]
    keys = {r["workload_key"] for r in nets}
    ids = pa.array(df.record_id[df.workload_key.isin(keys)].tolist())
    recs = src.read("records")
    recs = recs.filter(pc.is_in(recs["record_id"], ids)).to_pylist()
    tasks = [r for r in src.read("tasks").to_pylist() if r["workload_key"] in keys]
    out = tmp_path_factory.mktemp("mlpdata") / "d"
    ds = Dataset(out, create=True)
    first = recs[0]["workload_key"]  # two partitions: the first task's records, then the others'
    assert ds.add_records([from_row(MeasureRecord, r) for r in recs if r["workload_key"] == first]) >= 20
    assert ds.add_records([from_row(MeasureRecord, r) for r in recs if r["workload_key"] != first]) >= 40
    assert len(recs) >= 60
    assert ds.add_tasks([from_row(TaskRecord, r) for r in tasks]) == 3
    assert ds.add_network_tasks([from_row(NetworkTaskRecord, r) for r in nets]) == 3
    # computed here, in one process, so that the commands below read the cache instead of spawning workers
    dataset_features(ds, jobs=1, progress=False)
    return out, records_frame(ds)


@pytest.fixture(scope="session")
def model_of_this_cpu(tmp_path_factory):
    """A copy of the bundled model that counts this machine's `local` and `local:threads=1` among the devices it
    trained on: on a CPU the bundled data lacks, `perfcast predict` gives no interval (the model's errors on other
    devices do not hold there), and tests of the interval arithmetic need one wherever they run."""
    import json
    import shutil

    from perfcast import paths
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key

    out = tmp_path_factory.mktemp("model") / "bundled_here"
    shutil.copytree(paths.bundled_model_dir(), out)
    meta = json.loads((out / "model.json").read_text())
    for dev in ("local", "local:threads=1"):
        meta["info"]["train_devices"].setdefault(device_key(get_device(dev)), 1)
    (out / "model.json").write_text(json.dumps(meta))
    return out
