"""embedding_bag properties the registry-wide test cannot state."""

import dataclasses
import importlib

import pytest
import torch
import torch.nn.functional as F

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op
from roofkit.ops.embedding_bag import SPEC, embedding_bag

eb = importlib.import_module("roofkit.ops.embedding_bag")

pytestmark = pytest.mark.embedding_bag

KERNELS = ("_embedding_bag_fwd_kernel", "_embedding_bag_steps_fwd_kernel", "_embedding_bag_bwd_kernel",
           "_embedding_bag_bwd_fixup_kernel", "_embedding_bag_zero_rows_kernel", "_embedding_bag_psw_grad_kernel")


def _weight(v, d, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(v, d, generator=g).to(device=device, dtype=dtype)


def _spy_launches(monkeypatch):
    """(kernel, grid, compile-time arguments) of every launch, in order: a shrunk case cannot
    silently take another path."""
    used = []
    launch = eb.cached_launch

    def spy(cache, fn, grid, **consts):
        used.append((fn, grid, consts))
        return launch(cache, fn, grid, **consts)

    monkeypatch.setattr(eb, "cached_launch", spy)
    return used


def _shrunk(name, new_name, shape=None, dim=None):
    """The spec case ``name`` with fewer bags / indices (the interpreter runs every step of 2
    indices) or a narrower table (every 8-column block); its own size runs in the registry-wide
    test."""
    c = SPEC.case(name)
    params = {**c.params, "shape": shape or c["shape"], "dim": dim or c["dim"]}
    return dataclasses.replace(c, name=new_name, params=params)


def _loop_reference(inp, weight, offsets, mode, psw=None, padding_idx=None):
    """Bag by bag in float64, written out by hand (independent of torch's embedding_bag)."""
    w = weight.double()
    if inp.dim() == 2:
        bags = [inp[b].tolist() for b in range(inp.shape[0])]
        ps = [psw[b].tolist() for b in range(inp.shape[0])] if psw is not None else None
    else:
        starts = offsets.tolist() + [inp.numel()]
        bags = [inp[starts[b]:starts[b + 1]].tolist() for b in range(offsets.numel())]
        ps = [psw[starts[b]:starts[b + 1]].tolist() for b in range(offsets.numel())] if psw is not None else None
    out = torch.zeros(len(bags), w.shape[1], dtype=torch.float64)
    for b, bag in enumerate(bags):
        rows = [(j, i) for j, i in enumerate(bag) if i != padding_idx]
        if not rows:
            continue
        vals = torch.stack([w[i] * (ps[b][j] if ps else 1.0) for j, i in rows])
        out[b] = {"sum": vals.sum(0), "mean": vals.mean(0), "max": vals.max(0).values}[mode]
    return out


# ----------------------------------------------------------------------------- against the reference


QUICK = ["tiny_2d_sum_3x5", "ragged_mean_empty_bags_9x4", "ragged_max_ties_9x4", "psw_sum_ragged_7x4",
         "padding_mean_6x5", "repeated_indices_sum_5x8", "include_last_offset_mean_6x3", "no_bags_0x4",
         "no_indices_3x0"]


def test_embedding_bag_matches_float64_reference(device):
    # The quick cases in float32, one seed: a fast signal from this file alone. The registry-wide
    # test runs every one of them in every dtype, with three seeds.
    report = verify_op(SPEC, cases=QUICK, seeds=1, dtypes=(torch.float32,), device=device)
    assert report.rows and report.passed, report.summary()


def test_embedding_bag_span_boundaries_fixup_and_column_blocks(monkeypatch, tunables, device):
    # Tiny tiles: bags walked 2 indices per step over 8-column blocks; the sorted entries cut in
    # spans of 8 (2 chunks of 4), so runs of repeated indices cross many spans and the fix-up
    # kernel walks its partials 2 at a time (several steps of its loop).
    monkeypatch.setattr(eb, "_fwd_config", lambda *a: eb.FwdConfig(2, 8, 1, 3))
    monkeypatch.setattr(eb, "_fwd_single_config", lambda *a: eb.FwdConfig(2, 8, 1))
    monkeypatch.setattr(eb, "_bwd_config", lambda n, d, dev: eb.BwdConfig(4, 8, 8, 1))
    tunables("embedding_bag", FIXUP_BLOCK_P=2)
    # One seed, the max ties in float16 (16-bit stores) and the others in float32, column tails
    # at dim 13 over 3 indices a bag (the spec's dim 37, its other dtypes and its three seeds run
    # in the registry-wide test).
    used = _spy_launches(monkeypatch)
    cases = ["repeated_indices_sum_5x8", "repeated_indices_mean_2d_5x8",
             dataclasses.replace(SPEC.case("ragged_max_ties_9x4"), dtypes=(torch.float16,)),
             "psw_padding_2d_5x4", "powerlaw_sum_8x6", _shrunk("odd_dim_37_sum_4x5", "odd_dim_13_sum_4x3", (4, 3), 13),
             "grad_transposed_sum_6x3"]
    report = verify_op(SPEC, cases=cases, seeds=1, device=device)
    assert report.passed, report.summary()
    assert len(report.rows) == len(cases)
    # Spans of 8 sorted entries (5 of them for 40 indices), the fix-up walking 2 partials a step.
    bwd = [(grid, c) for fn, grid, c in used if fn is eb._embedding_bag_bwd_kernel]
    assert bwd and all(c["BLOCK_K"] == 4 and c["BLOCK_D"] == 8 for _, c in bwd) and max(g[0] for g, _ in bwd) >= 5
    assert any(fn is eb._embedding_bag_bwd_fixup_kernel and c["BLOCK_P"] == 2 for fn, _, c in used)


@pytest.mark.parametrize("cfg", [(4, 8, 4, 1), (8, 4, 16, 1), (2, 8, 6, 2)])
def test_embedding_bag_hot_row_over_many_spans_is_deterministic(cfg, monkeypatch, tunables, device):
    # Spans of 4 to 16 sorted entries walked 2 to 8 at a time (the next chunk's entries loaded
    # ahead), column blocks of 4 or 8; the fix-up walks the hot row's partials 2 at a time.
    monkeypatch.setattr(eb, "_bwd_config", lambda n, d, dev: eb.BwdConfig(*cfg))
    tunables("embedding_bag", FIXUP_BLOCK_P=2)
    w = _weight(10, 8, device).requires_grad_(True)
    inp = torch.tensor([3] * 37 + [1, 4, 3, 3, 7], device=device)  # index 3 over ~10 spans of 4
    off = torch.tensor([0, 5, 5, 20, 33], device=device)
    g = torch.randn(5, 8, generator=torch.Generator().manual_seed(1)).to(device)
    grads = [torch.autograd.grad(embedding_bag(inp, w, off, mode="sum"), w, g)[0] for _ in range(2)]
    assert torch.equal(grads[0], grads[1])
    w64 = w.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.embedding_bag(inp, w64, off, mode="sum"), w64, g.double())
    torch.testing.assert_close(grads[0].double(), ref, rtol=1e-5, atol=1e-5)
    untouched = [r for r in range(10) if r not in (1, 3, 4, 7)]
    assert (grads[0][untouched] == 0).all()


