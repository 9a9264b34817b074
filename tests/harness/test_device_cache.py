"""The device-ceiling cache (roofkit.harness.device.load_ceilings): a damaged, wrongly shaped or
foreign file is ignored with one warning and measured anew; a directory that cannot be written
costs a measurement, never the run. The GPU is simulated (device_info, measure_ceilings), so this
runs on CPU."""

import dataclasses
import json
import warnings

import pytest
import torch

from roofkit.harness import cache
from roofkit.harness import device as dev

INFO = dev.DeviceInfo(name="Test GPU", sm_count=132, l2_bytes=50 << 20, total_memory_bytes=1 << 37, capability="9.0",
                      driver="1.0")


def _ceilings() -> dev.Ceilings:
    return dev.Ceilings(gpu=INFO.name, driver=INFO.driver, torch=torch.__version__, copy_gbps=4000.0, read_gbps=4200.0,
                        matmul_tflops={"bf16": 700.0, "fp32": 50.0}, l2_bytes=INFO.l2_bytes, sm_count=INFO.sm_count,
                        measured_at="2026-01-01T00:00:00+00:00", method="test")


GOOD = dataclasses.asdict(_ceilings())
DAMAGED = {
    "truncated": json.dumps(GOOD)[:60],
    "not UTF-8": b"\xff\xfe\x00{",
    "empty": "",
    "a list": json.dumps([GOOD]),
    "a missing field": json.dumps({k: v for k, v in GOOD.items() if k != "copy_gbps"}),
    "an unknown field": json.dumps({**GOOD, "bogus": 1}),
    "a mistyped field": json.dumps({**GOOD, "matmul_tflops": {"bf16": "fast"}}),
    "another torch": json.dumps({**GOOD, "torch": "0.0.1"}),
}


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """(the ceilings file of the simulated GPU, a list growing by one per measurement)."""
    monkeypatch.setenv("ROOFKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dev, "device_info", lambda device=None: INFO)
    measured = []

    def measure(device=None):
        measured.append(1)
        return _ceilings()

    monkeypatch.setattr(dev, "measure_ceilings", measure)
    return dev._cache_path(INFO), measured


def _write_raw(path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def _cache_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, cache.CacheWarning)]


def test_ceilings_are_measured_once_then_read(gpu):
    path, measured = gpu
    assert dev.load_ceilings() == _ceilings() and measured == [1]
    assert json.loads(path.read_text()) == GOOD
    assert dev.load_ceilings() == _ceilings() and measured == [1]
    assert dev.load_ceilings(refresh=True) == _ceilings() and measured == [1, 1]


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_ceilings_file_costs_one_warning_and_a_measurement(gpu, damage):
    path, measured = gpu
    _write_raw(path, DAMAGED[damage])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dev.load_ceilings(measure=False) is None
        assert dev.load_ceilings() == _ceilings()
        assert dev.load_ceilings() == _ceilings()  # read back from the rewritten file
    msgs = _cache_warnings(caught)
    assert len(msgs) == 1 and str(path) in msgs[0], msgs
    assert measured == [1] and json.loads(path.read_text()) == GOOD


def test_an_unwritable_cache_directory_costs_a_measurement_only(gpu, monkeypatch):
    path, measured = gpu

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(cache, "_write", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dev.load_ceilings() == _ceilings()
        assert dev.load_ceilings() == _ceilings()
    assert measured == [1, 1] and not path.exists() and not _cache_warnings(caught)


def test_gemm_roof_is_the_best_rate_of_torch_and_roofkit_over_the_shapes(monkeypatch):
    # The matrix roof: the best median rate over every (shape, provider) timed, every rate kept;
    # a roofkit GEMM that disagrees with PyTorch's is not timed (it cannot raise the roof).
    import importlib
    from types import SimpleNamespace

    timing = importlib.import_module("roofkit.harness.timing")
    mm = importlib.import_module("roofkit.ops.matmul")
    medians = {("torch", 16): 2.0, ("roofkit", 16): 1.0, ("torch", 32): 4.0, ("roofkit", 32): 16.0}
    timed = []

    def fake_time(fns, device=None, l2=None, rep_ms=None):
        n = fns["torch"]().shape[1]
        timed.append(sorted(fns))
        return {name: SimpleNamespace(median_ms=medians[(name, n)]) for name in fns}

    monkeypatch.setattr(timing, "time_providers", fake_time)
    monkeypatch.setattr(mm, "matmul", lambda a, b: (a.float() @ b.float()).to(a.dtype))
    best, rates = dev._gemm_tflops("bf16", torch.device("cpu"), shapes=((8, 16, 4), (8, 32, 4)))
    assert timed == [["roofkit", "torch"], ["roofkit", "torch"]]
    assert rates == {"torch 8x16x4": 2 * 8 * 16 * 4 / 2e-3 / 1e12, "roofkit 8x16x4": 2 * 8 * 16 * 4 / 1e-3 / 1e12,
                     "torch 8x32x4": 2 * 8 * 32 * 4 / 4e-3 / 1e12, "roofkit 8x32x4": 2 * 8 * 32 * 4 / 16e-3 / 1e12}
    assert best == max(rates.values()) == rates["roofkit 8x16x4"]
    timed.clear()
    monkeypatch.setattr(mm, "matmul", lambda a, b: torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype))
    best, rates = dev._gemm_tflops("bf16", torch.device("cpu"), shapes=((8, 16, 4),))
    assert timed == [["torch"]] and list(rates) == ["torch 8x16x4"]


