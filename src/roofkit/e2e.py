"""``roofkit e2e``: a whole model, end to end, with and without roofkit (and its peers).

A transformers causal-LM model is built from a real model's configuration (random weights, no
download; ``--layers`` of its decoder layers) and run by each provider in a process of its own:

- ``eager``: the model as transformers runs it (SDPA attention);
- ``torch.compile``: ``torch.compile(model)``;
- ``liger``: Liger-Kernel's ``apply_liger_kernel_to_<family>(model=...)`` (rope, RMSNorm, SwiGLU /
  GeGLU, fused linear cross-entropy);
- ``roofkit``: ``roofkit.patch(model)``; ``roofkit+compile``: patched, then compiled;
  ``roofkit-sdpa``: patched with ``attention=False`` (attention stays torch's SDPA: which of the
  two attentions pays off inside the model).

Modes: ``train`` (forward, backward and an AdamW step on batch x seq random tokens, labels =
inputs; torch's fused AdamW, or for the roofkit providers :class:`roofkit.optim.AdamW`, whose update
runs in roofkit's kernel: ``--optimizer torch`` gives them torch's too), ``prefill`` (one
forward without gradients, the last position's logits), ``decode`` (batch 1: a prefix of
``--seq`` tokens, then one token at a time through the KV cache). Each provider reports its
median step time, tokens/s, peak memory (``torch.cuda.max_memory_allocated`` over the timed
steps, the weights included), the first step's time (compilation, tuning and the first call's
recording land there) and the first step's loss (train) beside eager's. Records go to
``results.json`` / ``results.csv`` with the environment, and a bar chart to ``e2e.png``. With
``--processes P`` each provider runs in P fresh processes, interleaved over the providers, and its
record is the median process's (``process_ms``: every process's time).

Without a GPU the same runs take a tiny configuration through the Triton interpreter: a check
that everything runs, not a measurement (it says so).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time

MODELS = {  # the decoder's dimensions of the published configurations
    "llama3-8b": dict(family="llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0),
    "llama3-70b": dict(family="llama", hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                       num_key_value_heads=8, vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0),
    "qwen2-7b": dict(family="qwen2", hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                     num_key_value_heads=4, vocab_size=152064, rms_norm_eps=1e-6, rope_theta=1000000.0),
    "mistral-7b": dict(family="mistral", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=32000, rms_norm_eps=1e-5, rope_theta=1000000.0,
                       sliding_window=4096),
    "gemma-7b": dict(family="gemma", hidden_size=3072, intermediate_size=24576, num_attention_heads=16,
                     num_key_value_heads=16, head_dim=256, vocab_size=256000, rms_norm_eps=1e-6,
                     hidden_act="gelu_pytorch_tanh"),
}
TINY = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
PROVIDERS = ("eager", "torch.compile", "liger", "roofkit", "roofkit+compile", "roofkit-sdpa")
_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "gemma": "GemmaForCausalLM"}
_MARK = "ROOFKIT_E2E_RESULT "


# ----------------------------------------------------------------------------- one provider (worker)


def _build(spec: dict, device, dtype):
    import torch
    import transformers

    dims = dict(MODELS[spec["model"]])
    family = dims.pop("family")
    if spec["tiny"]:
        dims.update(TINY, head_dim=TINY["hidden_size"] // TINY["num_attention_heads"])
    cfg = getattr(transformers, _CLASSES[family].replace("ForCausalLM", "Config"))(
        num_hidden_layers=spec["layers"], max_position_embeddings=max(8192, 2 * spec["seq"]), **dims)
    cfg.use_cache = spec["mode"] == "decode"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = getattr(transformers, _CLASSES[family])(cfg)
    finally:
        torch.set_default_dtype(default)
    return model, family


def _apply(provider: str, model, family: str, sharded: bool = False):
    """The provider's model: patched (Liger, roofkit), then under FSDP2 when ``sharded`` (each
    decoder layer and the whole model ``fully_shard``-ed over the default process group), then
    compiled."""
    import torch

    import roofkit

    if provider == "liger":
        import liger_kernel.transformers as lk

        getattr(lk, f"apply_liger_kernel_to_{family}")(model=model)
    if provider.startswith("roofkit"):
        roofkit.patch(model, attention=provider != "roofkit-sdpa")
    if sharded:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    if provider.endswith("compile"):
        model = torch.compile(model)
    return model


def _distributed(device_type: str) -> tuple[int, int]:
    """(rank, world size) of a torchrun launch, its process group started (NCCL on GPUs, gloo on
    CPUs) and this rank's GPU made current; (0, 1) without torchrun."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return dist.get_rank(), world


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Run:
    """One provider's model and its step, ready to time: ``step()`` runs one step (decode: returns
    its seconds per token); ``check`` the outputs compared with eager's."""

    def __init__(self, spec: dict, provider: str, device, dtype, sharded: bool):
        import torch

        model, family = _build(spec, device, dtype)
        # (every rank builds the same weights and takes the same batch: the loss is the one-process loss)
        model = _apply(provider, model, family, sharded=sharded)
        self.model, self.provider, self.device = model, provider, device
        vocab = model.config.vocab_size
        g = torch.Generator(device=device).manual_seed(1)
        b, s = spec["batch"], spec["seq"]
        ids = torch.randint(0, vocab, (b, s), device=device, generator=g)
        self.check, self.optimizer, self.tokens = None, None, b * s
        self.mode = spec["mode"]

        if self.mode == "train":
            model.train()
            if provider.startswith("roofkit") and spec.get("optimizer", "roofkit") == "roofkit":
                import roofkit.optim

                opt = roofkit.optim.AdamW(model.parameters(), lr=1e-5)
            else:
                opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
            self.optimizer = f"{type(opt).__module__.split('.')[0]}.optim.AdamW"

            def step():
                out = model(input_ids=ids, labels=ids)
                out.loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return out.loss.detach()
        elif self.mode == "prefill":
            model.eval()
            self.check = []

            def step():
                with torch.no_grad():
                    return model(input_ids=ids, logits_to_keep=1).logits
        else:  # decode: batch 1, the prefix through the cache, then `steps` tokens one at a time
            from transformers import DynamicCache

            model.eval()
            ids = ids[:1]
            new = spec["decode_tokens"]
            # The tokens fed are fixed (the same for every provider), not each provider's own choices:
            # its next-token choice at each step is then compared with eager's on the same inputs (with
            # greedy feeding, one near tie that 16-bit rounding flips would change every later input).
            feed = torch.randint(0, vocab, (1, new), device=device, generator=g)
            from .integration import _cache_argument

            name = _cache_argument(getattr(model, "_orig_mod", model).forward)
            self.tokens, self.check = 1, []
            check = self.check

            def step():
                with torch.no_grad():
                    cache = DynamicCache(config=model.config)
                    out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{name: cache})
                    made = [out.logits[:, -1:].argmax(-1)]
                    _sync(device)
                    t0 = time.perf_counter()
                    for t in range(new):
                        out = model(input_ids=feed[:, t:t + 1], use_cache=True, **{name: cache})
                        made.append(out.logits[:, -1:].argmax(-1))
                    _sync(device)
                    elapsed = (time.perf_counter() - t0) / new
                    check[:] = [int(t) for t in torch.cat(made, -1).flatten().tolist()]  # after the timing
                    return elapsed
        self.step = step

    def first(self, warmup: int) -> tuple[float, float | None]:
        """The first step (its seconds, and its loss in train mode), then ``warmup`` more."""
        t0 = time.perf_counter()
        out = self.step()
        _sync(self.device)
        first_s = time.perf_counter() - t0
        loss0 = None
        if self.mode == "train":
            loss0 = float(out)
        elif self.mode == "prefill":  # the output checked against eager's: each sequence's next token
            self.check[:] = [int(t) for t in out[:, -1].float().argmax(-1).tolist()]
        for _ in range(warmup):
            self.step()
        _sync(self.device)
        return first_s, loss0

    def timed(self) -> float:
        """One timed step, ms (decode: per token)."""
        if self.mode == "decode":
            return self.step() * 1e3
        t0 = time.perf_counter()
        self.step()
        _sync(self.device)
        return (time.perf_counter() - t0) * 1e3

    def record(self, times: list, clocks: list, first_s: float, loss0, peak) -> dict:
        from .harness.device import sm_clock_mhz

        ms = statistics.median(times)
        clocks = [c for c in clocks if c]
        cuda = self.device.type == "cuda"
        return {"step_ms": ms, "p20_ms": _quantile(times, 0.2), "p80_ms": _quantile(times, 0.8),
                "tokens_per_s": self.tokens / (ms / 1e3), "peak_bytes": peak, "first_step_s": first_s,
                "loss0": loss0, "steps": len(times), "parameters": sum(p.numel() for p in self.model.parameters()),
                "tokens": list(self.check) if self.mode != "train" else None, "optimizer": self.optimizer,
                "sm_clock_mhz": statistics.median(clocks) if clocks else None,
                "sm_clock_min_mhz": min(clocks, default=None),
                "sm_clock_max_mhz": sm_clock_mhz(self.device.index).get("sm_clock_max_mhz") if cuda else None}


