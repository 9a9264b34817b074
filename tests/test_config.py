"""roofkit.config: every op family's tunables are listed, read, overridden for a block (kept plans
dropped on the way in and out) and put back; bad names and types raise naming the op."""

import importlib

import pytest
import torch

import roofkit
import roofkit.config as config


def test_every_family_lists_tunables_its_module_defines():
    for op, module in config.families().items():
        mod = importlib.import_module(module)
        assert mod.TUNABLES and len(set(mod.TUNABLES)) == len(mod.TUNABLES), op
        values = config.tunables(op)
        assert list(values) == list(mod.TUNABLES)
        for name, value in values.items():
            assert name.isupper() and isinstance(value, (bool, int, float, str)), (op, name, value)
    assert set(config.families()) <= set(roofkit.__all__)


def test_override_sets_restores_nests_and_drops_plans(device, monkeypatch):
    softmax = importlib.import_module("roofkit.ops.softmax")
    seen = []
    real = softmax._long_row_config

    def counted(*args):
        seen.append(args)
        return real(*args)
    monkeypatch.setattr(softmax, "_long_row_config", counted)
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(0)).to(device)
    want = torch.softmax(x.double(), -1)
    for _ in range(3):  # the one-pass path, planned from the second call
        roofkit.softmax(x, -1)
    assert not seen
    before = config.tunables("softmax")
    with config.override("softmax", ONE_PASS_MAX_N=64, ONLINE_BLOCK_N=128) as now:
        assert now["ONE_PASS_MAX_N"] == 64 and softmax.ONE_PASS_MAX_N == 64
        with config.override("log_softmax", ONLINE_BLOCK_N=256):  # the same family: nests
            assert config.tunables("softmax")["ONLINE_BLOCK_N"] == 256
        assert softmax.ONLINE_BLOCK_N == 128
        got = roofkit.softmax(x, -1)  # the kept plan is not used: the long-row path runs
        assert seen and seen[-1][0] == 300
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    assert config.tunables("softmax") == before
    n = len(seen)
    roofkit.softmax(x, -1)
    assert len(seen) == n  # back on the one-pass path


def test_override_refuses_unknown_names_types_and_ops():
    with pytest.raises(ValueError, match=r"roofkit\.config\.override: softmax has no tunable 'BLOCK'; its tunables: "
                                         r"ONE_PASS_MAX_N"):
        with config.override("softmax", BLOCK=1):
            pass
    with pytest.raises(TypeError, match=r"softmax's ONE_PASS_MAX_N must be of type int .* got str '4'"):
        with config.override("softmax", ONE_PASS_MAX_N="4"):
            pass
    with pytest.raises(TypeError, match=r"ATOMIC_DQ must be of type bool"):
        with config.override("flash_attention", ATOMIC_DQ=1):
            pass
    with pytest.raises(ValueError, match=r"no tunables for op 'matmul'.*config_override"):
        config.tunables("matmul")
    before = config.tunables("softmax")
    with pytest.raises(RuntimeError, match="inside"):
        with config.override("softmax", SPLIT_SEG=1024):
            raise RuntimeError("inside")
    assert config.tunables("softmax") == before  # put back after an exception too


def test_override_sets_nothing_when_one_value_cannot_be_converted():
    before = config.tunables("scatter_add")
    with pytest.raises(ValueError, match=r"scatter_add's FP32_ACCUMULATE_MIN_PER_DEST must fit in a float"):
        with config.override("scatter_add", ATOMIC_WARPS=2, FP32_ACCUMULATE_MIN_PER_DEST=10**400):
            pass
    assert config.tunables("scatter_add") == before


@pytest.mark.parametrize("op, name, value, words", [
    ("sum", "COL_SEGMENT_BYTES", 96, "COL_SEGMENT_BYTES must be a power of two >= 1; got 96"),
    ("sum", "COL_SEGMENT_BYTES", 0, "COL_SEGMENT_BYTES must be a power of two >= 1; got 0"),
    ("mean", "TILE_BYTES", 12000, "TILE_BYTES must be a power of two >= 1; got 12000"),
    ("dequantize", "DEQUANTIZE_INNER", 3, "must be a power of two >= 1; got 3"),
])
def test_block_size_tunables_that_are_no_power_of_two_are_refused_by_name(op, name, value, words, device):
    x = torch.randn(64, 24, device=device)
    with config.override(op, **{name: value}):
        with pytest.raises(ValueError, match=words):
            if op == "dequantize":
                roofkit.dequantize(torch.ones(8, 16, dtype=torch.int8, device=device), torch.ones((), device=device),
                                   torch.zeros((), dtype=torch.int32, device=device))
            else:
                getattr(roofkit, op)(x, dim=0)
