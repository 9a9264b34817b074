"""roofkit.patch on transformers models of each supported family (tiny configurations, float32,
the Triton interpreter on CPU): a patched copy trains as the original does (losses of two AdamW
steps within 1e-4 relative, gradients of the first), gives the original's logits on the real
tokens of a padded batch, and generates the same tokens."""

import copy
import sys

import pytest
import torch

import roofkit

transformers = pytest.importorskip("transformers", reason="transformers is the integration's optional extra")

pytestmark = pytest.mark.integration

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 4}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16, "hidden_act": "gelu_pytorch_tanh"}),
}
VOCAB = 96


def _model(family: str, device):
    cfg_name, model_name, extra = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          **extra)
    torch.manual_seed(sum(map(ord, family)))
    model = getattr(transformers, model_name)(cfg).to(device)
    with torch.no_grad():  # norms away from their initial ones / zeros (Gemma's 1 + weight)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_model_trains_evaluates_and_generates_as_the_original(family, device, monkeypatch):
    calls = {}
    for op in ("rms_norm", "rope", "swiglu", "geglu", "scaled_dot_product_attention", "linear_cross_entropy"):
        def counted(*args, _op=op, _fn=getattr(roofkit, op), **kwargs):
            calls[_op] = calls.get(_op, 0) + 1
            return _fn(*args, **kwargs)
        monkeypatch.setattr(roofkit, op, counted)
    import roofkit.nn as integration_mlp  # (the patched MLPs run roofkit.nn's gated forward)

    def glu_linear(*args, _fn=integration_mlp.glu_linear, **kwargs):
        calls["glu_linear"] = calls.get("glu_linear", 0) + 1
        return _fn(*args, **kwargs)
    monkeypatch.setattr(integration_mlp, "glu_linear", glu_linear)
    ref = _model(family, device)
    model = roofkit.patch(copy.deepcopy(ref))
    summary = model.roofkit_patch
    kinds = {"rms_norm", "rope", "attention", "loss", "geglu" if family == "gemma" else "swiglu"}
    assert kinds <= set(summary.replaced), str(summary)
    assert summary.replaced["rms_norm"] == (5 if family == "qwen3" else 3)  # Qwen3's per-head q / k norms too
    assert type(model.model.norm).__name__.startswith("Roofkit") and type(ref.model.norm).__name__.startswith(family[:3].title()[:3])
    assert model.state_dict().keys() == ref.state_dict().keys()

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, 9), generator=g).to(device)
    labels = ids.clone()
    labels[0, :3] = -100
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref)]
    for step in range(2):
        losses = []
        for m, opt in zip((model, ref), opts):
            m.train()
            opt.zero_grad()
            out = m(input_ids=ids, labels=labels)
            out.loss.backward()
            losses.append(out.loss.item())
            if m is model:
                outs_logits = out.logits
        assert abs(losses[0] - losses[1]) <= 1e-4 * abs(losses[1]), (step, losses)
        if step == 0:
            # one training step went through every replaced op (the original model through none)
            # (training: the gated product and down_proj in one call, the product not saved)
            assert calls == {"rms_norm": summary.replaced["rms_norm"], "rope": 1, "glu_linear": 1,
                             "scaled_dot_product_attention": 1, "linear_cross_entropy": 1}, calls
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5 * q.grad.abs().max().item(), msg=name)
        assert out.logits is not None and outs_logits is None  # the fused loss makes no logits
        for opt in opts:
            opt.step()

    # eval on a left-padded batch: the same logits on the real tokens
    mask = torch.ones(2, 9, dtype=torch.long, device=device)
    mask[1, :3] = 0
    model.eval()
    ref.eval()
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask).logits
        want = ref(input_ids=ids, attention_mask=mask).logits
        real = mask.bool()
        torch.testing.assert_close(got[real], want[real], rtol=1e-4, atol=1e-4)
        # greedy decoding with the KV cache (one query per step) gives the same tokens
        a = model.generate(ids[:1], max_new_tokens=2, do_sample=False)
        b = ref.generate(ids[:1], max_new_tokens=2, do_sample=False)
    assert torch.equal(a, b)


