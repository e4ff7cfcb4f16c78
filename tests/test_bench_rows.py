"""The benchmark rows that measure jitops beside others (jitops/bench/neighbours.py) run, say
what they measured, and leave nothing behind. Timings are reported, never asserted."""

from __future__ import annotations

import pytest

from jitops.bench import neighbours


def test_busy_core_spins_and_is_gone_afterwards():
    with neighbours.BusyCore() as busy:
        assert busy.proc.poll() is None  # running
    assert busy.proc.poll() is not None  # killed and reaped


def test_neighbour_rows_run_and_render():
    said = []
    res = neighbours.run(0.02, said.append)
    c = res["contended"]
    assert c["jitops_s"] > 0 and c["other_s"] > 0 and c["ratio"] > 0
    assert c["met"] == (c["ratio"] >= neighbours.CONTENTION_TARGET)
    table = neighbours.markdown(res)
    assert "one core kept busy" in table
    if neighbours.torch is None:
        assert res["beside_torch"] == [] and "PyTorch not installed" in table
    else:
        assert [r["key"] for r in res["beside_torch"]] == ["beside_torch_1e+06",
                                                           "beside_torch_1e+07"]
        for r in res["beside_torch"]:
            assert set(r["slowdown"]) == {"jitops", "torch"}
            assert r["met"] == all(v <= neighbours.NEIGHBOUR_LIMIT
                                   for v in r["slowdown"].values())
        assert table.count("alternating with PyTorch") == 2
    assert any("busy core" in s for s in said)
    sp = res["sporadic"]
    assert [r["key"] for r in sp] == ["sporadic_sleep", "sporadic_busy",
                                      "sporadic_alone_1e+05", "sporadic_alone_1e+06"]
    for r in sp:
        assert r["median_s"]["jitops"] > 0 and "numpy" in r["ratios"]
        targets = neighbours.SPORADIC_TARGETS if "alone" not in r["key"] else \
            {"numpy": neighbours.SPORADIC_ALONE_TARGET}
        assert r["met"] == all(r["ratios"].get(k, float("inf")) >= t
                               for k, t in targets.items())
    assert "after 2 ms asleep" in table and "CPU time a process burns" in table
    assert table.count("in a process without PyTorch") == 2


def test_no_busy_process_outlives_an_error():
    with pytest.raises(RuntimeError):
        with neighbours.BusyCore() as busy:
            raise RuntimeError("boom")
    assert busy.proc.poll() is not None


def test_quiesce_waits_for_a_spinning_thread_and_not_for_a_sleeping_one():
    import threading
    import time

    from jitops.bench import harness

    if harness._running_threads(threading.get_native_id()) is None:
        pytest.skip("no /proc/self/task here: quiesce is a plain sleep")
    # threads of earlier tests still spinning (PyTorch's OpenMP team, after the neighbour
    # rows) go quiet first: this test is about its own spinner
    harness.quiesce(0.0, max_s=30.0)
    stop = threading.Event()

    def spin_then_stop(seconds):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            pass  # runnable (state R) the whole time: the GIL is switched, not waited on
        stop.wait()  # then asleep on a lock

    t = threading.Thread(target=spin_then_stop, args=(0.1,))
    t.start()
    try:
        waited = harness.quiesce(0.0, max_s=1.0)
        assert waited >= 0.05  # it saw the spinner and waited for it
        assert harness.quiesce(0.0, max_s=1.0) < 0.02  # asleep now: quiet at once
        assert harness.quiesce(0.005, max_s=1.0) >= 0.005  # never less than asked
        assert harness.quiesce(0.0, max_s=0.0) == pytest.approx(0.0, abs=0.01)
    finally:
        stop.set()
        t.join()


def test_cold_start_children_reuse_the_kernel_and_bytecode_caches():
    """The cold-start row's processes: the compiled one writes the kernel cache, the cached
    one only reads it (no miss, no new file), and the measured processes read Python's
    bytecode from the row's own directory instead of compiling jitops' sources (an editable
    install under PYTHONDONTWRITEBYTECODE=1 would compile them in every process)."""
    from jitops.bench import harness

    c = harness.cold_start(repeats=1)
    assert c["cached_cache_misses"] == 0 and c["cached_cache_hits"] > 0
    assert c["cache_files_after_first_run"] > 0
    assert c["cache_files_after_repeats"] == c["cache_files_after_first_run"]
    assert c["bytecode_cached"]
    assert 0 < c["import_s"] and 0 < c["compile_user_op_s"]


