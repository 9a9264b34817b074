"""scaled_dot_product_attention / flash_attention: the spec's CPU cases plus what they cannot say
(tile-edge paths, split-KV, masked rows, lse gradient, determinism, errors, torch.compile)."""

import importlib
import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op

# The package's submodules: tests patch settings, config choosers and kernel names on ``L``
# (``_launch``, the module whose launchers read them), and use the float64 reference of ``S``.
L = importlib.import_module("roofkit.ops.attention._launch")
S = importlib.import_module("roofkit.ops.attention.spec")
from roofkit.ops.attention import (  # noqa: E402
    FLASH_ATTENTION_SPEC,
    SDPA_SPEC,
    Config,
    attention_cost,
    flash_attention,
    scaled_dot_product_attention,
)

pytestmark = pytest.mark.attention

KERNELS = ("_attn_fwd_kernel", "_attn_decode_kernel", "_attn_decode_combine_kernel", "_attn_bwd_preprocess_kernel",
           "_attn_bwd_dkdv_kernel", "_attn_bwd_dq_kernel")


def _qkv(b, hq, hkv, sq, sk, d, device, dtype=torch.float32, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(shape, generator=g).to(device=device, dtype=dtype) for shape in
          ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]
    return [t.requires_grad_(grad) for t in ts]


def _ref(q, k, v, causal, scale=None, *, flash=False, mask=None, window=(-1, -1)):
    """float64 reference: causal aligned top-left (scaled_dot_product_attention) or, with
    ``flash``, bottom-right (flash_attention); ``mask``: attn_mask; ``window``: (left, right)."""
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    if mask is not None and mask.is_floating_point():
        mask = mask.double()
    window = (window[0], 0) if causal else window
    out, lse = S._attention_reference(qd, kd, vd, mask, window, flash, scale, True)
    return (qd, kd, vd), out, lse


# Every CPU case of both specs (output, lse and the three gradients, 3 seeds) runs in the
# registry-wide tests/test_ops_generic.py; the tests here force the other kernel paths.


@pytest.mark.parametrize("fwd,bwd", [((32, 16), (16, 32)), ((16, 32), (32, 16))])
def test_attention_rectangular_tiles_causal_edges(monkeypatch, device, fwd, bwd):
    # BLOCK_M != BLOCK_N moves the causal diagonal (and a window's two edges) across tile corners
    # differently in the forward, the dK/dV (masked query blocks, then unmasked) and the dQ kernels.
    monkeypatch.setattr(L, "_fwd_config", lambda *a: Config(*fwd, 4, 1))
    monkeypatch.setattr(L, "_bwd_config", lambda *a: (Config(*bwd, 4, 1), Config(*fwd, 4, 1)))
    cases = ["sq40_sk17_causal", "sq17_sk40_causal", "gqa_4_over_2_causal"]
    report = verify_op(SDPA_SPEC, cases=cases, seeds=1, dtypes=(torch.float16,), device=device)
    assert report.passed, report.summary()
    report = verify_op(FLASH_ATTENTION_SPEC, cases=["deterministic_backward_repeat", "window_7_3_sq24_sk40"],
                       seeds=1, device=device, dtypes=(torch.float32,))
    assert report.passed, report.summary()