def test_patch_refuses_other_models_and_can_leave_parts():
    class NotHF(torch.nn.Module):
        pass

    with pytest.raises(ValueError, match="roofkit.patch: .*supported families: llama, mistral, qwen2, qwen3, gemma"):
        roofkit.patch(NotHF())
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32)
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported"):
        roofkit.patch(transformers.GPT2LMHeadModel(cfg))
    ref = _model("llama", "cpu")
    model = roofkit.patch(copy.deepcopy(ref), rope=True, attention=False, loss=False, mlp=False)
    assert set(model.roofkit_patch.replaced) == {"rms_norm", "rope"}
    assert type(model).__name__ == "LlamaForCausalLM" and model.config._attn_implementation == ref.config._attn_implementation
    assert type(model.model.layers[0].mlp).__name__ == "LlamaMLP"


def test_e2e_worker_tiny_train_and_decode_records():
    # roofkit e2e's per-provider run, in this process (the CLI runs it in a fresh one): a tiny
    # Llama through the interpreter, roofkit's first-step loss equal to eager's, decode through
    # the KV cache; the records carry what the results table needs.
    from roofkit import e2e

    base = dict(model="llama3-8b", layers=1, seq=8, batch=1, steps=1, warmup=0, decode_tokens=2, tiny=True)
    eager = e2e._worker({**base, "mode": "train", "provider": "eager"})
    ours = e2e._worker({**base, "mode": "train", "provider": "roofkit"})
    for rec in (eager, ours):
        assert rec["steps"] == 1 and rec["step_ms"] > 0 and rec["tokens_per_s"] > 0 and rec["first_step_s"] > 0
    assert ours["parameters"] == eager["parameters"] and abs(ours["loss0"] - eager["loss0"]) <= 1e-4 * eager["loss0"]
    assert (eager["optimizer"], ours["optimizer"]) == ("torch.optim.AdamW", "roofkit.optim.AdamW")
    dec = e2e._worker({**base, "mode": "decode", "provider": "eager"})
    ours = e2e._worker({**base, "mode": "decode", "provider": "roofkit"})
    assert dec["loss0"] is None and dec["step_ms"] > 0 and len(dec["tokens"]) == base["decode_tokens"] + 1
    assert ours["tokens"] == dec["tokens"]  # greedy tokens through the KV cache, as eager's


def test_fused_loss_takes_transformers_loss_arguments_and_leaves_a_hooked_head():
    # ignore_index, shift_labels (context-parallel training), num_items_in_batch and
    # return_dict=False as transformers' own loss takes them; a head with a forward hook (an
    # adapter, say) runs as the model runs it.
    ref = _model("llama", "cpu")
    model = roofkit.patch(copy.deepcopy(ref))
    ref.train()
    model.train()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (2, 7), generator=g)
    labels = ids.clone()
    labels[0, :2] = -1
    shifted = torch.randint(0, VOCAB, (2, 7), generator=g)
    calls = [dict(labels=labels, ignore_index=-1), dict(labels=ids, shift_labels=shifted),
             dict(labels=ids, num_items_in_batch=torch.tensor(5))]
    for kw in calls:
        want = ref(input_ids=ids, **kw).loss
        got = model(input_ids=ids, **kw).loss
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=str(list(kw)))
    as_tuple = model(input_ids=ids, labels=ids, return_dict=False)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], model(input_ids=ids, labels=ids).loss)
    seen = []
    model.lm_head.register_forward_hook(lambda mod, args, out: seen.append(out.shape) or out * 0.5)
    ref.lm_head.register_forward_hook(lambda mod, args, out: out * 0.5)
    out = model(input_ids=ids, labels=ids)
    assert seen and out.logits is not None
    torch.testing.assert_close(out.loss, ref(input_ids=ids, labels=ids).loss, rtol=1e-5, atol=1e-6)


def test_attention_follows_autocast():
    # float32 weights under bfloat16 autocast: rope's float32 tables promote q and k; torch's SDPA
    # runs in the autocast dtype, and so must the patched attention (not refuse, not run float32).
    ref = _model("llama", "cpu")
    model = roofkit.patch(copy.deepcopy(ref))
    ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(4))
    seen = []
    real = roofkit.scaled_dot_product_attention
    try:
        roofkit.scaled_dot_product_attention = lambda q, *a, **k: seen.append(q.dtype) or real(q, *a, **k)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = model(input_ids=ids, use_cache=False).logits
            want = ref(input_ids=ids, use_cache=False).logits
    finally:
        roofkit.scaled_dot_product_attention = real
    assert seen == [torch.bfloat16]
    torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)