def _device():
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # before roofkit's kernels are defined
    rank, world = _distributed("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return device, torch.bfloat16 if device.type == "cuda" else torch.float32, rank, world


def _worker(spec: dict) -> dict:
    """One provider's record, this process to itself (the CLI runs it in a fresh process)."""
    import torch

    from .harness.device import sm_clock_mhz

    device, dtype, rank, world = _device()
    run = _Run(spec, spec["provider"], device, dtype, sharded=world > 1)
    first_s, loss0 = run.first(spec["warmup"])
    times, clocks = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        _busy(device, 0.2)
    for _ in range(spec["steps"]):
        times.append(run.timed())
        if device.type == "cuda":  # (after the step's timing: NVML is slow to ask)
            clocks.append(sm_clock_mhz(device.index).get("sm_clock_mhz"))
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {**run.record(times, clocks, first_s, loss0, peak), "world_size": world, "rank": rank}


def _worker_alternating(spec: dict) -> list:
    """Every provider of ``spec["providers"]`` (eager first) in this one process, their timed steps
    alternating (round r starts with provider r mod n): each provider's record, with
    ``paired_vs_first``, the median over rounds of the first provider's time over its own in the
    same round. A host whose speed drifts (shared CPUs: a decoded token moved by 2x between
    processes and within one) then reaches every provider alike. Peak memory is not separable
    here (None); the first step's time is not the provider's alone (whoever runs first pays the
    process's one-off costs). A provider that fails is recorded with its error and left out of the
    later rounds; when the first one fails, no ratio is made. Providers that patch a model only in
    place may share a process; the caller refuses the others."""
    from .harness.device import sm_clock_mhz

    device, dtype, _, _ = _device()
    providers = spec["providers"]
    base = _base(spec)
    runs, firsts, errors = {}, {}, {}

    def failed(provider, err):
        errors[provider] = f"{type(err).__name__}: {err}"[:600]
        runs.pop(provider, None)

    for provider in providers:
        try:
            runs[provider] = _Run(spec, provider, device, dtype, sharded=False)
            firsts[provider] = runs[provider].first(spec["warmup"])
        except Exception as err:  # noqa: BLE001 (recorded: the others still run)
            failed(provider, err)
    if providers[0] == "eager" and "eager" in runs:
        _untouched(runs["eager"].model)
    if device.type == "cuda":
        _busy(device, 0.2)
    times = {p: [] for p in providers}
    clocks = []
    for r in range(spec["steps"]):
        for k in range(len(providers)):
            provider = providers[(r + k) % len(providers)]
            if provider in runs:
                try:
                    times[provider].append(runs[provider].timed())
                except Exception as err:  # noqa: BLE001
                    failed(provider, err)
        if device.type == "cuda":
            clocks.append(sm_clock_mhz(device.index).get("sm_clock_mhz"))
    out = []
    first = providers[0]
    for provider in providers:
        if provider not in runs:
            out.append({**base, "provider": provider, "status": "error", "error": errors[provider]})
            continue
        first_s, loss0 = firsts[provider]
        ts = times[provider]
        rec = runs[provider].record(ts, clocks, first_s, loss0, None)
        ratios = [a / b for a, b in zip(times[first], ts)] if first in runs else []
        rec.update(world_size=1, rank=0, alternating=list(providers), step_times_ms=ts, round_ratios=ratios,
                   paired_vs_first=statistics.median(ratios) if ratios else None)
        out.append({**base, "provider": provider, "status": "ok", **rec})
    return out


def _untouched(model) -> None:
    """Refuse to time an eager model that a patch in this process reached (its modules' classes
    all transformers', its attention transformers' SDPA)."""
    odd = sorted({type(m).__name__ for m in model.modules()
                  if not type(m).__module__.startswith(("transformers.", "torch."))})
    if odd or model.config._attn_implementation != "sdpa":
        raise RuntimeError(f"roofkit e2e --alternate: the eager model was changed in this process ({', '.join(odd)}; "
                           f"attention {model.config._attn_implementation!r}): its figures would not be eager's")


def _busy(device, seconds: float) -> None:
    """Keep the GPU busy for about ``seconds`` (a device-side sleep), so that every provider's
    timed steps start from the working SM clock, not from the idle clock its model building and
    compiling may have left (a host-bound loop, such as decoding, may not raise it by itself)."""
    import torch

    from .harness.timing import _sleep_cycles_per_us

    chunk = int(_sleep_cycles_per_us(device) * 20_000)  # 20 ms of sleep (measuring it keeps the GPU busy too)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.cuda._sleep(chunk)
        torch.cuda.synchronize(device)


def _quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# ----------------------------------------------------------------------------- driver


def _run_provider(spec: dict, timeout: float) -> dict | list:
    """One provider in a fresh process; its record (``status`` "ok" or "error" with the reason).
    With ``spec["providers"]`` (``--alternate``): all of them in that process, a record each."""
    cmd = [sys.executable, "-m", "roofkit.e2e", "--worker", json.dumps(spec)]
    if spec.get("nproc", 1) > 1:  # FSDP2 over nproc processes: rank 0 reports
        cmd[1:3] = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={spec['nproc']}", "-m",
                    "roofkit.e2e"]
    names = spec.get("providers") or [spec["provider"]]
    base = [{**_base(spec), "provider": name, "world_size": spec.get("nproc", 1)} for name in names]

    def failed(why: str):
        out = [{**rec, "status": "error", "error": why} for rec in base]
        return out if "providers" in spec else out[0]

    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return failed(f"no result within {timeout:.0f} s")
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(_MARK)]
    if run.returncode != 0 or not lines:
        out = (run.stderr or run.stdout).strip().splitlines()
        # the exception's own line first (the last that names an error), then the lines after it
        at = max((i for i, ln in enumerate(out) if ln and not ln.startswith(" ") and ("Error" in ln or "Exception" in ln)),
                 default=max(0, len(out) - 3))
        return failed(" | ".join(out[at:at + 4])[:600] or f"exit status {run.returncode}")
    got = json.loads(lines[-1][len(_MARK):])
    return got if "providers" in spec else {**base[0], "status": "ok", **got}