@pytest.mark.parametrize("use_desc", [True, False], ids=["descriptor_loads", "pointer_loads"])
def test_attention_forward_kv_load_paths(tunables, device, use_desc):
    # The forward's K / V loads through tensor descriptors (rows past Sk zero-filled by the copy
    # engine, per (batch, head) slice) and through masked pointers: both against float64, with
    # ragged key counts, GQA and a non-contiguous (transposed-heads) K that descriptors accept.
    tunables("flash_attention", FWD_DESC=use_desc)
    if device.type == "cpu":
        pytest.importorskip("triton.tools.tensor_descriptor")
    q, k, v = _qkv(1, 4, 2, 20, 37, 32, device, dtype=torch.float16, seed=3)
    descs = L._kv_descriptors(q, k, v, 32, 32, 16)
    if use_desc and (device.type == "cpu" or torch.cuda.get_device_capability(device)[0] >= 9):
        assert descs is not None
    elif not use_desc:
        assert descs is None
    assert L._kv_descriptors(q, k[..., :31], v[..., :31], 31, 32, 16) is None  # head dim not a power of two
    kb, vb = k[:1].expand(2, -1, -1, -1), v[:1].expand(2, -1, -1, -1)  # batch stride 0
    assert L._kv_descriptors(q.expand(2, -1, -1, -1), kb, vb, 32, 32, 16) is None
    _, want, _ = _ref(q.expand(2, -1, -1, -1), kb, vb, True)
    got = scaled_dot_product_attention(q.expand(2, -1, -1, -1), kb, vb, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(got.double(), want, rtol=2e-3, atol=2e-3)
    kt = k.transpose(1, 2).contiguous().transpose(1, 2)  # (B, S, H, D) memory, (B, H, S, D) view
    for causal in (False, True):
        for kk in (k, kt):
            _, want, _ = _ref(q, kk, v, causal)
            got = scaled_dot_product_attention(q, kk, v, is_causal=causal, enable_gqa=True)
            torch.testing.assert_close(got.double(), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("scale", [0.0, -0.25, -1.0, 1e-46, 1e-39, 3e-38, 10.0])
def test_attention_forward_any_scale(tunables, device, scale):
    # The forward folds a positive normal scale into the exponent (FMA); zero, negative and
    # subnormal scales must take the scale-then-mask form: masked scores are -inf *after*
    # scaling (-inf * 0 would be NaN), and the max is over scaled scores (a negative scale flips
    # it). Ragged keys and the causal diagonal put every block through the masked path; both
    # load paths. Reference: float64 softmax with the same scale.
    q, k, v = _qkv(1, 2, 2, 16, 20, 16, device, dtype=torch.float16, seed=7)
    for desc in (True, False):
        tunables("flash_attention", FWD_DESC=desc)
        for causal in (False, True):
            _, want, _ = _ref(q, k, v, causal, scale)
            got = scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            assert not got.isnan().any(), (desc, causal)
            torch.testing.assert_close(got.double(), want, rtol=2e-3, atol=2e-3)


def test_attention_split_kv_decoding_path(monkeypatch, tunables, device):
    # Force the decoding kernels onto short sequences: several chunks per (batch, kv head),
    # ragged last chunk, rows of several query heads and queries in one tile, causal rows.
    tunables("flash_attention", DECODE_MIN_SK=0, DECODE_MIN_BLOCKS=1, DECODE_PROGRAMS_PER_SM=64)
    assert L._use_decode(2, 5, 2) and not L._use_decode(2, 33, 40)
    splits, chunk = L._decode_splits(2, 40, 16, device)
    assert splits == 3 and chunk == 16
    forwards = []
    launch = L.launch
    monkeypatch.setattr(L, "launch", lambda cache, fn, grid, *a, **c: forwards.append((fn, grid))
                        or launch(cache, fn, grid, *a, **c))
    # Under the interpreter float16 and float32 take the same decoding tiles (and kernels up to
    # the load casts): float16 alone there; both on a GPU, where float32 has its own tiles.
    dtypes = (torch.float16,) if device.type == "cpu" else None
    # MQA with 4 heads x 5 queries in one tile (the spec's mqa_4_over_1 has 4 x 19 = 76 rows, past
    # DECODE_MAX_ROWS); 17 causal queries of one head (the spec's sq17_sk40_causal has 2: a
    # combining program per query row); GQA with 2 heads x 8 causal queries for the lse (the
    # spec's sq 24 runs in the registry-wide test).
    mqa = case("mqa_4_over_1_sq5", shape=(1, 4, 5, 35, 32), hkv=1, dtypes=(torch.float16, torch.float32))
    sq17 = case("sq17_sk40_causal_h1", shape=(1, 1, 17, 40, 32), causal=True, dtypes=(torch.float16, torch.float32))
    cases = ["causal_5q_2k_top_left", "sq1_sk37", sq17, mqa, "empty_sk0_gives_zeros"]
    report = verify_op(SDPA_SPEC, cases=cases, seeds=1, dtypes=dtypes, device=device)
    assert report.passed, report.summary()
    gqa = case("lse_gqa_causal_sq8_sk40", shape=(1, 4, 8, 40, 32), hkv=2, causal=True,
               dtypes=(torch.float16, torch.float32))
    report = verify_op(FLASH_ATTENTION_SPEC, cases=["lse_causal_5q_2k", gqa], seeds=1, dtypes=dtypes, device=device)
    assert report.passed, report.summary()
    # Every forward took the decoding kernel; under the interpreter (16-key blocks) in up to 3
    # chunks a (batch, kv head), then the combining kernel.
    kernels = [fn for fn, _ in forwards]
    assert L._attn_fwd_kernel not in kernels and L._attn_decode_kernel in kernels
    if device.type == "cpu":
        assert max(grid[1] for fn, grid in forwards if fn is L._attn_decode_kernel) == 3
        assert L._attn_decode_combine_kernel in kernels


def test_decode_splits_heuristic_fills_the_device():
    cuda_like = torch.device("cpu")
    sms = L.sm_count(cuda_like)
    splits, chunk = L._decode_splits(1 * 32, 131072, 64, cuda_like)
    assert splits * 32 >= min(L.DECODE_PROGRAMS_PER_SM * sms, 32 * (131072 // 64 // L.DECODE_MIN_BLOCKS))
    assert chunk % 64 == 0 and splits * chunk >= 131072 and (splits - 1) * chunk < 131072
    assert L._decode_splits(4096, 8192, 64, cuda_like)[0] == 1  # plenty of (batch, head) pairs
    assert L._decode_splits(1, 100, 64, cuda_like) == (1, 128)  # too short to split


def test_attention_row_without_visible_key_is_zero_with_lse_minus_inf(device):
    # 5 queries, 2 keys, causal bottom-right: query i sees key j iff j <= i - 3.
    q, k, v = _qkv(1, 2, 2, 5, 2, 32, device, grad=True)
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    assert (out[:, :, :3] == 0).all() and (lse[:, :, :3] == -math.inf).all()
    assert torch.isfinite(out).all() and torch.isfinite(lse[:, :, 3:]).all()
    # Row 3 sees key 0 only: its output is v[0] (softmax of one element is 1).
    torch.testing.assert_close(out[:, :, 3], v[:, :, 0].detach(), rtol=1e-6, atol=1e-6)
    (out.square().sum() + lse[:, :, 3:].sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, :, :3] == 0).all()


def test_attention_single_key_gradients(device):
    # Sk = 1: out = v, and dq, dk vanish mathematically (the spec's sk1 case checks the forward).
    q, k, v = _qkv(1, 2, 2, 6, 1, 32, device, grad=True)
    out = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, v.detach().expand_as(out), rtol=0, atol=0)
    dy = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dy)
    assert dq.abs().max() < 1e-5 and dk.abs().max() < 1e-5
    torch.testing.assert_close(dv, dy.sum(dim=2, keepdim=True), rtol=1e-5, atol=1e-5)


def _exact_large_logit_qkv(sq, sk, d, device, seed, shift=128.0):
    """fp32 q, k whose scores are exact in fp32 in any summation order (entries are multiples of
    1/2 in [-2, 2]: every partial sum is a multiple of 1/4 far below 2^24) and share the offset
    shift^2 (a first component equal to ``shift`` in every q and k): softmax ignores the offset,
    while the base-2 lse is ~4200, whose fp32 rounding is up to 2.4e-4."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-4, 5, (1, 2, sq, d), generator=g).float() / 2
    k = torch.randint(-4, 5, (1, 2, sk, d), generator=g).float() / 2
    q[..., 0] = shift
    k[..., 0] = shift
    v = torch.randn((1, 2, sk, d), generator=g)
    return [t.to(device).requires_grad_(True) for t in (q, k, v)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_backward_probabilities_sum_to_one_at_large_logits(device, causal, seed):
    # Every row of the backward's recomputed P = 2^(s * scale - lse) must sum to one, so the
    # columns of dV = P^T dO sum to the columns of dO. With scores exact, what can break it is
    # the lse: stored as one fp32 number (~4200 in base 2 here) it is off by up to 2.4e-4 in the
    # exponent, a row-wide relative error of up to 1.7e-4 in P (measured: sums off by 5-7e-5);
    # the kernels keep it as hi + lo and the sums hold to ~6e-8 (threshold 1e-6: 16x each side).
    sq, sk, d = 24, 40, 32
    q, k, v = _exact_large_logit_qkv(sq, sk, d, device, seed)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    assert lse.min() > 2800  # the shared offset's weight, natural log: the case is what it says
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 100)).to(device)
    (dv,) = torch.autograd.grad(out, (v,), do)
    # causal (bottom-right, Sk > Sq): every query row sees at least Sk - Sq + 1 keys.
    want = do.double().sum(dim=2)
    got = dv.double().sum(dim=2)
    rel = ((got - want).abs() / do.double().abs().sum(dim=2)).max().item()
    assert rel < 1e-6, rel


def test_attention_interpreter_dots_do_not_depend_on_the_blas_kernel(device):
    # Under the interpreter the kernels' dots run in float64 (UPCAST) and round once, so the CPU
    # verdicts do not depend on which sgemm kernel OpenBLAS picks for the processor: the scores
    # of a fp32 case equal the correctly rounded float64 products.
    if device.type != "cpu":
        pytest.skip("interpreter-only property")
    assert L._flags(torch.empty(1), 32, 32)["UPCAST"]
    q, k, v = _qkv(1, 1, 1, 1, 3, 32, device, seed=5)
    v = torch.eye(3, 32).reshape(1, 1, 3, 32)  # out[:3] = P: the probabilities themselves
    out, lse = flash_attention(q, k, v, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)).float().double() / math.sqrt(32)
    torch.testing.assert_close(out[..., :3].double(), torch.softmax(s, -1), rtol=2e-6, atol=0)


def test_flash_attention_lse_gradient_flows(device):
    # A loss on lse alone and on (out, lse) together: gradients against the float64 reference.
    q, k, v = _qkv(1, 4, 2, 19, 23, 32, device, grad=True, seed=3)
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    w = torch.randn_like(out)
    (lse.sum() * 0.7 + (out * w).sum()).backward()
    (qd, kd, vd), ro, rl = _ref(q, k, v, True, flash=True)
    (rl.sum() * 0.7 + (ro * w.double()).sum()).backward()
    for got, ref in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_flash_attention_atomic_dq_path_matches_reference(tunables, device):
    tunables("flash_attention", ATOMIC_DQ=True)
    cases = ["gqa_4_over_2_causal", "sq40_sk17_causal"]
    report = verify_op(SDPA_SPEC, cases=cases, seeds=1, dtypes=(torch.float16,), device=device)
    assert report.passed, report.summary()


def test_flash_attention_deterministic_backward_is_bitwise_and_matches_atomic_path(tunables, device):
    tunables("flash_attention", ATOMIC_DQ=True)
    q, k, v = _qkv(1, 4, 2, 37, 29, 32, device, dtype=torch.float16, grad=True, seed=5)
    dy = torch.randn(1, 4, 37, 32, device=device).half()
    grads = []
    for det in (True, True, False):
        out = flash_attention(q, k, v, causal=True, deterministic=det)
        grads.append(torch.autograd.grad(out, (q, k, v), dy))
    for a, b in zip(grads[0], grads[1]):
        assert torch.equal(a, b)
    for a, b in zip(grads[0], grads[2]):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)


def test_gqa_equals_repeated_heads(device):
    # GQA reads kv head h // G: the forward equals MHA on repeated K/V bit for bit, and dK/dV are
    # the group sums of the repeated heads' gradients.
    q, k, v = _qkv(2, 6, 2, 21, 18, 32, device, grad=True, seed=7)
    kr, vr = (t.detach().repeat_interleave(3, dim=1).requires_grad_(True) for t in (k, v))
    out = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out_r = scaled_dot_product_attention(q, kr, vr, is_causal=True)
    assert torch.equal(out, out_r)
    dy = torch.randn_like(out)
    dk, dv = torch.autograd.grad(out, (k, v), dy)
    dkr, dvr = torch.autograd.grad(out_r, (kr, vr), dy)
    torch.testing.assert_close(dk, dkr.view(2, 2, 3, 18, 32).sum(2), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dv, dvr.view(2, 2, 3, 18, 32).sum(2), rtol=1e-5, atol=1e-5)


def test_attention_empty_inputs_launch_nothing(forbid_launch, device):
    for name in KERNELS:
        forbid_launch(L, name)
    with pytest.raises(AssertionError, match="kernel launched"):  # the patch reaches the launcher
        flash_attention(*_qkv(1, 2, 2, 4, 4, 32, device))
    for b, hq, sq, sk in [(0, 2, 4, 4), (1, 2, 0, 4), (1, 2, 4, 0), (1, 0, 4, 4)]:
        q, k, v = _qkv(b, hq, hq, sq, sk, 32, device, grad=True)
        out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
        assert out.shape == (b, hq, sq, 32) and lse.shape == (b, hq, sq)
        assert (out == 0).all() and (lse == -math.inf).all()  # Sk = 0: no visible key
        out.sum().backward()
        assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
        assert (q.grad == 0).all() and (k.grad == 0).all() and (v.grad == 0).all()
        mask = torch.ones((b, 1, sq, sk), dtype=torch.bool, device=device)
        out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert out.shape == (b, hq, sq, 32) and (out == 0).all()


def test_attention_torch_compile_fullgraph(device):
    def f(q, k, v):
        out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
        return out.square().sum() + lse.sum()

    q, k, v = _qkv(1, 2, 1, 9, 12, 32, device, grad=True, seed=11)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    loss = compiled(q, k, v)
    loss.backward()
    (qd, kd, vd), ro, rl = _ref(q, k, v, True, flash=True)
    (ro.square().sum() + rl.sum()).backward()
    torch.testing.assert_close(loss.double(), (ro.square().sum() + rl.sum()).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q.grad.double(), qd.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(k.grad.double(), kd.grad, rtol=1e-4, atol=1e-5)


def test_segment_ids_on_the_decoding_path_and_under_compile(tunables, device):
    # Segment ids on the split-KV decoding kernels (which take them as a boolean mask), and
    # through torch.compile(fullgraph) with their gradients: as the float64 reference.
    tunables("flash_attention", DECODE_MIN_SK=0, DECODE_MIN_BLOCKS=1, DECODE_PROGRAMS_PER_SM=64)
    q, k, v = _qkv(2, 4, 2, 3, 70, 32, device, seed=5)
    ids = (torch.tensor([[0, 1, 5], [1, 1, 2]], device=device), (torch.arange(70, device=device) // 30)[None])
    out, lse = flash_attention(q, k, v, causal=True, segment_ids=ids, return_lse=True)
    ref, rl = S.flash_attention_reference(*(t.double() for t in (q, k, v)), causal=True, segment_ids=ids,
                                          return_lse=True)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(lse.isinf(), rl.isinf()) and lse.isinf().any()  # id 5 has no key: a dead row
    q, k, v = _qkv(2, 2, 1, 21, 21, 16, device, grad=True, seed=6)
    seg = (torch.arange(21, device=device) >= torch.tensor([[8], [13]], device=device)).to(torch.int32)

    def f(q, k, v, seg):
        return flash_attention(q, k, v, causal=True, segment_ids=seg).square().sum()

    loss = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, seg)
    grads = torch.autograd.grad(loss, (q, k, v))
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    want = S.flash_attention_reference(qd, kd, vd, causal=True, segment_ids=seg).square().sum()
    torch.testing.assert_close(loss.double(), want.detach(), rtol=1e-5, atol=1e-5)
    for got, ref in zip(grads, torch.autograd.grad(want, (qd, kd, vd))):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_segment_ids_are_relabeled_narrow_keeping_equality(device):
    # Any integer ids (here int64 beyond 32 bits, unsorted, shared between query and key ids)
    # reach the kernels as int16 labels (int32 from 2**15 positions) with the same equalities.
    api = importlib.import_module("roofkit.ops.attention.api")
    g = torch.Generator().manual_seed(8)
    raw = (torch.randint(0, 5, (3, 50), generator=g) * (2**40 + 7) - 3).to(device)
    labels = api._relabel(raw)
    assert labels.dtype == torch.int16 and labels.shape == raw.shape
    assert torch.equal(labels[:, :, None] == labels[:, None, :], raw[:, :, None] == raw[:, None, :])
    assert api._relabel(torch.zeros(1, 2**15, dtype=torch.long, device=device)).dtype == torch.int32
    q = torch.ones(2, 2, 4, 8, device=device)
    k = torch.ones(2, 2, 6, 8, device=device)
    q_ids, k_ids = raw[:1, :4] % 3, (raw[1:2, :6] % 3).to(torch.int32)  # int64 and int32: compared as int64
    both = api._segments_of("flash_attention", (q_ids, k_ids), q, k)
    assert both.shape == (2, 11) and both.dtype == torch.int16
    want = q_ids[:, :, None] == k_ids[:, None, :]
    assert want.any() and not want.all()
    assert torch.equal(both[:, :4, None] == both[:, None, 4:10], want.expand(2, 4, 6))
    # then the row's flag: its query ids and its key ids both sorted
    is_sorted = bool((q_ids.diff() >= 0).all() and (k_ids.diff() >= 0).all())
    assert both[:, 10].tolist() == [int(is_sorted)] * 2
    ordered = api._segments_of("flash_attention", torch.tensor([[4, 4, 9, 9], [7, 3, 3, 3]], device=device), q, q)
    assert ordered[:, :4].tolist() == [[0, 0, 1, 1], [1, 0, 0, 0]] and ordered[:, -1].tolist() == [1, 0]


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_segment_ids_at_gpu_tiles_match_the_mask_path(d):
    # Packed documents at the GPU's own tiles (bf16, causal, GQA, a ragged 1000-token row with
    # boundaries inside tiles): output and the three gradients as torch's SDPA with the same
    # pattern as a boolean mask, to bf16's budget.
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    b, hq, hkv, s = 2, 4, 2, 1000
    i = torch.arange(s)
    seg = torch.stack([(i >= 130).long() + (i >= 517).long() + (i >= 900).long(), (i >= 64).long()]).cuda()
    seg = seg * (2**40 + 1) if d == 128 else seg.to(torch.int16)  # (relabeled int64; int16 as it is)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(b, h, s, d, generator=g).cuda().to(torch.bfloat16).requires_grad_(True)
               for h in (hq, hkv, hkv))
    dy = torch.randn(b, hq, s, d, generator=g).cuda().to(torch.bfloat16)
    out = flash_attention(q, k, v, causal=True, segment_ids=seg)
    got = (out, *torch.autograd.grad(out, (q, k, v), dy))
    mask = S.segment_mask(seg, b, s, s) & torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = S.flash_attention_reference(qd, kd, vd, causal=True, segment_ids=seg)
    want = (ref, *torch.autograd.grad(ref, (qd, kd, vd), dy.double()))
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    their_err = (theirs.double() - ref).abs().max()
    for name, a, r in zip(("out", "dq", "dk", "dv"), got, want):
        assert not a.isnan().any(), name
        torch.testing.assert_close(a.double(), r, rtol=2e-2, atol=2e-2, msg=lambda m: f"{name}: {m}")
    assert (got[0].double() - ref).abs().max() <= 2 * their_err + 1e-3


def _grads_vs_torch(q, k, v, mask=None, causal=False, gqa=False, seed=0):
    """roofkit's SDPA output and (dq, dk, dv) for a seeded dy, and torch's SDPA (CPU math, float64
    from the same values; a float mask converted to float64) on the same inputs."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 50)).to(out)
    got = (out, *torch.autograd.grad(out, (q, k, v), dy))
    qd, kd, vd = (t.detach().cpu().double().requires_grad_(True) for t in (q, k, v))
    md = None if mask is None else (mask.cpu().double() if mask.is_floating_point() else mask.cpu())
    with sdpa_kernel(SDPBackend.MATH):  # torch's CPU flash path refuses a 1-D mask the math one takes
        ref = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, attn_mask=md, is_causal=causal,
                                                               enable_gqa=gqa)
    want = (ref, *torch.autograd.grad(ref, (qd, kd, vd), dy.cpu().double()))
    return got, want


