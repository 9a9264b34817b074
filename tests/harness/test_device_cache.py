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