def _provider_available(provider: str) -> str | None:
    """Why ``provider`` cannot run here, or None."""
    import importlib.util

    import torch

    if provider == "liger":
        if importlib.util.find_spec("liger_kernel") is None:
            return "Liger-Kernel is not installed (pip install roofkit[peers])"
        if not torch.cuda.is_available():
            return "Liger-Kernel needs a GPU"
    if provider.endswith("compile") and not torch.cuda.is_available():
        return "left out without a GPU (compilation on the interpreter takes minutes)"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="roofkit e2e", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    def positive(text: str) -> int:
        v = int(text)
        if v < 1:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
        return v

    def count(text: str) -> int:
        v = int(text)
        if v < 0:
            raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
        return v

    p.add_argument("--layers", type=positive, default=8, help="decoder layers (default: 8)")
    p.add_argument("--mode", default="train", choices=("train", "prefill", "decode"))
    p.add_argument("--batch", type=positive, default=None, help="default: 4 (train, prefill), 1 (decode)")
    p.add_argument("--seq", type=positive, default=2048, help="tokens per sequence; decode: the prefix (default: 2048)")
    p.add_argument("--providers", nargs="+", default=list(PROVIDERS[:5]), choices=PROVIDERS,
                   help="which to run, each in its own process (default: all but roofkit-sdpa)")
    p.add_argument("--steps", type=positive, default=8, help="timed steps (decode: repeats of the token loop; default: 8)")
    p.add_argument("--warmup", type=count, default=2, help="untimed steps after the first (default: 2)")
    p.add_argument("--decode-tokens", type=positive, default=32, help="decode: tokens per timed repeat (default: 32)")
    p.add_argument("--nproc", type=positive, default=1,
                   help="train under FSDP2 on this many processes (torchrun; one GPU each, or gloo on CPUs); "
                        "records tokens/s and peak memory per GPU (default: 1, no sharding)")
    p.add_argument("--optimizer", default="roofkit", choices=("roofkit", "torch"),
                   help="train: the roofkit providers' AdamW, roofkit.optim.AdamW (default) or torch's fused one "
                        "(the other providers always run torch's fused AdamW)")
    p.add_argument("--processes", type=positive, default=1,
                   help="run each provider in this many fresh processes, interleaved over the providers; the "
                        "record is the median process's, with every process's figure beside it (default: 1)")
    p.add_argument("--alternate", action="store_true",
                   help="prefill / decode: run the providers in one process, eager first, their timed steps "
                        "alternating; each record's vs eager is the median over rounds of eager's time over its "
                        "own (for a host-bound mode on a host whose speed drifts; peak memory is not recorded; "
                        "needs eager; not with liger, which patches transformers' modules for every model)")

    def seconds(text: str) -> float:
        v = float(text)
        if not (math.isfinite(v) and 0 < v <= 1e5):
            raise argparse.ArgumentTypeError(f"must be a positive number of seconds up to 1e5, got {text}")
        return v

    p.add_argument("--timeout", type=seconds, default=900,
                   help="seconds per provider process (--alternate: per provider, the process's being their sum; "
                        "default: 900)")
    p.add_argument("--out", default="roofkit-out/e2e", help="folder for results.json, results.csv, e2e.png")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        if "providers" in spec:
            print(_MARK + json.dumps(_worker_alternating(spec)), flush=True)
            return 0
        rec = _worker(spec)
        if rec["rank"] == 0:
            print(_MARK + json.dumps(rec), flush=True)
        if rec["world_size"] > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
        return 0

    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from .harness.device import environment

    console = Console(width=None if sys.stdout.isatty() else 160)  # (piped: no truncated columns)
    tiny = not torch.cuda.is_available()
    if args.nproc > 1 and args.mode != "train":
        p.error("--nproc > 1 runs the train mode only (FSDP2 shards parameters, gradients and optimizer state)")
    if len(set(args.providers)) != len(args.providers):
        p.error(f"--providers names a provider twice: {' '.join(args.providers)}")
    if args.alternate and "eager" not in args.providers:
        p.error("--alternate pairs every provider with eager: name eager among --providers")
    if args.alternate and args.mode == "train":
        p.error("--alternate runs prefill and decode (a training step's memory and optimizer state are its own)")
    if args.alternate and "liger" in args.providers:
        p.error("--alternate: liger patches transformers' modules for every model in the process (its figures "
                "would not be its own, nor eager's); run it without --alternate")
    if args.nproc > 1 and torch.cuda.is_available() and torch.cuda.device_count() < args.nproc:
        p.error(f"--nproc {args.nproc}: this machine has {torch.cuda.device_count()} GPU(s)")
    spec = dict(model=args.model, layers=args.layers, mode=args.mode, seq=args.seq, steps=args.steps, nproc=args.nproc,
                warmup=args.warmup, decode_tokens=args.decode_tokens, tiny=tiny, optimizer=args.optimizer,
                processes=args.processes, alternate=args.alternate,
                batch=1 if args.mode == "decode" else (args.batch or 4))  # decode: batch 1 (what it runs)
    if tiny:
        spec.update(layers=min(args.layers, 2), seq=min(args.seq, 32), batch=min(spec["batch"], 2),
                    steps=min(args.steps, 2), warmup=0, decode_tokens=min(args.decode_tokens, 4))
        console.print("[yellow]No GPU: a tiny configuration of the model through the Triton interpreter (a check "
                      f"that it runs; the times are not measurements): hidden size {TINY['hidden_size']}, "
                      f"{spec['layers']} layer(s), batch {spec['batch']} x {spec['seq']}, {spec['steps']} step(s), "
                      f"no warm-up, {spec['decode_tokens']} decoded token(s) a step[/yellow]")
    if not tiny and args.nproc == 1:
        from .harness.device import gpu_local_cpus

        spec["cpus"] = sorted(gpu_local_cpus(torch.cuda.current_device()))  # (every provider on the same CPUs)
    env = environment()
    env["interpreter"] = tiny
    import transformers

    env["transformers"] = transformers.__version__
    os.makedirs(args.out, exist_ok=True)
    # Every provider's process on the CPUs NVML names as the GPU's (its NUMA node), where it names
    # any: set on this process, inherited by each child (a host-bound step, such as a decoded
    # token, moved by up to 2x between processes of the same code; where the scheduler puts a
    # process is one difference between them).
    cpus, was = set(spec.get("cpus") or ()), os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        records = _run_all(args, spec, env, console)
    finally:
        if cpus:
            os.sched_setaffinity(0, was)
    _plot(records, os.path.join(args.out, "e2e.png"), f"{args.model}, {spec['layers']} layer(s), {args.mode}, "
          f"batch {spec['batch']} x {spec['seq']} ({env.get('gpu') or 'CPU, interpreter'})")

    unit = "ms / token" if args.mode == "decode" else "ms / step"
    fsdp = f", FSDP2 over {args.nproc} processes (per-GPU figures)" if args.nproc > 1 else ""
    fsdp += ", the providers alternating in one process" if args.alternate else ""
    t = Table(title=f"roofkit e2e: {args.model}, {spec['layers']} layer(s), {args.mode}, batch {spec['batch']} x "
              f"{spec['seq']}{fsdp} ({env.get('gpu') or 'CPU, Triton interpreter: not a measurement'})")
    check = "step-0 loss" if args.mode == "train" else "tokens = eager's"
    for col in ("provider", unit, "p20-p80", "tokens/s", "vs eager", "peak GiB", "first step s", check, "note"):
        t.add_column(col, justify="left" if col in ("provider", "note") else "right")
    for r in records:
        if r["status"] != "ok":
            t.add_row(r["provider"], "", "", "", "", "", "", "", escape(f"{r['status']}: {r.get('error', '')}"[:160]))
            continue
        t.add_row(r["provider"], f"{r['step_ms']:.2f}", f"{r['p20_ms']:.2f}-{r['p80_ms']:.2f}",
                  f"{r['tokens_per_s']:,.0f}", f"{r.get('vs_eager', math.nan):.2f}x",
                  f"{r['peak_bytes'] / 2**30:.1f}" if r.get("peak_bytes") else "",
                  f"{r['first_step_s']:.1f}", f"{r['loss0']:.4f}" if r.get("loss0") is not None else
                  f"{100 * r['tokens_vs_eager']:.0f} %" if r.get("tokens_vs_eager") is not None else "",
                  _note(r))
    console.print(t)
    console.print(f"wrote {args.out}/results.json, results.csv, e2e.png")
    return 0 if all(r["status"] != "error" for r in records) else 1