def _assert_close_all(got, want, tol):
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert not a.isnan().any(), name
        torch.testing.assert_close(a.detach().cpu().double(), b, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("sq,sk", [(5, 2), (17, 40), (40, 17)])
def test_sdpa_is_causal_top_left_matches_torch(device, sq, sk):
    # torch's is_causal: query i sees key j iff j <= i, whatever Sq and Sk (Sq > Sk: every row sees
    # key 0; Sq < Sk: the last keys are seen by no row, so their dk, dv are 0).
    q, k, v = _qkv(1, 2, 2, sq, sk, 16, device, seed=sq)
    got, want = _grads_vs_torch(q, k, v, causal=True)
    _assert_close_all(got, want, 1e-5)
    if sk > sq:
        assert (got[2][:, :, sq:] == 0).all() and (got[3][:, :, sq:] == 0).all()


def _masks(b, hq, sq, sk, device):
    """attn_mask variants: kind -> mask (broadcastable to (b, hq, sq, sk))."""
    g = torch.Generator().manual_seed(11)
    keep = torch.rand((b, 1, sq, sk), generator=g) < 0.6
    keep[..., 0] = True
    bias = torch.randn((b, 1, sq, sk), generator=g).masked_fill(~keep, -math.inf)
    j = torch.arange(sk)
    pad = torch.stack([(j >= 2 * i) & (j < sk - 3 * i) for i in range(b)]).reshape(b, 1, 1, sk)
    out = {
        "bool_padding_b11k": pad,
        "bool_b1qk": keep,
        "additive_float32_b1qk": bias,
        "bool_2d": keep[0, 0],
        "additive_2d_transposed": bias[0, 0].t().contiguous().t(),  # non-contiguous (Sq, Sk)
        "bool_expanded_bhqk": keep.expand(b, hq, sq, sk),  # stride 0 over heads, as a (B, H, Sq, Sk) view
        "bool_1d_keys": pad[-1, 0, 0],
        "bool_0d": torch.tensor(True),
    }
    return {name: m.to(device) for name, m in out.items()}


@pytest.mark.parametrize("kind", list(_masks(2, 2, 3, 5, "cpu")))
def test_sdpa_attn_mask_matches_torch_with_gradients(device, kind):
    # Every mask form torch takes (boolean / additive, broadcast from 0-4 dims, a stride-0 view,
    # a transposed layout), with GQA: output and dq, dk, dv against torch's float64 SDPA. (One
    # tile a head; the spec's mask cases run several.)
    q, k, v = _qkv(2, 2, 1, 9, 13, 16, device, seed=5)
    mask = _masks(2, 2, 9, 13, device)[kind]
    got, want = _grads_vs_torch(q, k, v, mask=mask, gqa=True)
    _assert_close_all(got, want, 1e-5)


def test_sdpa_additive_mask_in_query_dtype_float16(device):
    # An additive mask of query's dtype (transformers' eager masks: 0 and finfo.min) on fp16 inputs.
    q, k, v = _qkv(2, 2, 2, 20, 27, 32, device, dtype=torch.float16, seed=8)
    keep = torch.rand((2, 1, 20, 27), generator=torch.Generator().manual_seed(3)) < 0.7
    keep[..., 5] = True
    mask = torch.zeros((2, 1, 20, 27)).masked_fill(~keep, torch.finfo(torch.float16).min).half().to(device)
    got, want = _grads_vs_torch(q, k, v, mask=mask)
    _assert_close_all(got, want, 4e-3)


def test_sdpa_fully_masked_rows_are_zero_like_torch(device):
    # A row whose keys are all masked out (boolean False, or additive -inf) is 0 with zero
    # gradients, as torch's math backend gives (never NaN). A row of finfo.min alone is no
    # masked row: every score is shifted by the same amount, so its softmax is uniform (torch's
    # output too; the gradients are checked against the float64 reference).
    q, k, v = _qkv(1, 2, 2, 6, 20, 16, device, seed=2)
    keep = torch.rand((1, 1, 6, 20), generator=torch.Generator().manual_seed(4)) < 0.5
    keep[..., 1, :] = False
    keep[..., 0, 0] = True
    for mask in (keep.to(device), torch.zeros(keep.shape).masked_fill(~keep, -math.inf).to(device)):
        got, want = _grads_vs_torch(q, k, v, mask=mask)
        _assert_close_all(got, want, 1e-5)
        assert (got[0][:, :, 1] == 0).all() and (got[1][:, :, 1] == 0).all()
    bias = torch.zeros((6, 20)).masked_fill(~keep[0, 0], -math.inf)
    bias[1] = torch.finfo(torch.float32).min
    bias = bias.to(device)
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = scaled_dot_product_attention(qg, kg, vg, attn_mask=bias)
    torch.testing.assert_close(out[:, :, 1], v.mean(dim=2), rtol=1e-5, atol=1e-6)
    dy = torch.randn_like(out)
    grads = torch.autograd.grad(out, (qg, kg, vg), dy)
    (qd, kd, vd), ro, _ = _ref(q, k, v, False, mask=bias)
    for got, want in zip((out, *grads), (ro, *torch.autograd.grad(ro, (qd, kd, vd), dy.double()))):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_sdpa_mask_broadcast_is_passed_as_strides(monkeypatch, device):
    # The kernels read a broadcast mask through stride-0 dimensions of a view of the caller's
    # memory (nothing materialized), a boolean one as bytes.
    seen = []
    launch = L.launch
    monkeypatch.setattr(L, "launch", lambda cache, fn, grid, *a, **c: seen.append((fn, a, c))
                        or launch(cache, fn, grid, *a, **c))
    q, k, v = _qkv(2, 4, 2, 9, 13, 16, device, seed=1)
    # (made on the device: moving an expanded tensor to another device materializes it)
    pad = (torch.arange(13, device=device) < 10).reshape(1, 1, 1, 13).expand(2, 1, 1, 13)
    scaled_dot_product_attention(q, k, v, attn_mask=pad, enable_gqa=True)
    fn, args, consts = next(x for x in seen if x[0] is L._attn_fwd_kernel)
    m = args[9]
    assert m.dtype == torch.uint8 and m.data_ptr() == pad.data_ptr() and m.stride() == (0, 0, 0, 1)
    assert args[10 + 16:10 + 20] == (0, 0, 0, 1) and consts["HAS_MASK"] and consts["MASK_BOOL"]


@pytest.mark.parametrize("causal,window,sq,sk", [
    (False, (7, 3), 40, 17),
    (True, (5, 9), 24, 40),  # causal: the right edge is 0 whatever window_size says (FlashAttention's rule)
    (False, (0, 0), 33, 33),
    (False, (3, -1), 24, 40),
    (False, (-1, 2), 40, 17),
])
def test_flash_attention_window_matches_reference(device, causal, window, sq, sk):
    # Sliding windows, bottom-right aligned: query i sees keys [i + Sk - Sq - left, i + Sk - Sq + right];
    # rows that see no key give 0 and lse -inf. Output, lse and the three gradients.
    q, k, v = _qkv(1, 2, 1, sq, sk, 16, device, grad=True, seed=sq + window[0])
    out, lse = flash_attention(q, k, v, causal=causal, window_size=window, return_lse=True)
    (qd, kd, vd), ro, rl = _ref(q, k, v, causal, flash=True, window=window)
    assert torch.equal(lse.isinf(), rl.isinf())
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to(out)
    live = rl.isfinite()
    grads = torch.autograd.grad((out * w).sum() + lse[live].sum() * 0.3, (q, k, v))
    want = torch.autograd.grad((ro * w.double()).sum() + rl[live].sum() * 0.3, (qd, kd, vd))
    torch.testing.assert_close(out.double(), ro, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse[live].double(), rl[live], rtol=1e-5, atol=1e-5)
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_attention_masks_and_window_on_the_decoding_path(tunables, device):
    # The split-KV kernels (several chunks a kv head, GQA rows of 2 heads x 3 queries) with a
    # window, whose chunks outside the band carry lse -inf, and with attn_masks: a boolean padding
    # mask that empties whole chunks of some batches, and an additive one.
    tunables("flash_attention", DECODE_MIN_SK=0, DECODE_MIN_BLOCKS=1, DECODE_PROGRAMS_PER_SM=64)
    q, k, v = _qkv(2, 4, 2, 3, 70, 32, device, seed=4)
    out, lse = flash_attention(q, k, v, window_size=(20, 0), return_lse=True)
    _, ro, rl = _ref(q, k, v, False, flash=True, window=(20, 0))
    torch.testing.assert_close(out.double(), ro, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), rl, rtol=1e-5, atol=1e-5)
    j = torch.arange(70)
    pad = torch.stack([j < 70, (j >= 40) & (j < 60)]).reshape(2, 1, 1, 70).to(device)
    bias = torch.randn((2, 1, 3, 70), generator=torch.Generator().manual_seed(1)).to(device)
    for mask in (pad, bias):
        got = scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        _, ro, _ = _ref(q, k, v, False, mask=mask)
        torch.testing.assert_close(got.double(), ro, rtol=1e-5, atol=1e-5)


