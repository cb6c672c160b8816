import os

import pytest

os.environ.setdefault("TVM_NUM_THREADS", "1")


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
def target_json():
    import json

    from perfcast.devices import get_device

    return get_device("local:threads=1").target_json and json.dumps(
        json.loads(get_device("local:threads=1").target_json))