def _run_all(args, spec: dict, env: dict, console) -> list:
    """Every provider's records, ``args.processes`` processes each, interleaved over the providers
    (a drift of the machine reaches every provider alike); results written after each process."""
    from rich.progress import Progress

    runs: dict[str, list] = {provider: [] for provider in args.providers}
    records: list = []
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"e2e {args.model} {args.mode}", total=len(args.providers) * args.processes)
        for _ in range(args.processes):
            if args.alternate:  # one process for them all (eager first: the others' paired ratios are to it)
                ready = sorted((p for p in args.providers if not _skip(spec, p, runs)), key=lambda p: p != "eager")
                bar.update(task, description=f"e2e {args.model} {args.mode}: {' '.join(ready)} alternating")
                if ready:
                    for rec in _run_provider({**spec, "providers": ready}, args.timeout * len(ready)):
                        runs[rec["provider"]].append(rec)
                records = [_combine(rs) for rs in runs.values() if rs]
                _write(args.out, env, spec, records)
                bar.advance(task, len(args.providers))
                continue
            for provider in args.providers:
                bar.update(task, description=f"e2e {args.model} {args.mode}: {provider}")
                if not _skip(spec, provider, runs):
                    runs[provider].append(_run_provider({**spec, "provider": provider}, args.timeout))
                records = [_combine(rs) for rs in runs.values() if rs]
                _write(args.out, env, spec, records)  # after each process: an interrupted run keeps what it measured
                bar.advance(task)
    return records