def test_sdpa_reference_matches_torch_on_the_spec_masks():
    # The spec's float64 reference and torch's float64 SDPA agree on every mask case of the spec.
    for c in S.CASES:
        if c.get("mask") is None or "gpu" in c.tags:
            continue
        inputs = S._sdpa_inputs(c, torch.float32, torch.Generator().manual_seed(0), "cpu")
        inputs = inputs.map(lambda t: t.double() if t.is_floating_point() else t)
        got = S.scaled_dot_product_attention_reference(*inputs.args, **inputs.kwargs)
        want = torch.nn.functional.scaled_dot_product_attention(*inputs.args, **inputs.kwargs)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=c.name)


def _assert_replays_as_written(fn, call):
    """Eager calls of ``fn`` (``call(seed)``: output and gradients) are recorded and replayed
    (roofkit.ops._runtime): the third call (a replay) gives the bits of the same call unplanned."""
    from roofkit.ops import _runtime

    saved = _runtime.CPU_PLANS[0], _runtime.PLANS[0]
    _runtime.CPU_PLANS[0] = True
    try:
        for seed in range(3):  # the first runs as written, the second records, the third replays
            got = call(seed)
        assert any(isinstance(p, _runtime.Plan) for p in fn.plans.values())
        _runtime.PLANS[0] = False
        want = call(2)
    finally:
        _runtime.CPU_PLANS[0], _runtime.PLANS[0] = saved
        _runtime.clear_plans()
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_sdpa_with_mask_replays_through_plans(device):
    # A replay must read the new call's mask (a keyword tensor argument) and give the unplanned
    # call's bits, gradients too.
    def call(seed):
        q, k, v = _qkv(2, 2, 1, 7, 9, 16, device, grad=True, seed=seed)
        mask = (torch.rand((2, 1, 1, 9), generator=torch.Generator().manual_seed(seed)) < 0.6).to(device)
        out = scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return (out.detach(), *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))

    _assert_replays_as_written(scaled_dot_product_attention, call)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16], ids=["relabeled", "as_given"])