# Bag counts that 4 bags per program do not divide (bags of 3 to 5: several steps of 2), column
# tails at 8-column blocks: dim 12 (ragged mean: counts written by column block 0 only) and 13.
STEPS_CASES = [_shrunk("ragged_mean_empty_bags_9x4", "ragged_mean_empty_bags_9x3_dim12", (9, 3), 12),
               _shrunk("psw_sum_ragged_7x4", "psw_sum_ragged_5x3", (5, 3)),
               _shrunk("padding_mean_6x5", "padding_mean_5x3", (5, 3)),
               _shrunk("include_last_offset_mean_6x3", "include_last_offset_mean_5x3", (5, 3)),
               _shrunk("int32_indices_sum_6x5", "int32_indices_sum_5x3", (5, 3)),
               _shrunk("bags_of_one_2d_12x1", "bags_of_one_2d_6x1_dim12", (6, 1), 12),
               _shrunk("odd_dim_37_sum_4x5", "odd_dim_13_sum_5x2", (5, 2), 13),
               _shrunk("repeated_indices_mean_2d_5x8", "repeated_indices_mean_2d_5x4", (5, 4))]


@pytest.mark.parametrize("force_int64", [False, True])
def test_embedding_bag_multi_bag_programs_and_int64_offsets(force_int64, monkeypatch, device):
    # Forward: 4 bags per program (not dividing the bag counts), steps of 2 indices (bags longer
    # than a step, empty bags), 8-column blocks (column tails at dim 12 and 13). Backward: spans
    # of 6 sorted entries, 2 per step. With force_int64 the int64 offset path runs on small
    # shapes. One seed (with the repeat-call checks): the registry-wide test draws three.
    cases = STEPS_CASES
    if force_int64:
        monkeypatch.setattr(eb, "needs_int64", lambda *a: True)
        cases = STEPS_CASES[1:4]
    monkeypatch.setattr(eb, "_fwd_config", lambda *a: eb.FwdConfig(2, 8, 1, 4))
    monkeypatch.setattr(eb, "_bwd_config", lambda *a: eb.BwdConfig(2, 8, 6, 1))
    used = _spy_launches(monkeypatch)
    report = verify_op(SPEC, cases=cases, seeds=1, dtypes=(torch.float32,), device=device)
    assert report.rows and report.passed, report.summary()
    # The steps kernel (2-index steps over 8 columns) and the span backward with its fix-up, in
    # the offset width asked for.
    steps = [c for fn, _, c in used if fn is eb._embedding_bag_steps_fwd_kernel]
    bwd = [c for fn, _, c in used if fn is eb._embedding_bag_bwd_kernel]
    assert steps and all(c["BLOCK_L"] == 2 and c["BLOCK_D"] == 8 for c in steps)
    assert bwd and any(fn is eb._embedding_bag_bwd_fixup_kernel for fn, _, _ in used)
    assert {c["USE_INT64"] for c in steps + bwd} == {force_int64}


