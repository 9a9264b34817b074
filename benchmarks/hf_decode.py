"""HF Llama decoding, one token at a time, with and without roofkit's RMSNorm and attention.

    python benchmarks/hf_decode.py [--layers 4] [--prompt 2048] [--tokens 64] [--json OUT]

A LlamaForCausalLM with Llama-3-8B layer shapes (hidden 4096, 32 heads, 8 KV heads, MLP 14336,
vocabulary 128256), random weights, bf16, batch 1: the prompt is prefilled, then ``--tokens``
tokens are decoded greedily with the KV cache; the figure is the median over 3 repeats of the
wall time per decoded token (one synchronize per repeat). Variants: "eager" (HF as shipped, its
attention through torch SDPA) and "roofkit" (every RMSNorm through roofkit.rms_norm, attention
through roofkit.scaled_dot_product_attention). Both decode the same tokens (checked).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import roofkit


def _model(layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                         num_hidden_layers=layers, vocab_size=128256, max_position_embeddings=8192,
                         rope_theta=500000.0, torch_dtype=torch.bfloat16)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    return model


CALLS = {"rms_norm": 0, "attention": 0, "attention_fallback": 0}


def _roofkit_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention-function contract: (B, H, S, D) in, (B, S, H, D) out. The same
    decisions as transformers' own SDPA path: its boolean / additive mask is passed on (cut to the
    keys), and is_causal (top-left, as torch's) only without a mask and for more than one query."""
    if dropout:
        CALLS["attention_fallback"] += 1
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    CALLS["attention"] += 1
    if attention_mask is not None and attention_mask.dim() == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    out = roofkit.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, is_causal=causal,
                                               scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _patch(model) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register("roofkit", _roofkit_attention)
    AttentionMaskInterface.register("roofkit", sdpa_mask)
    model.config._attn_implementation = "roofkit"
    for layer in model.model.layers:
        layer.self_attn.config._attn_implementation = "roofkit"
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    for norm in norms:
        def forward(x, norm=norm):
            CALLS["rms_norm"] += 1
            return roofkit.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
        norm.forward = forward


@torch.inference_mode()
def _decode(model, prompt: torch.Tensor, tokens: int):
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:
        cache = DynamicCache()
    out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
    nxt = out.logits[:, -1:].argmax(-1)
    got = [nxt]
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(tokens):
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        got.append(nxt)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / tokens * 1e3, torch.cat(got, 1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import transformers

    prompt = torch.randint(0, 128256, (1, a.prompt), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    rows = {}
    for variant in ("eager", "roofkit", "eager", "roofkit"):  # interleaved: the second pair is reported
        model = _model(a.layers)  # fresh each time, the same weights (the same seed)
        if variant == "roofkit":
            _patch(model)
        times, seq = [], None
        for _ in range(3):
            ms, seq = _decode(model, prompt, a.tokens)
            times.append(ms)
        del model
        torch.cuda.empty_cache()
        rows[variant] = {"ms_per_token": statistics.median(times), "all_ms": times, "tokens": seq.tolist()[0]}
    same = rows["eager"]["tokens"] == rows["roofkit"]["tokens"]
    record = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
        "roofkit": roofkit.__version__ if hasattr(roofkit, "__version__") else None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "layers": a.layers, "prompt": a.prompt,
        "tokens": a.tokens, "same_tokens": same, "calls": CALLS,
        "eager_ms_per_token": rows["eager"]["ms_per_token"], "roofkit_ms_per_token": rows["roofkit"]["ms_per_token"],
        "roofkit_over_eager": rows["roofkit"]["ms_per_token"] / rows["eager"]["ms_per_token"],
        "all_ms": {k: v["all_ms"] for k, v in rows.items()},
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(record, f, indent=1)
    print(f"decode ms/token ({a.layers} layers, prompt {a.prompt}, {a.tokens} tokens): eager "
          f"{record['eager_ms_per_token']:.3f}  roofkit {record['roofkit_ms_per_token']:.3f}  "
          f"ratio {record['roofkit_over_eager']:.3f}  same tokens: {same}  calls: {CALLS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