def test_segment_ids_replay_through_plans(device, dtype):
    # Calls with segment_ids are planned (recorded, then replayed down to the kernels): a replay
    # reads the new call's ids (other values each call: packed differently, or one sequence)
    # and gives the unplanned call's bits, gradients too.
    def call(seed):
        q, k, v = _qkv(2, 2, 1, 20, 20, 16, device, grad=True, seed=seed)
        cut = torch.tensor([[5 + seed], [20 if seed == 2 else 11]])
        ids = (torch.arange(20)[None] >= cut).to(device=device, dtype=dtype) * (seed + 3)
        out = flash_attention(q, k, v, causal=True, segment_ids=ids)
        return (out.detach(), *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))

    _assert_replays_as_written(flash_attention, call)


def test_attention_cost_hand_computed():
    # b2 h4 (kv 2) sq 3 sk 5 d 8 fp16, causal: top-left (SDPA) rows see 1, 2, 3 keys = 6 pairs;
    # bottom-right (flash_attention) 3, 4, 5 = 12 pairs.
    x = case("x", shape=(2, 4, 3, 5, 8), hkv=2, causal=True)
    q_bytes, kv_bytes = 2 * 4 * 3 * 8 * 2, 2 * 2 * 2 * 5 * 8 * 2
    for cost, pairs in ((attention_cost, 6), (S.flash_attention_cost, 12)):
        c = cost(x, torch.float16)
        assert c.flops == 4 * 2 * 4 * pairs * 8
        assert c.bytes == 2 * q_bytes + kv_bytes
    # Sq == Sk causal: half the pairs (the FLOP convention); fwd_bwd 3.5x, + dO, dq, dk, dv.
    c = attention_cost(case("y", shape=(1, 2, 4, 4, 16), causal=True, mode="fwd_bwd"), torch.bfloat16)
    assert c.flops == 3.5 * 4 * 1 * 2 * 8 * 16
    q_bytes, kv_bytes = 2 * 4 * 16 * 2, 2 * 2 * 4 * 16 * 2
    assert c.bytes == 4 * q_bytes + 2 * kv_bytes
    # return_lse adds the fp32 lse; Sq > Sk causal counts only visible pairs: bottom-right rows
    # 0, 1 see none (0 + 0 + 1 + 2), top-left every row sees key 0 (1 + 2 + 2 + 2).
    z = case("z", shape=(1, 1, 4, 2, 16), causal=True, return_lse=True)
    assert S.flash_attention_cost(z, torch.float32).flops == 4 * (0 + 0 + 1 + 2) * 16
    assert attention_cost(z, torch.float32).flops == 4 * (1 + 2 + 2 + 2) * 16
    assert attention_cost(z, torch.float32).bytes == 2 * 4 * 16 * 4 + 2 * 2 * 16 * 4 + 4 * 4
    # A window (left 1, right 0) over sq = sk = 4, bottom-right: rows see 1, 2, 2, 2 keys.
    w = case("w", shape=(1, 1, 4, 4, 16), window=(1, 0))
    assert S.flash_attention_cost(w, torch.float32).flops == 4 * 7 * 16