@pytest.mark.parametrize("bags_per_program", [1, 3, 5, 16])
def test_embedding_bag_step_walk_over_empty_and_long_bags_matches_hand_loop(bags_per_program, monkeypatch, device):
    # Three empty bags first (a whole program of empty bags when 3 per program), a bag of 7
    # (4 steps of 2), a bag of 1, an empty bag, a bag of 2, and the last bag running to the end.
    monkeypatch.setattr(eb, "_fwd_config", lambda *a: eb.FwdConfig(2, 4, 1, bags_per_program))
    w = _weight(15, 6, device, seed=3)
    inp = torch.tensor([3, 3, 9, 14, 0, 3, 7, 5, 11, 2, 14, 6, 6, 1, 8], device=device)
    off = torch.tensor([0, 0, 0, 0, 7, 8, 8, 10], device=device)
    for mode in ("sum", "mean"):
        for pad in (None, 3):
            got = embedding_bag(inp, w, off, mode=mode, padding_idx=pad)
            want = _loop_reference(inp.cpu(), w.cpu(), off.cpu(), mode, padding_idx=pad)
            torch.testing.assert_close(got.double().cpu(), want, rtol=1e-6, atol=1e-6)
    assert (embedding_bag(inp, w, off, mode="sum")[[0, 1, 2, 5]] == 0).all()
    psw = torch.randn(15, generator=torch.Generator().manual_seed(8)).to(device)
    got = embedding_bag(inp, w, off, mode="sum", per_sample_weights=psw)
    want = _loop_reference(inp.cpu(), w.cpu(), off.cpu(), "sum", psw.cpu())
    torch.testing.assert_close(got.double().cpu(), want, rtol=1e-6, atol=1e-6)


def test_embedding_bag_multi_bag_programs_still_raise(monkeypatch, device):
    # The bad index / offset sits in a later program than the first, mid-step.
    monkeypatch.setattr(eb, "_fwd_config", lambda *a: eb.FwdConfig(2, 4, 1, 2))
    w = _weight(10, 4, device)
    inp = torch.tensor([1, 2, 3, 4, 5, 6, 7, 10, 8], device=device)
    with pytest.raises(IndexError, match="input holds index 10 outside"):
        embedding_bag(inp, w, torch.tensor([0, 2, 3, 5, 6, 9], device=device), mode="sum")
    ok = torch.tensor([1, 2, 3, 4, 5, 6, 7, 0, 8], device=device)
    with pytest.raises(ValueError, match="offsets must start at 0"):
        embedding_bag(ok, w, torch.tensor([0, 2, 3, 5, 4, 9], device=device), mode="mean")
    with pytest.raises(ValueError, match="offsets must start at 0"):
        embedding_bag(ok, w, torch.tensor([0, 2, 3, 5, 6, 9, 8], device=device), mode="sum", include_last_offset=True)


@pytest.mark.gpu
@pytest.mark.parametrize("fwd,bwd,force_int64", [((8, 128, 1, 8), (8, 128, 240, 1), False),
                                                 ((16, 128, 2, 4), (16, 128, 256, 4), True),
                                                 ((32, 128, 4, 2), (4, 128, 64, 1), True)])
def test_embedding_bag_gpu_sweep_configs_match_float64(fwd, bwd, force_int64, monkeypatch, device):
    # Configurations the sweep (benchmarks/sweep_embedding_bag.py) may pick, multi-warp ones
    # included (cross-warp reductions and scans the interpreter cannot tell apart), and the int64
    # offset path, on DLRM-sized hot rows, empty bags, padding and per-sample weights.
    if force_int64:
        monkeypatch.setattr(eb, "needs_int64", lambda *a: True)
    monkeypatch.setattr(eb, "_fwd_config", lambda *a: eb.FwdConfig(*fwd))
    monkeypatch.setattr(eb, "_bwd_config", lambda *a: eb.BwdConfig(*bwd))
    cases = ["gpu_dlrm_powerlaw_sum", "gpu_empty_bags_ragged_mean", "gpu_padding_psw_powerlaw"]
    report = verify_op(SPEC, cases=cases, seeds=2, dtypes=(torch.float32,), device=device)
    assert report.rows and report.passed, report.summary()


