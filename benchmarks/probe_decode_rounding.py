"""Greedy decoding of a small random bf16 Llama (2 layers, hidden 256, 64-token prefix, 24 new
tokens) on the CPU (interpreter), eager against roofkit.patch in full and in parts: how often
16-bit rounding alone moves greedy tokens when the top two logits are close (random weights).

    python benchmarks/probe_decode_rounding.py
"""
import copy, os, torch
os.environ.setdefault("TRITON_INTERPRET", "1")
import roofkit
from transformers import LlamaConfig, LlamaForCausalLM, DynamicCache
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=4096, max_position_embeddings=1024)
base = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
ids = torch.randint(0, 4096, (1, 64))
def decode(m, n=24):
    with torch.no_grad():
        cache = DynamicCache(config=m.config)
        out = m(input_ids=ids, use_cache=True, past_key_values=cache, logits_to_keep=1)
        nxt = out.logits[:, -1:].argmax(-1); made = [nxt]; gaps = []
        for _ in range(n):
            lg = out.logits[0, -1].float(); top = lg.topk(2).values; gaps.append(float(top[0] - top[1]))
            out = m(input_ids=nxt, use_cache=True, past_key_values=cache)
            nxt = out.logits[:, -1:].argmax(-1); made.append(nxt)
        return torch.cat(made, -1).flatten().tolist(), gaps, out.logits.float()
ref, gaps, _ = decode(base)
print("median top-2 gap", sorted(gaps)[len(gaps)//2], "std logits", float(base(input_ids=ids).logits.detach().float().std()))
for kw in (dict(), dict(rms_norm=False), dict(attention=False), dict(rope=False, mlp=False)):
    m = roofkit.patch(copy.deepcopy(base), **kw)
    got, _, _ = decode(m)
    first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), len(ref))
    print(kw, "match", sum(a == b for a, b in zip(got, ref)) / len(ref), "first diff at", first)