def test_attention_bf16_under_interpreter_upcasts(device):
    # bf16 dots cannot run in the interpreter; the kernels upcast there (the GPU uses bf16 MMA).
    q, k, v = _qkv(1, 2, 2, 17, 20, 32, device, dtype=torch.bfloat16, grad=True, seed=13)
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    (qd, kd, vd), ro, _ = _ref(q, k, v, True)
    err = (out.double() - ro).norm() / ro.norm()
    assert err < 1e-2
    dy = torch.randn_like(out)
    dq, = torch.autograd.grad(out, (q,), dy)
    rdq, = torch.autograd.grad(ro, (qd,), dy.double())
    assert (dq.double() - rdq).norm() / rdq.norm() < 2e-2


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                                attn_mask=torch.ones(3, 3, device=d, dtype=torch.float64)),
         TypeError, ["roofkit.scaled_dot_product_attention", "attn_mask", "bool", "float32", "float64"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d).half()] * 3,
                                                attn_mask=torch.ones(3, 3, device=d, dtype=torch.bfloat16)),
         TypeError, ["roofkit.scaled_dot_product_attention", "attn_mask", "float16 (query's) or float32", "bfloat16"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                                attn_mask=torch.ones(3, 3, device=d, dtype=torch.int32)),
         TypeError, ["roofkit.scaled_dot_product_attention", "attn_mask", "int32"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, attn_mask=[[True]]),
         TypeError, ["roofkit.scaled_dot_product_attention", "attn_mask", "torch.Tensor", "list"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                                attn_mask=torch.ones(1, 3, 3, 3, device=d, dtype=torch.bool)),
         ValueError, ["roofkit.scaled_dot_product_attention", "attn_mask", "(1, 3, 3, 3)", "broadcastable",
                      "(1, 2, 3, 3)"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                                attn_mask=torch.ones(3, 4, device=d, dtype=torch.bool)),
         ValueError, ["attn_mask", "(3, 4)", "broadcastable"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                                attn_mask=torch.ones(1, 1, 1, 3, 3, device=d, dtype=torch.bool)),
         ValueError, ["attn_mask", "broadcastable"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                                attn_mask=torch.ones(3, 3, device="meta", dtype=torch.bool)),
         ValueError, ["roofkit.scaled_dot_product_attention", "attn_mask", "meta", "same device"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, is_causal=True,
                                                attn_mask=torch.ones(3, 3, device=d, dtype=torch.bool)),
         ValueError, ["roofkit.scaled_dot_product_attention", "attn_mask", "is_causal"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                                attn_mask=torch.zeros(3, 3, device=d, requires_grad=True)),
         NotImplementedError, ["roofkit.scaled_dot_product_attention", "attn_mask", "requires grad", "detach"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, window_size=(4, -2)),
         ValueError, ["roofkit.flash_attention", "window_size", "-1"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, window_size=4),
         TypeError, ["roofkit.flash_attention", "window_size", "pair of ints"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, window_size=(1.5, 0)),
         TypeError, ["roofkit.flash_attention", "window_size"]),
        (lambda d: scaled_dot_product_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, dropout_p=0.1),
         NotImplementedError, ["dropout_p"]),
        (lambda d: scaled_dot_product_attention(torch.ones(2, 3, 8, device=d), torch.ones(2, 3, 8, device=d),
                                                torch.ones(2, 3, 8, device=d)),
         ValueError, ["roofkit.scaled_dot_product_attention", "query", "4-D"]),
        (lambda d: scaled_dot_product_attention(torch.ones(1, 2, 3, 8, device=d), torch.ones(2, 2, 3, 8, device=d),
                                                torch.ones(2, 2, 3, 8, device=d)),
         ValueError, ["batch"]),
        (lambda d: scaled_dot_product_attention(torch.ones(1, 2, 3, 8, device=d), torch.ones(1, 2, 3, 16, device=d),
                                                torch.ones(1, 2, 3, 16, device=d)),
         ValueError, ["head dims"]),
        (lambda d: scaled_dot_product_attention(torch.ones(1, 2, 3, 8, device=d), torch.ones(1, 2, 4, 8, device=d),
                                                torch.ones(1, 2, 5, 8, device=d)),
         ValueError, ["key", "value", "sequence length"]),
        (lambda d: scaled_dot_product_attention(torch.ones(1, 4, 3, 8, device=d), torch.ones(1, 2, 3, 8, device=d),
                                                torch.ones(1, 2, 3, 8, device=d)),
         ValueError, ["enable_gqa"]),
        (lambda d: scaled_dot_product_attention(torch.ones(1, 6, 3, 8, device=d), torch.ones(1, 4, 3, 8, device=d),
                                                torch.ones(1, 4, 3, 8, device=d), enable_gqa=True),
         ValueError, ["6 heads", "do not divide"]),
        (lambda d: flash_attention(torch.ones(1, 2, 3, 8, device=d), torch.ones(1, 2, 3, 8, device=d),
                                   torch.ones(1, 3, 3, 8, device=d)),
         ValueError, ["roofkit.flash_attention", "k has 2 heads but v has 3"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 512, device=d)] * 3),
         ValueError, ["roofkit.flash_attention", "head_dim", "512"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d, dtype=torch.float64)] * 3),
         TypeError, ["roofkit.flash_attention", "q", "float64"]),
        (lambda d: flash_attention(torch.ones(1, 2, 3, 8, device=d), torch.ones(1, 2, 3, 8, device=d).half(),
                                   torch.ones(1, 2, 3, 8, device=d)),
         TypeError, ["roofkit.flash_attention", "k", "dtype"]),
        (lambda d: flash_attention([1.0], [1.0], [1.0]), TypeError, ["roofkit.flash_attention", "q", "torch.Tensor"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, scale="big"),
         TypeError, ["roofkit.flash_attention", "scale"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, segment_ids=torch.ones(1, 3, device=d)),
         TypeError, ["roofkit.flash_attention", "query segment_ids", "integer", "float32"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                   segment_ids=torch.ones(1, 3, device=d, dtype=torch.bool)),
         TypeError, ["roofkit.flash_attention", "segment_ids", "integer", "bool"]),
        (lambda d: flash_attention(*[torch.ones(2, 2, 3, 8, device=d)] * 3,
                                   segment_ids=torch.ones(3, 3, device=d, dtype=torch.long)),
         ValueError, ["roofkit.flash_attention", "segment_ids", "(2, 3)", "(3, 3)"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                   segment_ids=torch.ones(3, device=d, dtype=torch.long)),
         ValueError, ["roofkit.flash_attention", "segment_ids", "(1, 3)", "(3,)"]),
        (lambda d: flash_attention(torch.ones(1, 2, 3, 8, device=d), *[torch.ones(1, 2, 5, 8, device=d)] * 2,
                                   segment_ids=torch.ones(1, 3, device=d, dtype=torch.long)),
         ValueError, ["roofkit.flash_attention", "segment_ids", "Sq=3", "Sk=5", "pair"]),
        (lambda d: flash_attention(torch.ones(1, 2, 3, 8, device=d), *[torch.ones(1, 2, 5, 8, device=d)] * 2,
                                   segment_ids=(torch.ones(1, 3, device=d, dtype=torch.long),
                                                torch.ones(1, 4, device=d, dtype=torch.long))),
         ValueError, ["roofkit.flash_attention", "key segment_ids", "(1, 5)", "(1, 4)"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                   segment_ids=(torch.ones(1, 3, dtype=torch.long, device="meta"),) * 2),
         ValueError, ["roofkit.flash_attention", "query segment_ids", "meta", "same device"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3, segment_ids=[[0, 0, 1]]),
         TypeError, ["roofkit.flash_attention", "segment_ids", "pair of tensors", "list"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                   segment_ids=torch.zeros(1, 3, dtype=torch.long, device=d).to_sparse()),
         TypeError, ["roofkit.flash_attention", "query segment_ids", "dense"]),
        (lambda d: flash_attention(*[torch.ones(1, 2, 3, 8, device=d)] * 3,
                                   segment_ids=(torch.zeros(1, 3, dtype=torch.uint16, device=d),
                                                torch.zeros(1, 3, dtype=torch.int8, device=d))),
         TypeError, ["roofkit.flash_attention", "segment_ids", "uint16 and int8", "same dtype"]),
    ],
)
def test_attention_bad_input_raises(call, exc, words, device):
    with pytest.raises(exc) as info:
        call(device)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_flags_must_be_bools_and_scale_any_real(device):
    import numpy as np

    q, k, v = _qkv(1, 2, 2, 4, 4, 16, device)
    with pytest.raises(TypeError, match="roofkit.flash_attention: causal must be a bool"):
        flash_attention(q, k, v, causal="False")
    with pytest.raises(TypeError, match="roofkit.scaled_dot_product_attention: is_causal must be a bool"):
        scaled_dot_product_attention(q, k, v, is_causal=1)
    got = scaled_dot_product_attention(q, k, v, scale=np.float32(0.5))
    want = torch.softmax(0.5 * q.double() @ k.double().transpose(-1, -2), -1) @ v.double()
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_output_is_laid_out_as_torch_flash_returns_it(device):
    # (B, Hq, Sq, D) laid out (B, Sq, Hq, D): a model's transpose(1, 2).reshape copies nothing;
    # the fake lays it out the same way (compiled graphs check the strides).
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k, v = _qkv(2, 4, 2, 9, 13, 16, device, seed=3)
    out = scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert out.shape == (2, 4, 9, 16) and out.transpose(1, 2).is_contiguous()
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(2, 1),
                                                           v.double().repeat_interleave(2, 1))
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    api = importlib.import_module("roofkit.ops.attention.api")
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        fake = api._attention_fwd_fake(fq, fk, fv, None, None, -1, -1, False, 0.25, False, True)
    assert fake[0].stride() == out.stride()