def test_e2e_under_fsdp2_on_two_gloo_processes_gives_the_one_process_loss(tmp_path):
    # `roofkit e2e --nproc 2`: torchrun, two CPU processes (gloo), the patched tiny model
    # fully_shard-ed per decoder layer; every rank takes the same batch, so the step-0 loss is
    # the one-process loss.
    import json

    from roofkit import e2e

    base = dict(model="llama3-8b", layers=1, seq=8, batch=1, steps=1, warmup=0, decode_tokens=2, tiny=True)
    one = e2e._worker({**base, "mode": "train", "provider": "roofkit"})
    rc = e2e.main(["--providers", "roofkit", "--layers", "1", "--seq", "8", "--batch", "1", "--steps", "1",
                   "--warmup", "0", "--nproc", "2", "--timeout", "240", "--out", str(tmp_path)])
    (rec,) = json.loads((tmp_path / "results.json").read_text())["records"]
    assert rc == 0 and rec["status"] == "ok", rec
    assert rec["world_size"] == 2 and rec["parameters"] == one["parameters"]  # (DTensors count globally)
    assert abs(rec["loss0"] - one["loss0"]) <= 1e-5 * one["loss0"], (rec["loss0"], one["loss0"])


def test_a_dtensor_argument_is_refused_with_what_to_do(tmp_path):
    # A sharded (or replicated) FSDP2 parameter reaching an op outside the module's forward: an
    # error naming the op, the argument and the way out, never a silent local computation.
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        x, w = torch.randn(4, 8), torch.randn(8)
        for placement in (Shard(0), Replicate()):
            wd = distribute_tensor(w, mesh, [placement])
            with pytest.raises(TypeError, match=r"roofkit\.rms_norm: weight is a DTensor .*weight\.full_tensor\(\)"):
                roofkit.rms_norm(x, (8,), wd, 1e-5)
            with pytest.raises(TypeError, match=r"roofkit\.swiglu: gate is a DTensor"):
                roofkit.swiglu(distribute_tensor(x, mesh, [placement]), x)
    finally:
        dist.destroy_process_group()


def test_mask_function_leaves_the_plain_causal_mask_to_is_causal(monkeypatch):
    # roofkit's registered mask function: None for the causal mask of an unpadded batch with as
    # many keys as queries (or one query), decided from the arguments alone (so also while
    # torch.compile traces, where transformers' own check builds the mask); the 4-D mask otherwise.
    import inspect

    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, causal_mask_function, sdpa_mask

    roofkit.patch(_model("llama", "cpu"))
    mask_fn = ALL_MASK_ATTENTION_FUNCTIONS["roofkit"]
    # as while torch.compile (torch < 2.14) traces: transformers cannot skip the mask itself
    # (where its version still decides that through this function)
    masking = sys.modules["transformers.masking_utils"]
    if hasattr(masking, "is_torchdynamo_exporting"):
        monkeypatch.setattr(masking, "is_torchdynamo_exporting", lambda: True)
    params = inspect.signature(sdpa_mask).parameters

    def call(q, kv, **kw):
        where = dict(q_length=q) if "q_length" in params else dict(cache_position=torch.arange(kv - q, kv))
        return mask_fn(batch_size=2, kv_length=kv, **where, **kw)

    assert call(7, 7) is None and call(1, 9) is None
    padding = torch.ones(2, 7, dtype=torch.bool)
    padding[0, :2] = False
    for kw in (dict(attention_mask=padding), dict(allow_is_causal_skip=False),
               dict(mask_function=lambda b, h, q, k: k <= q + 1, allow_is_causal_skip=False)):
        m = call(7, 7, **kw)
        assert isinstance(m, torch.Tensor) and m.shape[-2:] == (7, 7), kw
    full = sdpa_mask(batch_size=2, kv_length=7, allow_is_causal_skip=False, mask_function=causal_mask_function,
                     **(dict(q_length=7) if "q_length" in params else dict(cache_position=torch.arange(7))))
    assert torch.equal(call(7, 7, allow_is_causal_skip=False), full)


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma"])
@pytest.mark.parametrize("tracing", [False, True], ids=["eager", "as_while_compiling"])
def test_packed_sequences_reach_attention_as_segment_ids(family, tracing, device, monkeypatch):
    # Training on packed sequences (positions restarting inside a row, no padding mask, no cache):
    # the model's create_causal_mask hands roofkit's attention the sequences' ids instead of a
    # (B, 1, S, S) mask, and the loss and gradients are the original model's (SDPA with
    # transformers' packed mask). As while torch.compile traces, transformers cannot check the
    # positions and takes the packed path for every batch: unpacked rows then give one id a row.
    # A padding mask or a cache still gets transformers' mask (no ids).
    import transformers.masking_utils as masking

    if tracing:
        monkeypatch.setattr(masking, "is_tracing", lambda *a: True)
    seen = []

    def flash(*args, _fn=roofkit.flash_attention, **kwargs):
        seen.append(kwargs.get("segment_ids"))
        return _fn(*args, **kwargs)

    monkeypatch.setattr(roofkit, "flash_attention", flash)
    ref = _model(family, device)
    model = roofkit.patch(copy.deepcopy(ref))
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, VOCAB, (2, 19), generator=g).to(device)
    pos = torch.stack([torch.cat([torch.arange(6), torch.arange(9), torch.arange(4)]), torch.arange(19)]).to(device)
    losses = []
    for m in (model, ref):
        m.train()
        loss = m(input_ids=ids, position_ids=pos, labels=ids, use_cache=False).loss
        loss.backward()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) <= 1e-4 * abs(losses[1]), losses
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5 * q.grad.abs().max().item(), msg=name)
    assert len(seen) == 1 and seen[0] is not None
    assert seen[0][0].tolist() == [0] * 6 + [1] * 9 + [2] * 4 and seen[0][1].tolist() == [0] * 19
    seen.clear()
    unpacked = torch.arange(19, device=device).expand(2, 19)
    model(input_ids=ids, position_ids=unpacked, labels=ids, use_cache=False)
    assert (seen == [] if not tracing else len(seen) == 1 and (seen[0] == 0).all())  # eager: plain causal
    seen.clear()
    # no position ids: the model makes 0 .. S-1 itself, nothing can be packed: plain causal, traced or not
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    torch.testing.assert_close(loss, ref(input_ids=ids, labels=ids, use_cache=False).loss, rtol=1e-4, atol=1e-5)
    assert seen == []
    model.model(ids, None, pos, use_cache=False)  # (position ids given positionally: packed path)
    assert len(seen) == 1 and seen[0] is not None
    seen.clear()
    with torch.no_grad():
        padding = torch.ones(2, 19, dtype=torch.long, device=device)
        padding[0, :2] = 0
        model(input_ids=ids, position_ids=pos, attention_mask=padding, use_cache=False)
        model.eval()
        model(input_ids=ids, position_ids=pos, use_cache=True)
    assert seen == []


