"""Small launches of the training kernels for compute-sanitizer: glu_linear forward and backward
(the product written again in the backward), attention with its output's rounding residual
(prefill, split-KV decoding, the backward's preprocess and both backward kernels), attention
with attn_mask spans (RANGED, every block's span), flash_attention with segment ids (packed
sequences), the AdamW update; bf16, fp16 and fp32, odd sizes.

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_training.py
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize_training.py
"""
import torch, roofkit
from roofkit.ops.glu import glu_linear
from roofkit.optim import AdamW
g = torch.Generator(device="cuda").manual_seed(0)
def rn(*s, dtype=torch.bfloat16):
    return torch.randn(*s, device="cuda", dtype=dtype, generator=g)
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    for (t, i, o) in [(7, 33, 19), (64, 128, 64), (3, 257, 5), (1, 8, 1)]:
        gate = rn(t, i, dtype=dtype).requires_grad_(); up = rn(t, i, dtype=dtype).requires_grad_()
        w = rn(o, i, dtype=dtype).requires_grad_(); b = rn(o, dtype=dtype).requires_grad_()
        for act in ("silu", "gelu", "gelu_tanh"):
            y = glu_linear(gate, up, w, b, activation=act)
            torch.autograd.grad(y, (gate, up, w, b), torch.randn_like(y))
    for (B, hq, hkv, sq, sk, d, causal) in [(2, 4, 2, 37, 37, 64, True), (1, 2, 1, 1, 700, 128, False),
                                            (1, 4, 4, 130, 130, 128, True), (2, 2, 1, 16, 33, 80, False)]:
        q = rn(B, hq, sq, d, dtype=dtype).requires_grad_(); k = rn(B, hkv, sk, d, dtype=dtype).requires_grad_()
        v = rn(B, hkv, sk, d, dtype=dtype).requires_grad_()
        o = roofkit.scaled_dot_product_attention(q, k, v, is_causal=causal and sq == sk, enable_gqa=hq != hkv)
        torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
# attn_mask spans (RANGED): every block's span from the pre-pass, forward and both backward kernels
import roofkit.config  # noqa: E402

with roofkit.config.override("flash_attention", MASK_RANGES_MIN_PAIRS=0):
    for (B, hq, hkv, s, d) in [(2, 4, 2, 300, 64), (1, 2, 1, 517, 128)]:
        i, j = torch.arange(s, device="cuda")[:, None], torch.arange(s, device="cuda")[None, :]
        for mask in ((j <= i), (j <= i) & (j > i - 100), torch.rand(B, 1, s, s, device="cuda", generator=g) > 0.6):
            q = rn(B, hq, s, d).requires_grad_(); k = rn(B, hkv, s, d).requires_grad_(); v = rn(B, hkv, s, d).requires_grad_()
            o = roofkit.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=hq != hkv)
            torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
# segment ids (packed sequences): ids compared inside the tiles, causal / window / cross lengths,
# forward and both backward kernels (deterministic too), odd lengths and segment boundaries
for dtype in (torch.bfloat16, torch.float32):
    for (B, hq, hkv, sq, sk, d, causal, window) in [(2, 4, 2, 300, 300, 64, True, (-1, -1)),
                                                   (1, 2, 1, 517, 517, 128, True, (63, 0)),
                                                   (2, 2, 2, 37, 129, 80, False, (-1, -1))]:
        ids_q = torch.sort(torch.randint(0, 5, (B, sq), device="cuda", generator=g)).values
        ids_k = ids_q if sq == sk else torch.sort(torch.randint(0, 5, (B, sk), device="cuda", generator=g)).values
        seg = ids_q if sq == sk else (ids_q, ids_k)
        for det in (False, True):
            q = rn(B, hq, sq, d, dtype=dtype).requires_grad_(); k = rn(B, hkv, sk, d, dtype=dtype).requires_grad_()
            v = rn(B, hkv, sk, d, dtype=dtype).requires_grad_()
            o = roofkit.flash_attention(q, k, v, causal=causal, window_size=window, segment_ids=seg, deterministic=det)
            torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
for dtype in (torch.bfloat16, torch.float32):
    ps = [torch.nn.Parameter(rn(n, dtype=dtype)) for n in (1, 7, 1000, 4099)]
    opt = AdamW(ps, lr=1e-3, weight_decay=0.1)
    for _ in range(2):
        for p in ps:
            p.grad = torch.randn_like(p)
        opt.step()
torch.cuda.synchronize()
print("sanitize new cases ran")