@pytest.mark.parametrize("decode", [False, True], ids=["prefill", "split_kv"])
def test_backward_keeps_the_output_rounding_residual_not_a_float32_copy(tunables, device, decode):
    # 16-bit inputs: the graph keeps the output and its rounding residual, both 16-bit (half the
    # memory of a float32 copy); their sum is the float32 output to ~twice the dtype's precision.
    if decode:  # several KV chunks per row: the combine kernel stores the output and residual
        tunables("flash_attention", DECODE_MIN_SK=0, DECODE_MIN_BLOCKS=1, DECODE_PROGRAMS_PER_SM=64)
    q, k, v = _qkv(1, 4, 2, 1 if decode else 24, 40, 16, device, dtype=torch.float16, seed=4, grad=True)
    out = scaled_dot_product_attention(q, k, v, enable_gqa=True)
    saved = [t for t in out.grad_fn.saved_tensors if t is not None]
    assert not any(t.dtype == torch.float32 and t.shape == out.shape for t in saved)
    (lo,) = [t for t in saved if t.shape == out.shape and t.data_ptr() not in (out.data_ptr(), q.data_ptr())]
    assert lo.dtype == torch.float16
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(2, 1),
                                                           v.double().repeat_interleave(2, 1))
    # lo is what rounding out dropped: at most half of out's spacing, and mostly not zero
    spacing = (torch.nextafter(out.abs(), torch.full_like(out, math.inf)) - out.abs()).double()
    assert (lo.double().abs() <= spacing / 2).all()
    assert (lo != 0).float().mean() > 0.5
    err_hi = (out.double() - ref).abs().mean().item()
    err_sum = (out.double() + lo.double() - ref).abs().mean().item()
    assert err_sum < 0.8 * err_hi, (err_hi, err_sum)  # (the kernel's own float32 error remains)


@pytest.mark.parametrize("kv_layout", ["projection", "contiguous", "sliced"])
def test_gradients_are_laid_out_as_their_operands(device, kv_layout):
    # A model's q, k, v are (B, H, S, D) views of a projection's (B, S, H, D) output: their
    # gradients come back in that layout (autograd's view of them back to (B, S, H * D) copies
    # nothing), as the fake lays them out (compiled graphs check the strides); an operand that
    # is not dense gets a dense gradient with its dimensions in the operand's memory order. Values
    # as torch's.
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.Generator().manual_seed(5)
    b, hq, hkv, s, d = 2, 4, 2, 11, 16
    q = torch.randn(b, s, hq, d, generator=g).to(device).transpose(1, 2)
    if kv_layout == "projection":
        k, v = (torch.randn(b, s, hkv, d, generator=g).to(device).transpose(1, 2) for _ in range(2))
    elif kv_layout == "contiguous":
        k, v = (torch.randn(b, hkv, s, d, generator=g).to(device) for _ in range(2))
    else:  # k and v sliced out of one (B, S, 2 * Hkv, D) buffer: not dense, and not alike
        kv = torch.randn(b, s, 2 * hkv, d, generator=g).to(device)
        k, v = kv[:, :, :hkv].transpose(1, 2), kv[:, :, hkv:].transpose(1, 2)
    got, want = _grads_vs_torch(q, k, v, causal=True, gqa=True, seed=2)
    _assert_close_all(got, want, 1e-5)
    _, dq, dk, dv = got
    assert dq.stride() == q.stride()
    if kv_layout == "contiguous":
        assert dk.is_contiguous()
    else:
        assert dk.transpose(1, 2).is_contiguous()
        if kv_layout == "projection":
            assert dk.stride() == k.stride()
    assert dv.stride() == dk.stride()
    api = importlib.import_module("roofkit.ops.attention.api")
    out, lse, _ = api._attention_fwd(q, k, v, None, None, -1, 0, False, d ** -0.5, False, False)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fq, fk, fv, fo, fl = (mode.from_tensor(t) for t in (q, k, v, out, lse))
        fake = api._attention_bwd_fake(fo, fq, fk, fv, fo, None, fl, None, None, None, -1, 0, False, 0.25, False)
    assert [t.stride() for t in fake] == [dq.stride(), dk.stride(), dv.stride()]


def _masks_like_transformers(b, hq, s):
    """The masks a model gets (and some it could): True = the pair takes part."""
    g = torch.Generator().manual_seed(7)
    i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
    causal = j <= i
    keep = torch.ones(b, s, dtype=torch.bool)
    keep[0, :5] = False  # left padding of the first sequence
    seg = (torch.arange(s) >= 23).long()  # two sequences packed into one row
    rows_dead = causal.clone()
    rows_dead[17:21] = False
    return {
        "causal_4d": causal.expand(b, 1, s, s),
        "causal_left_padding": causal[None, None] & keep[:, None, None, :],
        "packed_sequences": (causal & (seg[:, None] == seg[None, :])).expand(b, 1, s, s),
        "sliding_window": causal & (j > i - 9),
        "per_head_random": torch.rand(b, hq, s, s, generator=g) > 0.7,
        "rows_without_keys": rows_dead,
        "padding_keys_only": keep[:, None, None, :],
        "additive_causal": torch.zeros(s, s).masked_fill(~causal, -math.inf),
        "additive_finite_min": torch.zeros(s, s).masked_fill(~causal, torch.finfo(torch.float32).min),
    }


@pytest.mark.parametrize("name", list(_masks_like_transformers(2, 4, 48)))
def test_mask_ranges_skip_only_hidden_blocks(tunables, device, name):
    # With an attn_mask the kernels visit only the blocks inside the span the mask leaves visible
    # (a pre-pass on the device): output and gradients bitwise those of visiting every block,
    # and as torch's.
    b, hq, hkv, s, d = 2, 4, 2, 48, 16
    mask = _masks_like_transformers(b, hq, s)[name].to(device)
    q, k, v = _qkv(b, hq, hkv, s, s, d, device, seed=9)
    runs = []
    for pairs in (2**62, 0):  # ranges never taken, then always
        tunables("flash_attention", MASK_RANGES_MIN_PAIRS=pairs)
        got, want = _grads_vs_torch(q, k, v, mask=mask, gqa=True, seed=4)
        runs.append(got)
    for name_, a, c in zip(("out", "dq", "dk", "dv"), *runs):
        assert torch.equal(a, c), name_
    _assert_close_all(runs[1], want, 1e-5)


