"""jitops on Dask arrays: lazy, chunk by chunk, the same answers as on NumPy inputs.

Dask is part of the ``test`` extra, so these always run in CI; the cluster test starts a real
``distributed.LocalCluster`` with two worker processes on loopback.
"""

import subprocess
import sys
import textwrap

import dask
import dask.array as da
import distributed
import numpy as np
import pytest

import jitops

from .helpers import OPS


def _pair(rng, xs, ys, xc, yc, dtype="float32"):
    x = (rng.standard_normal(xs) * 10).astype(dtype)
    y = (rng.standard_normal(ys) * 10).astype(dtype)
    return x, y, da.from_array(x, chunks=xc), da.from_array(y, chunks=yc)


CASES = [  # x shape, y shape, x chunks, y chunks, broadcast, axis
    ((6, 8, 10), (8,), (2, 3, 5), 3, "pdpd", 1),
    ((6, 8, 10), (8, 10), (4, 8, 3), (5, 4), "pdpd", 1),
    ((6, 8, 10), (6, 1), (3, 4, 10), (2, 1), "pdpd", 0),
    ((6, 8, 10), (10,), (3, 3, 3), 4, "numpy", -1),
    ((7, 1, 5), (1, 4, 1), (3, 1, 2), (1, 3, 1), "numpy", -1),
    ((6, 8), (6, 8), (4, 5), (3, 8), "none", -1),
]


@pytest.mark.parametrize("xs,ys,xc,yc,mode,axis", CASES)
@pytest.mark.parametrize("op", OPS)
def test_dask_matches_numpy_inputs(op, xs, ys, xc, yc, mode, axis, rng):
    x, y, dx, dy = _pair(rng, xs, ys, xc, yc)
    expect = getattr(jitops, op)(x, y, broadcast=mode, axis=axis)
    got = getattr(jitops, op)(dx, dy, broadcast=mode, axis=axis)
    assert isinstance(got, da.Array)
    assert got.shape == expect.shape and got.dtype == expect.dtype
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(got.compute(), expect)


def test_paddle_names_act_dtypes_and_mixed_operands(rng):
    x, y, dx, dy = _pair(rng, (5, 6, 7), (6,), (2, 3, 7), 2)
    with dask.config.set(scheduler="threads"):
        r = jitops.elementwise_sub(dx, dy, axis=1, act="relu")
        np.testing.assert_array_equal(r.compute(), jitops.elementwise_sub(x, y, axis=1, act="relu"))
        # a NumPy operand and a weak Python scalar next to a Dask one
        np.testing.assert_array_equal(jitops.multiply(dx, y, broadcast="pdpd", axis=1).compute(),
                                      jitops.multiply(x, y, broadcast="pdpd", axis=1))
        r = jitops.add(dx, 2.5)
        assert r.dtype == np.float32
        np.testing.assert_array_equal(r.compute(), x + np.float32(2.5))
        # integer operands: divide promotes to float64, elementwise_div truncates
        xi, yi = (x * 10).astype(np.int32), np.arange(1, 7, dtype=np.int32)
        dxi = da.from_array(xi, chunks=(2, 2, 7))
        r = jitops.divide(dxi, yi, broadcast="pdpd", axis=1)
        assert r.dtype == np.float64
        np.testing.assert_array_equal(r.compute(), jitops.divide(xi, yi, broadcast="pdpd", axis=1))
        r = jitops.elementwise_div(dxi, yi, axis=1)
        assert r.dtype == np.int32
        np.testing.assert_array_equal(r.compute(), jitops.elementwise_div(xi, yi, axis=1))
        # float16 and fmin's NaN rule survive the chunking
        h = np.array([[1, np.nan, 3], [np.nan, np.nan, 0]], np.float16)
        g = np.array([np.nan, 2, np.nan], np.float16)
        r = jitops.fmin(da.from_array(h, chunks=(1, 2)), g)
        np.testing.assert_array_equal(r.compute(), jitops.fmin(h, g))