# ----------------------------------------------------------------------------- semantics


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_empty_bags_repeats_and_padding_match_hand_loop(mode, device):
    w = _weight(12, 5, device)
    inp = torch.tensor([2, 2, 7, 4, 2, 9, 9, 4, 4, 0], device=device)
    off = torch.tensor([0, 0, 3, 3, 6, 9], device=device)  # bags 0 and 2 empty, bag 5 = [0]
    for pad in (None, 4, 2):
        got = embedding_bag(inp, w, off, mode=mode, padding_idx=pad)
        want = _loop_reference(inp.cpu(), w.cpu(), off.cpu(), mode, padding_idx=pad)
        torch.testing.assert_close(got.double().cpu(), want, rtol=1e-6, atol=1e-6)
        # The float64 reference of the spec (torch) agrees with the hand loop.
        torch.testing.assert_close(F.embedding_bag(inp, w.double(), off, mode=mode, padding_idx=pad).cpu(), want)
    assert (embedding_bag(inp, w, off, mode=mode)[[0, 2]] == 0).all()
    # A bag of padding entries only is empty: zeros, and it does not divide by zero.
    only_pad = embedding_bag(torch.tensor([4, 4, 1], device=device), w, torch.tensor([0, 2], device=device),
                             mode=mode, padding_idx=4)
    assert (only_pad[0] == 0).all() and torch.equal(only_pad[1], w[1])


def test_embedding_bag_per_sample_weights_and_their_gradient(device):
    w = _weight(9, 6, device).requires_grad_(True)
    inp = torch.tensor([[1, 3, 3, 8], [0, 5, 1, 1]], device=device)
    psw = torch.randn(2, 4, generator=torch.Generator().manual_seed(3)).to(device).requires_grad_(True)
    out = embedding_bag(inp, w, mode="sum", per_sample_weights=psw, padding_idx=5)
    want = _loop_reference(inp.cpu(), w.detach().cpu(), None, "sum", psw.detach().cpu(), padding_idx=5)
    torch.testing.assert_close(out.detach().double().cpu(), want, rtol=1e-6, atol=1e-6)
    g = torch.randn(2, 6, generator=torch.Generator().manual_seed(4)).to(device)
    gw, gp = torch.autograd.grad(out, [w, psw], g)
    # d out[b] / d psw[b, j] = <g[b], w[inp[b, j]]>, and 0 for the padding entry.
    want_gp = (g[:, None, :] * w.detach()[inp]).sum(-1)
    want_gp[1, 1] = 0
    torch.testing.assert_close(gp, want_gp, rtol=1e-5, atol=1e-6)
    assert gp[1, 1] == 0
    assert (gw[5] == 0).all() and (gw[[2, 4, 6, 7]] == 0).all()
    torch.testing.assert_close(gw[3], 2 * 0 + g[0] * (psw[0, 1] + psw[0, 2]).detach(), rtol=1e-5, atol=1e-6)


def test_embedding_bag_max_gradient_goes_to_first_tied_index(device):
    w = torch.tensor([[1.0, 5.0], [3.0, 5.0], [3.0, 0.0]], device=device, requires_grad=True)
    inp = torch.tensor([0, 1, 2, 1], device=device)
    out = embedding_bag(inp, w, torch.tensor([0], device=device), mode="max")
    assert out.tolist() == [[3.0, 5.0]]
    (gw,) = torch.autograd.grad(out, w, torch.tensor([[10.0, 20.0]], device=device))
    # Column 0: max 3 first at position 1 (row 1); column 1: max 5 first at position 0 (row 0).
    assert gw.tolist() == [[0.0, 20.0], [10.0, 0.0], [0.0, 0.0]]


def test_embedding_bag_include_last_offset_is_csr_like_torch(device):
    w = _weight(10, 4, device)
    inp = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9], device=device)
    off = torch.tensor([0, 2, 3, 8], device=device)
    for mode in ("sum", "mean", "max"):
        got = embedding_bag(inp, w, off, mode=mode, include_last_offset=True)
        assert got.shape == (3, 4)
        torch.testing.assert_close(got, F.embedding_bag(inp, w, off, mode=mode, include_last_offset=True))
        torch.testing.assert_close(got, embedding_bag(inp, w, off[:-1], mode=mode))
    # A last offset short of len(input) is refused: torch's own CPU kernels disagree there
    # (float32 sum stops at it, mean divides by the count to the end, float64 runs to the end).
    with pytest.raises(ValueError, match="with include_last_offset, end at len"):
        embedding_bag(inp, w, torch.tensor([0, 2, 3], device=device), mode="sum", include_last_offset=True)