def test_mask_ranges_are_the_visible_span_per_block(device):
    # Causal 64 x 64 in blocks of 16: query block i sees keys [0, 16 (i + 1)); key block j is
    # seen by rows [16 j, 64); a padding mask (B, 1, 1, Sk) spans its kept keys for every block;
    # a block the mask hides entirely gets first > last.
    i, j = torch.arange(64)[:, None], torch.arange(64)[None, :]
    m, _, _, is_bool = L._mask_args((j <= i).to(device), torch.empty(1, 2, 64, 8, device=device), 64)
    ranges, strides = L._mask_ranges(m, is_bool, 16, 16, 1, False)
    assert ranges.shape == (1, 2, 4, 2) and strides[1] == 0
    assert ranges[0, 0].tolist() == [[0, 16], [0, 32], [0, 48], [0, 64]]
    ranges, _ = L._mask_ranges(m, is_bool, 16, 16, 2, True)
    assert ranges.shape == (1, 1, 4, 2) and ranges[0, 0].tolist() == [[0, 64], [16, 64], [32, 64], [48, 64]]
    keep = torch.zeros(2, 1, 1, 64, dtype=torch.bool)
    keep[0, ..., 20:40] = True  # the second sequence keeps no key at all
    m, _, _, is_bool = L._mask_args(keep.to(device), torch.empty(2, 2, 64, 8, device=device), 64)
    ranges, strides = L._mask_ranges(m, is_bool, 16, 16, 1, False)
    assert strides[2] == 0 and ranges[0, 0, 0].tolist() == [20, 40]
    first, last = ranges[1, 0, 0].tolist()
    assert first > last
    ranges, _ = L._mask_ranges(m, is_bool, 16, 16, 1, True)
    assert ranges[0, 0].tolist() == [[64, 0], [0, 64], [0, 64], [64, 0]]


def test_kernels_visit_only_the_ranges_they_are_given(monkeypatch, tunables, device):
    # Ranges that hide everything leave every row without a key in the forward (output 0) and
    # every block unvisited in both backward kernels (gradients 0): the kernels read them.
    tunables("flash_attention", MASK_RANGES_MIN_PAIRS=0)
    real = L._mask_ranges

    def nothing(m, mask_bool, block_m, block_n, g, over_queries):
        ranges, strides = real(m, mask_bool, block_m, block_n, g, over_queries)
        empty = torch.tensor([ranges.shape[-2] * 10**6, 0], dtype=torch.int32, device=ranges.device)
        return empty.expand(ranges.shape), (0, 0, 0)

    monkeypatch.setattr(L, "_mask_ranges", nothing)
    q, k, v = _qkv(1, 2, 1, 40, 40, 16, device, seed=2, grad=True)
    mask = torch.ones(40, 40, dtype=torch.bool, device=device)
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    grads = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert (out == 0).all() and all((gr == 0).all() for gr in grads)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", ["causal_4d", "causal_left_padding", "packed_sequences", "per_head_random",
                                  "rows_without_keys", "additive_causal"])
def test_mask_ranges_skip_only_hidden_blocks_at_gpu_tiles(tunables, name, d):
    # The GPU's own tiles (64 to 256 rows or keys) over a ragged 1000-token sequence, bf16: with
    # and without the spans, the same bits.
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    b, hq, hkv, s = 2, 4, 2, 1000
    masks = _masks_like_transformers(b, hq, s)
    mask = masks[name].cuda()
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(b, h, s, d, generator=g).cuda().to(torch.bfloat16) for h in (hq, hkv, hkv))
    dy = torch.randn(b, hq, s, d, generator=g).cuda().to(torch.bfloat16)
    runs = []
    for pairs in (2**62, 0):
        tunables("flash_attention", MASK_RANGES_MIN_PAIRS=pairs)
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        out = scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=True)
        runs.append((out, *torch.autograd.grad(out, (qq, kk, vv), dy)))
    for label, a, c in zip(("out", "dq", "dk", "dv"), *runs):
        assert torch.equal(a, c), label


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bfloat16, torch.bool])
def test_attn_mask_of_any_dtype_fits_the_gpu_tiles(d, mask_dtype):
    # The GPU's tiles with a mask tile streamed beside K and V (a float32 mask of 256 x 64 is
    # 64 KiB a pipeline stage): forward and backward launch (no OutOfResources) and match torch's
    # float64 SDPA, for every head dimension the sweeps tuned.
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    q, k, v = (t.to(torch.bfloat16) for t in _qkv(1, 2, 1, 300, 300, d, "cuda", seed=d))
    keep = torch.rand((1, 1, 300, 300), generator=torch.Generator().manual_seed(1)) < 0.7
    keep[..., 0] = True
    mask = keep if mask_dtype == torch.bool else torch.zeros(keep.shape).masked_fill(~keep, -math.inf).to(mask_dtype)
    got, want = _grads_vs_torch(q, k, v, mask=mask.cuda(), gqa=True)
    _assert_close_all(got, want, 3e-2)


def test_tiles_fit_the_shared_memory_with_a_mask_tile(monkeypatch):
    # Triton keeps num_stages copies of every streamed tile: with an attn_mask each kernel's ring
    # stays within the device's shared memory (H200: 232448 bytes; the forward's 256 x 64 tile with
    # a float32 mask asked 3 x 96 KiB + 1 KiB = 295936 there), and without a mask the sweep-tuned
    # tiles are kept as they are.
    monkeypatch.setattr(L, "INTERPRETED", False)
    limit = 232448
    assert 3 * 64 * (2 * 128 * 2 + 256 * 4) + 1024 == 295936  # the model, against the measurement
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        size = torch.tensor([], dtype=dtype).element_size()
        for d_pad in (16, 32, 64, 128, 256):
            fwd = [L._fwd_config(d_pad, causal, dtype, 4096) for causal in (False, True)]
            kv, dq = L._bwd_config(d_pad, dtype)
            for mask_size in (0, 1, 2, 4):
                def by_keys(c):
                    return c.BLOCK_N * (2 * d_pad * size + c.BLOCK_M * mask_size)

                def by_rows(c):
                    return c.BLOCK_M * (2 * d_pad * size + c.BLOCK_N * mask_size)

                for cfg, stage in ((*fwd[:1], by_keys), (fwd[1], by_keys), (kv, by_rows), (dq, by_keys)):
                    fit = L._fit_shared(cfg, stage, limit)
                    assert stage(fit) * fit.num_stages + L.SHARED_SLACK <= limit, (dtype, d_pad, mask_size, cfg)
                    assert fit.BLOCK_M >= 16 and fit.num_warps <= cfg.num_warps
                    if mask_size == 0:
                        assert fit == cfg, (dtype, d_pad, cfg)
    big = L._fwd_config(128, False, torch.bfloat16, 4096)
    fit = L._fit_shared(big, lambda c: c.BLOCK_N * (2 * 128 * 2 + c.BLOCK_M * 4), limit)
    assert (big.num_stages, fit) == (3, big._replace(num_stages=2))


@pytest.mark.parametrize("path", ["prefill", "split_kv", "masked", "window"])
def test_64_bit_offsets_give_the_same_bits(tunables, device, path):
    # Offsets that can pass 2**31 (long sequences, a (B, S, H, D) layout) are formed in 64 bits:
    # every kernel's 64-bit form, forced on small inputs, gives the bits of its 32-bit form,
    # forward (prefill and split-KV decoding) and backward.
    b, hq, hkv, d = 2, 4, 2, 16
    sq, sk = (1, 70) if path == "split_kv" else (37, 53)
    if path == "split_kv":
        tunables("flash_attention", DECODE_MIN_SK=0, DECODE_MIN_BLOCKS=1, DECODE_PROGRAMS_PER_SM=64)
    g = torch.Generator().manual_seed(12)
    q = torch.randn(b, sq, hq, d, generator=g).to(device).transpose(1, 2)  # a model's layout
    k, v = (torch.randn(b, sk, hkv, d, generator=g).to(device).transpose(1, 2) for _ in range(2))
    mask = (torch.rand(sq, sk, generator=g) > 0.3).to(device) if path == "masked" else None
    runs = []
    for start in (2**31, 0):
        tunables("flash_attention", INT64_FROM=start, MASK_RANGES_MIN_PAIRS=0)
        qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        if path == "window":
            out = flash_attention(qq, kk, vv, causal=True, window_size=(9, 0))
        else:
            out = scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=True)
        dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out)
        runs.append((out, *torch.autograd.grad(out, (qq, kk, vv), dy)))
    for label, a, c in zip(("out", "dq", "dk", "dv"), *runs):
        assert torch.equal(a, c), label