def test_a_run_waits_for_quiet_cpus_and_gives_up_at_its_limit(monkeypatch):
    """wait_for_quiet reads the CPUs' busy share (steal included) per window: it returns
    after the given number of quiet windows in a row, and after max_s however busy."""
    from jitops.bench import harness

    clock = [0.0]
    monkeypatch.setattr(harness.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(harness.time, "perf_counter", lambda: clock[0])

    def feed(busy_shares):
        state = {"busy": 0, "total": 0, "i": 0}

        def times():
            i = min(state["i"], len(busy_shares) - 1)
            state["i"] += 1
            state["busy"] += int(busy_shares[i] * 1000)
            state["total"] += 1000
            return state["busy"], state["total"]

        return times

    # the first reading is the baseline; busy, busy, quiet, busy (resets), quiet, quiet
    monkeypatch.setattr(harness, "_cpu_times", feed([0, 0.9, 0.5, 0.05, 0.6, 0.02, 0.0, 1.0]))
    q = harness.wait_for_quiet(max_s=20, window_s=0.5, busy_below=0.1, windows=2)
    assert q["quiet"] and q["waited_s"] == pytest.approx(3.0)
    assert q["busy_first"] == pytest.approx(0.9) and q["busy_last"] == pytest.approx(0.0)
    monkeypatch.setattr(harness, "_cpu_times", feed([0, 1.0]))  # never quiet
    clock[0] = 0.0
    q = harness.wait_for_quiet(max_s=4, window_s=0.5)
    assert not q["quiet"] and q["waited_s"] == pytest.approx(4.0)
    assert q["busy_first"] == q["busy_last"] == pytest.approx(1.0)
    monkeypatch.setattr(harness, "_cpu_times", lambda: None)  # no /proc/stat
    q = harness.wait_for_quiet()
    assert q["busy_first"] is None and q["waited_s"] == 0.0


@pytest.mark.parametrize("key", ["pdpd_axis1", "row_bcast", "sub_1e6_out"])
def test_every_contender_computes_what_jitops_computes(key):
    """The seeds' runtimes (Paddle's kernel, OpenVINO's compiled Subtract) and the others
    answer the row's question: a wrong contender would make its ratio meaningless."""
    import importlib.util

    import numpy as np

    from jitops.bench import cases

    case = next(c for c in cases.CASES if c.key == key)
    contenders, _ = case.build()
    dest = contenders["jitops"]()  # the row's out=
    want = dest.copy()
    for name, fn in contenders.items():
        dest[...] = np.nan
        got = fn()
        if isinstance(got, np.ndarray):
            pass
        elif hasattr(got, "detach"):  # a torch tensor (into out=)
            got = got.numpy()
        elif hasattr(got, "__dlpack__"):  # a new Paddle tensor
            got = np.from_dlpack(got)
        else:  # OpenVINO's results: written into the shared output
            got = dest
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
    for name in ("paddle", "openvino"):
        if importlib.util.find_spec(name) is not None:
            assert name in contenders, name


@pytest.mark.parametrize("n, offset", [(1000, 0), (4099, 1), (70_001, 3), (5, 0)])
def test_the_non_temporal_probe_computes_x_minus_y(n, offset):
    """The limit the '% of limit' column divides by comes from a loop that is right (heads,
    tails and misaligned starts included) and that really streams."""
    import numpy as np

    from jitops.bench import harness

    x = np.random.default_rng(1).random(n + offset, dtype=np.float32)[offset:]
    y = x[::-1].copy()
    o = np.full(n + offset, np.nan, np.float32)[offset:]
    harness.stream_sub_nt(x, y, o)
    np.testing.assert_array_equal(o, x - y)
    if harness.STREAMS:
        asm = harness.stream_sub_nt.inspect_asm(harness.stream_sub_nt.signatures[0])
        assert "vmovnt" in asm or "movnt" in asm


@pytest.mark.parametrize("n, offset", [(1, 0), (63, 1), (10_000, 3), (1 << 16, 0)])
def test_the_write_only_probe_fills_every_element(n, offset):
    """The write-only rows' limit (an op whose inputs are all broadcast) writes every element,
    misaligned starts included, with non-temporal stores where the CPU has them."""
    import numpy as np

    from jitops.bench import harness

    o = np.full(n + offset, np.nan, np.float32)[offset:]
    harness.stream_fill_nt(o, np.float32(1.5))
    assert (o == 1.5).all()
    if harness.STREAMS:
        asm = harness.stream_fill_nt.inspect_asm(harness.stream_fill_nt.signatures[0])
        assert "vmovnt" in asm or "movnt" in asm
    fill = harness.limit_contender(4 * n, writes_only=True)
    fill()  # its own buffer, of the row's bytes


def test_the_cuda_section_renders_call_and_kernel_times():
    """The CUDA table from a result (no GPU needed): call and kernel times, the contenders'
    ratios to jitops, the kernel's share of the peak; a missing GPU says why."""
    from jitops.bench import cuda_bench

    row = {"title": "subtract 1e7 float32", "median_s": {"jitops": 4e-4, "torch": 4e-5},
           "kernel_s": {"jitops": 3e-5, "torch": 3.3e-5}, "fraction_of_peak": 0.83,
           "ratios": {"torch": 0.1}, "kernel_ratios": {"torch": 1.1}}
    md = cuda_bench.markdown({"available": True, "device": "GPU", "peak_GBps": 4800.0,
                              "rows": [row]})
    line = md.splitlines()[-1]
    assert line == ("| subtract 1e7 float32 | 400.0 µs | 30.0 µs | 83% | - | - "
                    "| 40.0 µs (0.10×) | 33.0 µs (1.10×) |")
    assert cuda_bench.markdown({"available": False, "reason": "no GPU"}) == \
        "CUDA: not run (no GPU)."
    failed = {"key": "k", "title": "sum_to", "error": "TypeError: why"}
    md = cuda_bench.markdown({"available": True, "device": "GPU", "peak_GBps": 4800.0,
                              "rows": [row, failed]})
    assert md.splitlines()[-1] == "| sum_to | failed: TypeError: why | - | - | - | - | - | - |"


@pytest.mark.parametrize("key", ["floordiv_i32_scalar", "floordiv_i8_scalar", "power_f32",
                                 "power_c128", "greater_f32_1e4", "ov_divide_pdpd",
                                 "remainder_i32", "remainder_f32"])
def test_the_family_rows_contenders_compute_what_jitops_computes(key):
    """Each contender of the binary-family rows (a new result each) gives jitops' answer:
    PyTorch's, Paddle's and OpenVINO's own ops."""
    import numpy as np

    from jitops.bench import cases

    case = next(c for c in cases.CASES if c.key == key)
    contenders, _ = case.build()
    want = contenders["jitops"]()
    for name, fn in contenders.items():
        got = fn()
        if hasattr(got, "to_dict"):  # OpenVINO's results
            got = next(iter(got.to_dict().values()))
        elif hasattr(got, "detach"):
            got = got.numpy()
        elif not isinstance(got, np.ndarray):
            got = np.from_dlpack(got)
        dt = np.complex128 if want.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(np.asarray(got).astype(dt), want.astype(dt), rtol=2e-6,
                                   err_msg=name)


def _as_numpy(v):
    import numpy as np

    if hasattr(v, "detach"):
        return v.detach().numpy()
    if hasattr(v, "numpy"):
        return v.numpy()
    return np.asarray(v)


@pytest.mark.parametrize("key", ["sum_to_channels", "add_grad_channels", "mul_grad_channels",
                                 "sum_to_bias", "sum_to_bias_rows", "divmod_1e3"])
def test_the_reduction_rows_contenders_compute_what_jitops_computes(key):
    """The sum_to and gradient rows: every contender (NumPy, PyTorch, Paddle's own
    backward) gives jitops' results, within float32 summation error."""
    import numpy as np

    from jitops.bench import cases

    case = next(c for c in cases.CASES if c.key == key)
    contenders, _ = case.build()
    want = contenders["jitops"]()
    want = want if isinstance(want, tuple) else (want,)
    for name, fn in contenders.items():
        got = fn()
        got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            g = _as_numpy(g).astype(np.float64).reshape(w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3 * np.abs(w).max(),
                                       err_msg=name)