def test_embedding_bag_sparse_gradient_is_coalesced_and_equals_dense(monkeypatch, device):
    monkeypatch.setattr(eb, "_bwd_config", lambda n, d, dev: eb.BwdConfig(4, 8, 8, 1))
    w = _weight(30, 12, device).requires_grad_(True)
    inp = torch.tensor([5, 5, 5, 1, 29, 5, 7, 7, 0, 5, 5, 5, 5, 3, 2, 5, 1, 7], device=device)
    off = torch.tensor([0, 4, 4, 9, 15], device=device)
    g = torch.randn(5, 12, generator=torch.Generator().manual_seed(5)).to(device)
    for mode in ("sum", "mean"):
        (dense,) = torch.autograd.grad(embedding_bag(inp, w, off, mode=mode, padding_idx=7), w, g)
        (sp,) = torch.autograd.grad(embedding_bag(inp, w, off, mode=mode, padding_idx=7, sparse=True), w, g)
        assert sp.is_sparse and sp.is_coalesced()
        assert sp._indices().tolist() == [[0, 1, 2, 3, 5, 29]]  # distinct indices, padding 7 left out
        assert torch.equal(sp.to_dense(), dense)
        (tsp,) = torch.autograd.grad(F.embedding_bag(inp, w, off, mode=mode, padding_idx=7, sparse=True), w, g)
        torch.testing.assert_close(sp.to_dense(), tsp.to_dense(), rtol=1e-5, atol=1e-6)


def test_embedding_bag_2d_input_equals_offsets_form(device):
    w = _weight(20, 7, device)
    inp = torch.randint(0, 20, (4, 5), generator=torch.Generator().manual_seed(2)).to(device)
    off = torch.arange(0, 20, 5, device=device)
    for mode in ("sum", "mean", "max"):
        torch.testing.assert_close(embedding_bag(inp, w, mode=mode), embedding_bag(inp.reshape(-1), w, off, mode=mode))


def test_embedding_bag_default_mode_is_mean(device):
    w = _weight(6, 3, device)
    inp = torch.tensor([[0, 1, 5]], device=device)
    torch.testing.assert_close(embedding_bag(inp, w), w[[0, 1, 5]].mean(0, keepdim=True))


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("early", [True, False])
def test_embedding_bag_out_of_range_index_raises_index_error(early, tunables, device):
    tunables("embedding_bag", EARLY_CHECK=early)  # the check kernel, or the gather kernel's own flags
    w = _weight(10, 4, device)
    off = torch.tensor([0, 2], device=device)
    for bad in (10, 12345, -1):
        with pytest.raises(IndexError, match=rf"roofkit\.embedding_bag: input holds index {bad} outside"):
            embedding_bag(torch.tensor([1, 2, bad, 3], device=device), w, off, mode="sum")
    with pytest.raises(IndexError, match="num_embeddings = 10"):
        embedding_bag(torch.tensor([[1, 10]], device=device, dtype=torch.int32), w, mode="max")


@pytest.mark.parametrize("offsets,ilo", [([1, 2], False), ([0, 3, 2], False), ([0, 5], False), ([0, 2, 9], True),
                                        ([0, 2, 3], True), ([0, -1], False)])
@pytest.mark.parametrize("early", [True, False])
def test_embedding_bag_bad_offsets_raise_value_error(offsets, ilo, early, tunables, device):
    tunables("embedding_bag", EARLY_CHECK=early)
    w = _weight(10, 4, device)
    inp = torch.tensor([1, 2, 3, 4], device=device)
    off = torch.tensor(offsets, device=device)
    with pytest.raises(ValueError, match=r"roofkit\.embedding_bag: offsets must start at 0"):
        embedding_bag(inp, w, off, mode="sum", include_last_offset=ilo)