def _base(spec: dict) -> dict:
    """What every record of a run names: the model, layers, mode and shape."""
    return {k: spec[k] for k in ("model", "layers", "mode", "batch", "seq")}


def _skip(spec: dict, provider: str, runs: dict) -> bool:
    """True (and a "skipped" record added to ``runs``) when ``provider`` cannot run here."""
    why = _provider_available(provider)
    if why:
        runs[provider].append({**_base(spec), "provider": provider, "status": "skipped", "error": why})
    return bool(why)


def _combine(runs: list) -> dict:
    """One provider's record from its processes' (``--processes``): the process with the median
    time (of those that ran; the lower middle of an even count), with every process's time in
    ``process_ms``; with ``--alternate``, the rounds of every process pooled instead (the median
    step time and the median of the per-round ratios over all of them), every process's ratio in
    ``process_paired``; a provider no process of which ran keeps its first process's record."""
    ok = sorted((r for r in runs if r["status"] == "ok"), key=lambda r: r["step_ms"])
    if not ok:
        return runs[0]
    rec = dict(ok[(len(ok) - 1) // 2])
    if len(ok) > 1 and all(r.get("round_ratios") is not None and r.get("step_times_ms") for r in ok):
        # --alternate: every process's rounds pooled (each round's ratio is within its process)
        times = [t for r in ok for t in r["step_times_ms"]]
        ratios = [x for r in ok for x in r["round_ratios"]]
        ms = statistics.median(times)
        rec.update(step_ms=ms, p20_ms=_quantile(times, 0.2), p80_ms=_quantile(times, 0.8), steps=len(times),
                   tokens_per_s=rec["tokens_per_s"] * rec["step_ms"] / ms, step_times_ms=times, round_ratios=ratios,
                   paired_vs_first=statistics.median(ratios) if ratios else None, pooled=len(ok))
    if len(runs) > 1:
        rec["process_ms"] = [r["step_ms"] if r["status"] == "ok" else None for r in runs]
        if any("paired_vs_first" in r for r in ok):
            rec["process_paired"] = [r.get("paired_vs_first") if r["status"] == "ok" else None for r in runs]
        rec["processes_failed"] = len(runs) - len(ok)
    return rec


def _note(r: dict) -> str:
    notes = ["roofkit AdamW"] if r.get("optimizer") == "roofkit.optim.AdamW" else []
    if r.get("alternating") and r["provider"] != r["alternating"][0]:
        rounds = r["steps"] // (r.get("pooled") or 1)
        of = f" in each of {r['pooled']} processes" if r.get("pooled") else ""
        notes.append(f"paired with {r['alternating'][0]} in {rounds} alternating rounds{of}")
    if r.get("process_ms"):
        spread = [f"{ms:.2f}" if ms is not None else "failed" for ms in r["process_ms"]]
        notes.append(f"processes: {' '.join(spread)}")
        if r.get("process_paired") and r["provider"] != r["alternating"][0]:
            notes.append(f"paired: {' '.join(f'{x:.2f}x' if x else 'none' for x in r['process_paired'])}")
    low, top = r.get("sm_clock_min_mhz"), r.get("sm_clock_max_mhz")
    if low and top and low < 0.9 * top:  # (the figure is then not at the working clock)
        notes.append(f"SM clock down to {low} MHz")
    return ", ".join(notes)


def _write(out: str, env: dict, spec: dict, records: list) -> None:
    """results.json and results.csv, with each record's ratios to eager's."""
    eager = next((r for r in records if r["provider"] == "eager" and r["status"] == "ok"), None)
    for r in records:
        if r["status"] == "ok" and eager:
            r["vs_eager"] = r["tokens_per_s"] / eager["tokens_per_s"]
            if ((r.get("alternating") or [None])[0] == "eager" and r.get("alternating") == eager.get("alternating")
                    and r.get("paired_vs_first") is not None):
                # the median over rounds of eager's time over this provider's in the same round
                r["vs_eager"] = r["paired_vs_first"]
            if r.get("peak_bytes") and eager.get("peak_bytes"):
                r["memory_vs_eager"] = r["peak_bytes"] / eager["peak_bytes"]
            if r.get("loss0") is not None and eager.get("loss0") is not None:
                r["loss0_diff"] = r["loss0"] - eager["loss0"]
            if r.get("tokens") and eager.get("tokens") and len(r["tokens"]) == len(eager["tokens"]):
                # prefill / decode: the share of next tokens equal to eager's (16-bit rounding can
                # flip a near tie; a wrong kernel flips most)
                r["tokens_vs_eager"] = sum(a == b for a, b in zip(r["tokens"], eager["tokens"])) / len(r["tokens"])
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"environment": env, "spec": spec, "records": records}, f, indent=1)
    keys = ["model", "layers", "mode", "batch", "seq", "world_size", "provider", "status", "step_ms", "p20_ms", "p80_ms",
            "tokens_per_s", "vs_eager", "peak_bytes", "memory_vs_eager", "first_step_s", "loss0", "loss0_diff",
            "tokens_vs_eager", "optimizer", "error"]
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(records)


def _plot(records, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in records if r["status"] == "ok"]
    peaks = any(r.get("peak_bytes") for r in ok)  # (none with --alternate: the models share the GPU)
    fig, axes = plt.subplots(1, 2 if peaks else 1, figsize=(10 if peaks else 5.5, 3.6), squeeze=False)
    axes = axes[0]
    names = [r["provider"] for r in ok]
    axes[0].barh(names, [r["tokens_per_s"] for r in ok], color="tab:blue")
    axes[0].set_xlabel("tokens / s")
    if peaks:
        axes[1].barh(names, [(r.get("peak_bytes") or 0) / 2**30 for r in ok], color="tab:gray")
        axes[1].set_xlabel("peak memory (GiB)")
    for ax in axes:
        ax.invert_yaxis()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