def test_patched_model_compiles_fullgraph_with_packed_sequences(device):
    # torch.compile(fullgraph) of a patched model: transformers takes its packed-sequence path
    # while tracing, the rebound create_causal_mask and rope trace without a graph break, and
    # the loss is the original model's (packed and unpacked rows).
    ref = _model("llama", device)
    model = roofkit.patch(copy.deepcopy(ref))
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(3)).to(device)
    pos = torch.stack([torch.cat([torch.arange(5), torch.arange(11)]), torch.arange(16)]).to(device)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    got = compiled(input_ids=ids, position_ids=pos, labels=ids, use_cache=False).loss
    want = ref(input_ids=ids, position_ids=pos, labels=ids, use_cache=False).loss
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    got = compiled(input_ids=ids, labels=ids, use_cache=False).loss  # (no position ids: plain causal)
    torch.testing.assert_close(got, ref(input_ids=ids, labels=ids, use_cache=False).loss, rtol=1e-4, atol=1e-5)


def test_patched_model_still_returns_hidden_states(device):
    # output_hidden_states: transformers records them for the classes its models registered when
    # built; the patched model's (renamed) classes keep that, and the states are the original's.
    ref = _model("qwen3", device).eval()
    model = roofkit.patch(copy.deepcopy(ref)).eval()
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(4)).to(device)
    with torch.no_grad():
        want = ref(input_ids=ids, output_hidden_states=True).hidden_states
        got = model(input_ids=ids, output_hidden_states=True).hidden_states
    assert got is not None and len(got) == len(want) == 2
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_e2e_combines_a_providers_processes_by_the_median():
    from roofkit import e2e

    def rec(ms, status="ok"):
        return {"provider": "roofkit", "status": status, "step_ms": ms, "tokens_per_s": 1e3 / ms} if status == "ok" \
            else {"provider": "roofkit", "status": status, "error": "boom"}

    one = e2e._combine([rec(5.0)])
    assert one["step_ms"] == 5.0 and "process_ms" not in one
    three = e2e._combine([rec(11.0), rec(5.0), rec(6.0)])
    assert three["step_ms"] == 6.0 and three["process_ms"] == [11.0, 5.0, 6.0] and three["processes_failed"] == 0
    assert e2e._combine([rec(7.0), rec(5.0)])["step_ms"] == 5.0  # (an even count: the lower middle)
    partial = e2e._combine([rec(0, "error"), rec(9.0), rec(8.0)])
    assert partial["step_ms"] == 8.0 and partial["process_ms"] == [None, 9.0, 8.0] and partial["processes_failed"] == 1
    assert e2e._combine([rec(0, "error"), rec(0, "error")])["status"] == "error"
    assert "processes: 11.00 5.00 6.00" in e2e._note(three)
    # --alternate: every process's rounds pooled, times and per-round ratios alike
    paired = [{**rec(ts[1]), "alternating": ["eager", "roofkit"], "step_times_ms": ts, "round_ratios": rs,
               "paired_vs_first": rs[1], "steps": 3}
              for ts, rs in (([4.0, 5.0, 9.0], [1.2, 1.3, 1.0]), ([6.0, 6.0, 6.0], [0.9, 0.95, 1.4]))]
    both = e2e._combine(paired)
    assert both["step_ms"] == 6.0 and both["steps"] == 6 and both["pooled"] == 2
    assert both["paired_vs_first"] == pytest.approx((1.0 + 1.2) / 2) and both["process_paired"] == [1.3, 0.95]
    assert both["tokens_per_s"] == 1e3 / 6.0
    assert "in 3 alternating rounds in each of 2 processes" in e2e._note(both) and "paired: 1.30x 0.95x" in e2e._note(both)