@pytest.mark.parametrize("where", ["index", "offset"])
def test_embedding_bag_bad_input_past_the_first_check_program_raises(where, tunables, device):
    # The input check runs CHECK_BLOCK indices / bags per program: a bad value in the third
    # program's block of seven (and a valid call of the same size) shows every program is checked.
    tunables("embedding_bag", CHECK_BLOCK=16)
    w = _weight(10, 4, device)
    g = torch.Generator().manual_seed(3)
    inp = torch.randint(0, 10, (100,), generator=g)
    off = torch.arange(0, 100, 2)  # 50 bags of 2
    bad = 40
    assert bad // eb.CHECK_BLOCK == 2 and -(-inp.numel() // eb.CHECK_BLOCK) == 7
    torch.testing.assert_close(embedding_bag(inp.to(device), w, off.to(device), mode="sum"),
                               F.embedding_bag(inp.to(device), w, off.to(device), mode="sum"))
    if where == "index":
        inp[bad] = 10
        with pytest.raises(IndexError, match="input holds index 10 outside"):
            embedding_bag(inp.to(device), w, off.to(device), mode="sum")
    else:
        off[bad] = off[bad - 1] - 1  # a decrease in bag 40's offsets
        with pytest.raises(ValueError, match=r"offsets must start at 0"):
            embedding_bag(inp.to(device), w, off.to(device), mode="mean")


def test_embedding_bag_zero_width_table_still_checks_offsets_and_indices(device):
    # Nothing to gather (embedding_dim 0), but bad offsets / indices still raise (hostile review).
    w = torch.randn(10, 0, device=device)
    inp = torch.tensor([1, 2, 3], device=device)
    assert embedding_bag(inp, w, torch.tensor([0, 2], device=device), mode="sum").shape == (2, 0)
    for off in ([0, 2, 1], [1, 2], [0, 7]):
        with pytest.raises(ValueError, match=r"roofkit\.embedding_bag: offsets must start at 0"):
            embedding_bag(inp, w, torch.tensor(off, device=device), mode="sum")
    with pytest.raises(IndexError, match="input holds index 10 outside"):
        embedding_bag(torch.tensor([1, 10], device=device), w, torch.tensor([0], device=device), mode="sum")


def test_embedding_bag_error_names_the_bad_int32_index_of_a_huge_table(device):
    # num_embeddings past int32: the message's example must not come from a wrapped comparison.
    w = torch.randn(1, 3, device=device).expand(2**31 + 5, 3)
    inp = torch.tensor([0, 5, -2**31], dtype=torch.int32, device=device)
    with pytest.raises(IndexError, match="input holds index -2147483648 outside"):
        embedding_bag(inp, w, torch.tensor([0, 2], dtype=torch.int32, device=device), mode="sum")


def _t(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype)


@pytest.mark.parametrize(
    "kwargs,exc,words",
    [
        (dict(input=_t(4), weight=_t(5, 3), offsets=torch.tensor([0])), TypeError, ["input", "int32, int64", "float32"]),
        (dict(input=[1, 2], weight=_t(5, 3), offsets=torch.tensor([0])), TypeError, ["input", "torch.Tensor"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0.0])), TypeError, ["offsets", "int32"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3, dtype=torch.float64), offsets=torch.tensor([0])), TypeError,
         ["weight", "float64"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), per_sample_weights=_t(1, dtype=torch.float16),
              mode="sum"), TypeError, ["per_sample_weights", "dtype"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), padding_idx=1.0), TypeError, ["padding_idx"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), sparse=1), TypeError, ["sparse", "bool"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3)), ValueError, ["offsets", "1-D"]),
        (dict(input=torch.tensor([[1]]), weight=_t(5, 3), offsets=torch.tensor([0])), ValueError, ["offsets", "None", "2-D"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([[0]])), ValueError, ["offsets", "1-D"]),
        (dict(input=torch.ones(1, 1, 1, dtype=torch.long), weight=_t(5, 3)), ValueError, ["input", "1-D", "2-D"]),
        (dict(input=torch.tensor([1]), weight=_t(5), offsets=torch.tensor([0])), ValueError, ["weight", "2-D"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), mode="min"), ValueError, ["mode"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), mode="max", sparse=True), ValueError,
         ["max", "sparse"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), padding_idx=5), ValueError,
         ["padding_idx", "[-5, 4]"]),
        (dict(input=torch.tensor([1, 2]), weight=_t(5, 3), offsets=torch.tensor([0]), per_sample_weights=_t(3), mode="sum"),
         ValueError, ["per_sample_weights", "shape"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([], dtype=torch.long), include_last_offset=True),
         ValueError, ["offsets", "include_last_offset"]),
        (dict(input=torch.tensor([[1]]), weight=_t(5, 3), include_last_offset=True), ValueError, ["include_last_offset"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), max_norm=1.0), NotImplementedError,
         ["max_norm"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), scale_grad_by_freq=True),
         NotImplementedError, ["scale_grad_by_freq"]),
        (dict(input=torch.tensor([1]), weight=_t(5, 3), offsets=torch.tensor([0]), per_sample_weights=_t(1), mode="mean"),
         NotImplementedError, ["per_sample_weights", "sum"]),
    ],
)
def test_embedding_bag_bad_input_raises_clear_error(kwargs, exc, words, device):
    # On the suite's device (a CPU tensor on a CUDA machine is refused before its arguments).
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(exc) as info:
        embedding_bag(**kwargs)
    assert "roofkit.embedding_bag" in str(info.value)
    for w in words:
        assert w in str(info.value)