def test_gemm_roof_repeats_rounds_until_two_in_a_row_agree(monkeypatch):
    # Clocks settle under load: rounds repeat until two best rates in a row agree within
    # GEMM_AGREE of the larger (or GEMM_ROUNDS ran); the roof is the best rate of every round,
    # per key too.
    def rounds_of(*tops):
        seq = iter(tops)

        def one_round(name, device, shapes):
            t = next(seq)
            return t if t is None or isinstance(t, tuple) else (t, {"torch s": t})

        monkeypatch.setattr(dev, "_gemm_tflops", one_round)

    rounds_of((700.0, {"torch s": 700.0, "roofkit s": 650.0}), (760.0, {"torch s": 690.0, "roofkit s": 760.0}),
              (755.0, {"torch s": 755.0, "roofkit s": 700.0}), (999.0, {"torch s": 999.0}))
    roof, best, rounds = dev._gemm_roof("bf16", torch.device("cpu"))
    assert (roof, rounds) == (760.0, 3) and best == {"torch s": 755.0, "roofkit s": 760.0}
    assert dev.GEMM_AGREE == 0.01
    rounds_of(1000.0, 990.0, 5.0)  # exactly 1 % of the larger apart: they agree
    assert dev._gemm_roof("bf16", torch.device("cpu"))[2] == 2
    rounds_of(990.0, 1000.0, 5.0)  # (the tolerance is of the larger, whichever came first)
    assert dev._gemm_roof("bf16", torch.device("cpu"))[2] == 2
    rounds_of(1000.0, 985.0, 700.0, 700.0 * 1.015, 5.0)  # 1.5 % apart: not yet
    assert dev._gemm_roof("bf16", torch.device("cpu")) == (1000.0, {"torch s": 1000.0}, 4)
    rounds_of(*[100.0 * (i + 1) for i in range(dev.GEMM_ROUNDS + 2)])
    assert dev._gemm_roof("bf16", torch.device("cpu")) == (100.0 * dev.GEMM_ROUNDS, {"torch s": 100.0 * dev.GEMM_ROUNDS},
                                                            dev.GEMM_ROUNDS)
    rounds_of(None)
    assert dev._gemm_roof("fp8_e4m3", torch.device("cpu")) is None
    rounds_of(700.0, 760.0, None)  # a later round that cannot run keeps the rounds before it
    assert dev._gemm_roof("bf16", torch.device("cpu")) == (760.0, {"torch s": 760.0}, 2)