def test_e2e_alternating_runs_each_provider_in_one_process_as_alone():
    # `roofkit e2e --alternate`: eager and roofkit's models in one process, their timed steps
    # alternating; eager's decoded tokens are those it decodes alone (roofkit's patch is the
    # patched model's only), roofkit's equal them, and each record pairs its times with eager's.
    from roofkit import e2e

    base = dict(model="llama3-8b", layers=1, seq=8, batch=1, steps=3, warmup=0, decode_tokens=2, tiny=True)
    alone = e2e._worker({**base, "mode": "decode", "provider": "eager"})
    eager, ours = e2e._worker_alternating({**base, "mode": "decode", "providers": ["eager", "roofkit"]})
    assert (eager["provider"], ours["provider"]) == ("eager", "roofkit")
    assert eager["tokens"] == alone["tokens"] and ours["tokens"] == alone["tokens"]
    assert len(ours["step_times_ms"]) == 3 and eager["paired_vs_first"] == 1.0 and eager["peak_bytes"] is None
    paired = sorted(a / b for a, b in zip(eager["step_times_ms"], ours["step_times_ms"]))[1]
    assert ours["paired_vs_first"] == paired
    records = [eager, ours]
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        e2e._write(out, {}, base, records)
    assert ours["vs_eager"] == paired and "paired with eager in 3 alternating rounds" in e2e._note(ours)
    # a process where eager failed gives no ratio: vs eager falls back to the ratio of tokens/s
    alone = {**ours, "paired_vs_first": None, "round_ratios": []}
    with tempfile.TemporaryDirectory() as out:
        e2e._write(out, {}, base, [eager, alone])
    assert alone["vs_eager"] == pytest.approx(alone["tokens_per_s"] / eager["tokens_per_s"])


def test_e2e_alternate_refuses_train_and_liger(capsys):
    from roofkit import e2e

    for argv in (["--mode", "train", "--alternate"], ["--mode", "decode", "--providers", "eager", "liger", "--alternate"],
                 ["--mode", "decode", "--providers", "roofkit", "--alternate"],
                 ["--mode", "decode", "--providers", "eager", "eager", "roofkit"], ["--timeout", "nan"], ["--timeout", "-1"],
                 ["--timeout", "3e6"]):
        with pytest.raises(SystemExit) as err:
            e2e.main(argv)
        assert err.value.code == 2
    msg = capsys.readouterr().err
    assert "--alternate runs prefill and decode" in msg and "liger patches transformers' modules" in msg
    assert "name eager among --providers" in msg and "names a provider twice" in msg
    assert "must be a positive number of seconds up to 1e5, got nan" in msg and "got -1" in msg and "got 3e6" in msg