def test_embedding_bag_mismatched_devices_name_the_argument(device):
    w = torch.ones(5, 3, device=device)
    inp, off = torch.tensor([1], device=device), torch.tensor([0], device=device)
    for name, kwargs in [("offsets", dict(offsets=off.to("meta"))),
                         ("weight", dict(offsets=off, weight=w.to("meta"))),
                         ("per_sample_weights", dict(offsets=off, per_sample_weights=torch.ones(1, device="meta"),
                                                     mode="sum"))]:
        kwargs.setdefault("weight", w)
        with pytest.raises(ValueError, match=rf"roofkit\.embedding_bag: {name} is on meta but input is on {device.type}"):
            embedding_bag(inp, **kwargs)


def test_embedding_bag_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"roofkit\.embedding_bag: input is on cpu"):
        embedding_bag(torch.tensor([[1]]), torch.ones(3, 2))


# ----------------------------------------------------------------------------- empty, compile, cost


def test_embedding_bag_empty_inputs_return_without_launch(forbid_launch, device):
    for name in KERNELS:
        forbid_launch(eb, name)
    w = _weight(6, 4, device).requires_grad_(True)
    out = embedding_bag(torch.empty(0, 3, dtype=torch.long, device=device), w, mode="sum")
    assert out.shape == (0, 4)
    (gw,) = torch.autograd.grad(out, w, torch.ones_like(out))
    assert gw.shape == (6, 4) and (gw == 0).all()
    for mode in ("sum", "mean", "max"):
        out = embedding_bag(torch.empty(0, dtype=torch.long, device=device), w, torch.zeros(3, dtype=torch.long, device=device),
                            mode=mode)
        assert out.shape == (3, 4) and (out == 0).all()
        (gw,) = torch.autograd.grad(out, w, torch.ones_like(out))
        assert (gw == 0).all()
    out = embedding_bag(torch.tensor([[1, 2]], device=device), _weight(6, 0, device), mode="mean")
    assert out.shape == (1, 0)
    with pytest.raises(ValueError, match="offsets must start at 0"):
        embedding_bag(torch.empty(0, dtype=torch.long, device=device), w, torch.tensor([0, 2], device=device))


@pytest.mark.parametrize("mode", ["sum", "max"])
def test_embedding_bag_compiles_fullgraph_with_backward(mode, device):
    psw_on = mode == "sum"

    def fn(inp, w, off, psw):
        return embedding_bag(inp, w * 2.0, off, mode=mode, per_sample_weights=psw, padding_idx=3).sum(dim=1)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    inp = torch.tensor([1, 3, 3, 8, 0, 5, 1, 1, 2], device=device)
    off = torch.tensor([0, 4, 4, 7], device=device)
    w = _weight(10, 6, device).requires_grad_(True)
    psw = torch.randn(9, generator=torch.Generator().manual_seed(6)).to(device).requires_grad_(True) if psw_on else None
    params = [w, psw] if psw_on else [w]
    out = compiled(inp, w, off, psw)
    grads = torch.autograd.grad(out, params, torch.ones_like(out))
    ref_params = [p.detach().clone().requires_grad_(True) for p in params]
    ref = F.embedding_bag(inp, ref_params[0] * 2.0, off, mode=mode, per_sample_weights=ref_params[1] if psw_on else None,
                          padding_idx=3).sum(dim=1)
    ref_grads = torch.autograd.grad(ref, ref_params, torch.ones_like(ref))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_embedding_bag_cost_hand_computed():
    c = case("t", shape=(4, 3), num_embeddings=100, dim=8)  # offsets layout, int64 indices
    fp32 = eb.embedding_bag_cost(c, torch.float32)
    # 12 indices * 8 B + 5 offsets * 8 B + 12 rows * 8 * 4 B + 4 * 8 * 4 B outputs
    assert fp32.bytes == 12 * 8 + 5 * 8 + 12 * 32 + 4 * 32
    assert fp32.flops == 12 * 8
    c2 = case("t", shape=(4, 3), num_embeddings=100, dim=8, layout="2d", index_dtype="int32", psw=True,
              mode="fwd_bwd")
    bf16 = eb.embedding_bag_cost(c2, torch.bfloat16)
    fwd = 12 * 4 + 12 * 16 + 4 * 16 + 12 * 2
    bwd = 4 * 16 + 12 * 4 + 100 * 16 + 12 * 2
    assert bf16.bytes == fwd + bwd
    assert bf16.flops == 2 * 12 * 8 + 12 * 8
    bwd_only = eb.embedding_bag_cost(case("t", **{**c2.params, "mode": "bwd"}), torch.bfloat16)
    assert bwd_only.bytes == bwd and bwd_only.flops == 12 * 8