def test_errors_are_raised_at_call_time(rng):
    _, _, dx, dy = _pair(rng, (6, 8, 10), (7,), (2, 4, 5), 7)
    with pytest.raises(ValueError, match=r"pdpd broadcast: X shape \(6,8,10\) and Y shape \(7,\)"):
        jitops.subtract(dx, dy, broadcast="pdpd", axis=1)  # nothing computed
    with pytest.raises(TypeError, match="out= is not supported with Dask"):
        jitops.subtract(dx, dx, out=np.empty((6, 8, 10), np.float32))
    with pytest.raises(TypeError, match="act='tanh' needs a floating-point result"):
        jitops.add(dx.astype(np.int16), 1, act="tanh")
    with pytest.raises(TypeError, match="boolean subtract"):
        jitops.subtract(dx > 0, dx > 1)
    with pytest.raises(TypeError, match="device='cuda' is not supported with Dask"):
        jitops.add(dx, dx, device="cuda")
    with pytest.raises(ValueError, match="broadcast"):
        jitops.add(dx, dx, broadcast="bidirectional")


def test_chunks_run_jitops_kernels(rng, monkeypatch):
    from jitops import dispatch

    calls = []
    real = dispatch.chunk

    def spy(*args):
        if np.size(args[3]):  # Dask also calls it once on empty "meta" arrays, for the type
            calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(dispatch, "chunk", spy)
    x, y, dx, dy = _pair(rng, (8, 9), (9,), (4, 3), 3)
    r = jitops.maximum(dx, dy)
    assert calls == []  # lazy
    with dask.config.set(scheduler="sync"):
        r.compute()
    assert calls == ["maximum"] * 6  # one call per output block


def test_dask_is_never_imported_by_jitops():
    code = textwrap.dedent("""
        import sys, numpy as np, jitops
        jitops.subtract(np.ones((3, 4)), np.ones(4))
        jitops.add([1, 2], 3)
        print("dask" in sys.modules, "distributed" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def _kernels_used() -> bool:
    """On a worker: jitops was imported there and launched kernels (its fast-path cache)."""
    api = sys.modules.get("jitops.cpu.repeat.memo")
    return api is not None and len(api.FAST) > 0


def _thread_count():
    from jitops.cpu.threads import parallel

    return jitops.get_num_threads(), parallel.info()["num_threads_source"]


def test_two_process_local_cluster():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       worker_dashboard_address=None, silence_logs=40)
    client = distributed.Client(cluster)
    try:
        assert len(client.scheduler_info()["workers"]) == 2
        rng = da.random.default_rng(42)
        # generated chunkwise on the workers: 40 chunks of X, 4 of Y
        dx = rng.random((2000, 1200), chunks=(250, 300), dtype=np.float32)
        dy = rng.random((1200,), chunks=300, dtype=np.float32)
        dx, dy = client.persist([dx, dy])
        r = jitops.subtract(dx, dy, broadcast="pdpd", axis=1, act="relu")
        assert r.numblocks == (8, 4)
        # a sample, checked against NumPy
        xs, ys, rs = client.compute([dx[:300, 250:700], dy[250:700], r[:300, 250:700]],
                                    sync=True)
        np.testing.assert_array_equal(rs, np.maximum(xs - ys, 0))
        # whole-array checks by reductions
        total, count = client.compute([r.sum(dtype=np.float64), (r > 0).sum()], sync=True)
        x_all, y_all = client.compute([dx, dy], sync=True)
        ref = np.maximum(x_all - y_all, 0)
        assert count == np.count_nonzero(ref)
        assert total == pytest.approx(ref.sum(dtype=np.float64), rel=1e-9)
        # the chunks ran in the worker processes, with jitops' kernels
        ran = client.run(_kernels_used)
        assert len(ran) == 2 and all(ran.values()), ran
        # a nanny sets OMP_NUM_THREADS=1 in its workers so that libraries do not multiply
        # threads by workers: jitops honours it as PyTorch and numexpr do
        threads = client.run(_thread_count)
        assert set(threads.values()) == {(1, "OMP_NUM_THREADS")}, threads
    finally:
        client.close()
        cluster.close()
    assert cluster.status.name == "closed"