def test_e2e_cli_alternate_writes_paired_records(tmp_path):
    from roofkit import e2e

    rc = e2e.main(["--mode", "decode", "--providers", "roofkit", "eager", "--alternate", "--layers", "1", "--seq", "8",
                   "--steps", "2", "--decode-tokens", "2", "--out", str(tmp_path)])
    assert rc == 0
    import json

    got = json.loads((tmp_path / "results.json").read_text())
    assert got["spec"]["alternate"] is True
    recs = {r["provider"]: r for r in got["records"]}
    assert recs["roofkit"]["alternating"] == ["eager", "roofkit"]  # (eager first whatever the order given)
    assert recs["roofkit"]["vs_eager"] == recs["roofkit"]["paired_vs_first"] and recs["eager"]["vs_eager"] == 1.0
    assert recs["roofkit"]["tokens_vs_eager"] == 1.0


def test_e2e_alternating_eager_steps_call_no_roofkit_code_and_a_failure_stays_its_providers(monkeypatch):
    # Eager's timed steps, alternating with roofkit's in one process, reach no roofkit function
    # (roofkit's own steps do: the probe can see them); a provider that fails is recorded with its
    # error while the others run; a patched model is refused as eager's.
    import os

    from roofkit import e2e

    calls = {}
    timed = e2e._Run.timed

    def probed(self):
        seen = []

        def prof(frame, event, arg):
            f = frame.f_code.co_filename
            if event == "call" and f"{os.sep}roofkit{os.sep}" in f and not f.endswith("e2e.py"):
                seen.append(frame.f_code.co_name)
        sys.setprofile(prof)
        try:
            return timed(self)
        finally:
            sys.setprofile(None)
            calls.setdefault(self.provider, []).extend(seen)

    apply = e2e._apply

    def breaking(provider, model, family, sharded=False):
        if provider == "roofkit-sdpa":
            raise RuntimeError("injected")
        return apply(provider, model, family, sharded)

    monkeypatch.setattr(e2e._Run, "timed", probed)
    monkeypatch.setattr(e2e, "_apply", breaking)
    base = dict(model="llama3-8b", layers=1, seq=8, batch=1, steps=2, warmup=0, decode_tokens=2, tiny=True)
    recs = e2e._worker_alternating({**base, "mode": "decode", "providers": ["eager", "roofkit", "roofkit-sdpa"]})
    assert [r["status"] for r in recs] == ["ok", "ok", "error"] and "injected" in recs[2]["error"]
    assert calls["eager"] == [] and calls["roofkit"]  # (roofkit's steps reach roofkit's functions)
    assert recs[1]["paired_vs_first"] > 0
    model, _ = e2e._build({**base, "mode": "decode"}, torch.device("cpu"), torch.float32)
    e2e._untouched(model)
    with pytest.raises(RuntimeError, match="eager model was changed"):
        e2e._untouched(roofkit.patch(model))


@pytest.mark.parametrize("training", [False, True])
def test_patched_forward_hands_the_cache_on_by_the_name_transformers_takes(training):
    # A caller's past_key_values reaches the model by the name its forward takes (transformers
    # renamed it to cache, warning at the old name): no FutureWarning from the patched forward,
    # and the cached steps give the uncached logits (training with labels: the fused loss's).
    import warnings

    import torch.nn.functional as F
    from transformers import DynamicCache

    model = roofkit.patch(_model("llama", "cpu")).train(training)
    ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(input_ids=ids).logits if not training else model.eval()(input_ids=ids).logits
        model.train(training)
        cache = DynamicCache(config=model.config)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            model(input_ids=ids[:, :-2], past_key_values=cache, use_cache=True)
            out = model(input_ids=ids[:, -2:], past_key_values=cache, use_cache=True,
                        labels=ids[:, -2:] if training else None)
    assert cache.get_seq_length() == 6
    if not training:  # compiled whole (no graph break) with the cache passed along, as decoding does
        compiled, cache = torch.compile(model, backend="eager", fullgraph=True), DynamicCache(config=model.config)
        with torch.no_grad():
            compiled(input_ids=ids[:, :-2], past_key_values=cache, use_cache=True)
            again = compiled(input_ids=ids[:, -2:], past_key_values=cache, use_cache=True).logits
        torch.testing.assert_close(again, full[:, -2:], rtol=1e-4, atol=1e-4)
    if training:  # (the fused loss makes no logits: its loss is the one of the uncached logits)
        torch.testing.assert_close(out.loss, F.cross_entropy(full[:, 4], ids[:, 5]), rtol=1e-4, atol=1e-5)
    else:
        torch.testing.assert_close(out.logits, full[:, -2:], rtol=1e-4, atol=1e-4)