def test_read_roof_kernels_each_read_the_input_and_roofkits_must_agree(monkeypatch):
    # Every read kernel reads all of the input (its result is the input's sum or row maxima, row
    # by row); roofkit's own are dropped where they disagree with PyTorch's (they cannot raise
    # the roof), even when they read most of every row.
    import importlib

    src = dev._read_source(4 * 3 * (1 << 17), torch.device("cpu"))  # 3 fp32 rows, 6 bf16 rows
    assert src.dtype == torch.float32 and src.numel() == 3 << 17
    assert bool(src.isfinite().all()) and bool(src.view(torch.bfloat16).isfinite().all())
    calls = dev._read_calls(src)
    assert sorted(calls) == ["roofkit.amax bf16", "roofkit.amax fp32", "roofkit.sum", "torch.amax bf16",
                             "torch.amax fp32", "torch.sum"]
    torch.testing.assert_close(calls["roofkit.sum"]().double(), src.double().sum(), rtol=1e-4, atol=1e-2)
    for who in ("roofkit", "torch"):
        assert torch.equal(calls[f"{who}.amax fp32"](), src.view(3, -1).amax(dim=1))
        assert torch.equal(calls[f"{who}.amax bf16"](), src.view(torch.bfloat16).view(6, -1).amax(dim=1))
    red = importlib.import_module("roofkit.ops.reduce")
    real_amax, real_sum = red.amax, red.sum
    wrong = {
        "zeros": lambda x, dim: torch.zeros_like(torch.amax(x, dim=dim)),
        "15/16 of each row": lambda x, dim: real_amax(x[..., : x.shape[-1] * 15 // 16].contiguous(), dim=dim),
        "the first row only": lambda x, dim: real_amax(x[:1], dim=dim).expand(x.shape[0]),
    }
    for name, fn in wrong.items():
        monkeypatch.setattr(red, "amax", fn)
        assert sorted(dev._read_calls(src)) == ["roofkit.sum", "torch.amax bf16", "torch.amax fp32", "torch.sum"], name
    monkeypatch.setattr(red, "amax", real_amax)
    monkeypatch.setattr(red, "sum", lambda x: real_sum(x[: x.numel() // 2]))
    assert "roofkit.sum" not in dev._read_calls(src)
    small = dev._read_source(4 * 3000, torch.device("cpu"))  # not whole rows of 2**17: one row
    assert torch.equal(dev._read_calls(small)["torch.amax fp32"](), small.amax().reshape(1))


def test_measured_ceilings_take_the_best_read_kernel_and_the_settled_gemm_roofs(monkeypatch):
    # measure_ceilings on a simulated GPU: the read roof is the fastest read kernel's rate, each
    # read kernel's rate and each dtype's rounds are kept in extra, and the GEMM roofs come from
    # _gemm_roof (the rounds), not a single _gemm_tflops.
    import importlib
    from types import SimpleNamespace

    timing = importlib.import_module("roofkit.harness.timing")
    monkeypatch.setattr(dev, "device_info", lambda device=None: INFO)
    medians = {"copy": 4.0, "torch.sum": 2.0, "torch.amax fp32": 1.6, "torch.amax bf16": 1.8, "roofkit.sum": 1.9,
               "roofkit.amax fp32": 1.7, "roofkit.amax bf16": 1.25}
    monkeypatch.setattr(timing, "time_providers",
                        lambda fns, device=None, rep_ms=None, **kw: {k: SimpleNamespace(median_ms=medians[k]) for k in fns})
    monkeypatch.setattr(dev, "_gemm_tflops", lambda *a, **k: pytest.fail("_gemm_tflops called outside _gemm_roof"))
    monkeypatch.setattr(dev, "_gemm_roof", lambda name, device, shapes: None if name == "fp8_e4m3" else
                        (100.0 + len(name), {f"torch {name}": 100.0 + len(name)}, 3))
    nbytes = 4 * (1 << 17)
    c = dev.measure_ceilings("cpu", bytes_=nbytes)
    rate = {k: nbytes / (v * 1e-3) / 1e9 for k, v in medians.items()}
    assert c.read_gbps == rate["roofkit.amax bf16"] == max(c.extra["read_gbps"].values())
    assert c.extra["read_gbps"] == {k: v for k, v in rate.items() if k != "copy"}
    assert c.copy_gbps == 2 * rate["copy"]
    assert c.matmul_tflops == {n: 100.0 + len(n) for n in ("bf16", "fp16", "tf32", "fp32", "int8")}
    assert c.extra["gemm_rounds"] == {n: 3 for n in c.matmul_tflops}
    assert "two rounds in a row" in c.method and "roofkit.amax bf16" in c.method


def test_ceilings_without_an_fp32_rate_are_not_used(gpu):
    # fp32 is the compute roof of every op off the matrix units: a file without it is measured anew.
    path, measured = gpu
    bad = dict(GOOD, matmul_tflops={"bf16": 700.0})
    _write_raw(path, json.dumps(bad))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        dev.load_ceilings()
    assert measured == [1]


def test_ceilings_measured_another_way_are_not_read(gpu):
    # The method is in the file's name: ceilings cached by an older method are measured anew.
    path, measured = gpu
    assert f"method{dev.CEILINGS_METHOD}" in path.name
    old = path.with_name(path.name.replace(f"method{dev.CEILINGS_METHOD}", f"method{dev.CEILINGS_METHOD - 1}"))
    _write_raw(old, json.dumps(GOOD))
    dev.load_ceilings()
    assert measured == [1]