def test_embedding_bag_launch_heuristics(monkeypatch):
    monkeypatch.setattr(eb, "sm_count", lambda device: 132)
    cpu = torch.device("cpu")
    # DLRM: rows of 128 fp32, bags of 32: steps of 8 rows (4 KiB) on one warp, 8 bags a program
    # (8192 programs = 2 waves of 32 one-warp programs on 132 SMs).
    assert eb._fwd_config(32, 128, 4, 65536, cpu) == eb.FwdConfig(8, 128, 1, 8)
    # Token embedding: bags of one, rows of 4096 bf16 in one block over 4 warps.
    assert eb._fwd_config(1, 4096, 2, 8192, cpu) == eb.FwdConfig(1, 4096, 4, 4)
    assert eb._fwd_config(5000, 64, 4, 10, cpu).BAGS == 1
    # The max-mode (single-bag) kernel keeps v1's tiles.
    assert eb._fwd_single_config(32, 128, 4) == eb.FwdConfig(32, 128, 4, 1)
    assert eb._fwd_single_config(5000, 64, 4).BLOCK_L == eb.FWD_MAX_BLOCK_L
    cfg = eb._bwd_config(65536 * 32, 128, cpu)
    assert cfg == eb.BwdConfig(8, 128, 8 * 30, 1)  # spans of a multiple of 16 entries
    small = eb._bwd_config(8192, 4096, cpu)
    assert small.BLOCK_D == eb.BWD_MAX_BLOCK_D and small.E % small.BLOCK_K == 0
    assert triton_cdiv(8192, small.E) * (4096 // small.BLOCK_D) >= 132  # the grid fills the device


def triton_cdiv(a, b):
    return -(-a // b)


def test_embedding_bag_spec_declares_the_acceptance_suites():
    assert SPEC.name == "embedding_bag" and SPEC.grad_args == (1, 8)
    assert {"llama3-8b", "dlrm", "acceptance"} <= set(SPEC.suites)
    assert {"torch", "torch.compile"} <= set(SPEC.baselines)
    dlrm = {c.name: c for c in SPEC.suites["dlrm"]}
    for name in ("sum_uniform", "sum_powerlaw", "sum_uniform_fwd_bwd", "sum_powerlaw_fwd_bwd"):
        c = dlrm[name]
        assert (c["shape"], c["num_embeddings"], c["dim"], c["bag_mode"]) == ((65536, 32), 1 << 20, 128, "sum")
        assert c.dtypes == (torch.float32,)
    gpu = [c for c in SPEC.cases if "gpu" in c.tags]
    for feature in ("ragged", "dist", "padding_idx", "psw"):
        assert any(c.get(feature) for c in gpu), feature
    assert any(c.get("dist") == "powerlaw" for c in gpu) and any(c.get("dist") == "repeat" for c in gpu)


def test_embedding_bag_max_propagates_nan_to_its_first_position(device):
    # NaN propagates whatever its position in the bag (torch's result depends on it); the
    # gradient goes to the first NaN, the other column keeps its ordinary max.
    w = torch.tensor([[1.0, float("nan")], [float("nan"), 2.0], [3.0, 0.0]], device=device, requires_grad=True)
    out = eb.embedding_bag(torch.tensor([0, 1, 2], device=device), w, torch.tensor([0], device=device), mode="max")
    assert torch.isnan(out[0]).all()
    (gw,) = torch.autograd.grad(out, w, torch.ones_like(out))
    assert gw.tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    w2 = torch.tensor([[float("nan"), 1.0], [5.0, 2.0]], device=device)
    out2 = eb.embedding_bag(torch.tensor([0, 1], device=device), w2, torch.tensor([0], device=device), mode="max")
    assert torch.isnan(out2[0, 0]) and out2[0, 1] == 2.0


def test_embedding_bag_no_bags_still_checks_the_lone_offset(device):
    w = torch.randn(10, 3, device=device)
    idx = torch.arange(8, device=device)
    with pytest.raises(ValueError, match="offset"):
        eb.embedding_bag(idx, w, torch.tensor([5], device=device), include_last_offset=True)
