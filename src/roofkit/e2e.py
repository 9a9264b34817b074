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
import inspect
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


def _worker(spec: dict) -> dict:
    import torch

    from .harness.device import sm_clock_mhz

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # before roofkit's kernels are defined
    rank, world = _distributed("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model, family = _build(spec, device, dtype)
    # (every rank builds the same weights and takes the same batch: the loss is the one-process loss)
    model = _apply(spec["provider"], model, family, sharded=world > 1)
    vocab = model.config.vocab_size
    g = torch.Generator(device=device).manual_seed(1)
    b, s = spec["batch"], spec["seq"]
    ids = torch.randint(0, vocab, (b, s), device=device, generator=g)
    times, loss0, check, optimizer = [], None, None, None

    if spec["mode"] == "train":
        model.train()
        if spec["provider"].startswith("roofkit") and spec.get("optimizer", "roofkit") == "roofkit":
            import roofkit.optim

            opt = roofkit.optim.AdamW(model.parameters(), lr=1e-5)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
        optimizer = f"{type(opt).__module__.split('.')[0]}.optim.AdamW"

        def step():
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return out.loss.detach()
        tokens = b * s
    elif spec["mode"] == "prefill":
        model.eval()

        def step():
            with torch.no_grad():
                return model(input_ids=ids, logits_to_keep=1).logits
        tokens = b * s
        check = []
    else:  # decode: batch 1, the prefix through the cache, then `steps` tokens one at a time
        from transformers import DynamicCache

        model.eval()
        ids = ids[:1]
        new = spec["decode_tokens"]
        # The tokens fed are fixed (the same for every provider), not each provider's own choices:
        # its next-token choice at each step is then compared with eager's on the same inputs (with
        # greedy feeding, one near tie that 16-bit rounding flips would change every later input).
        feed = torch.randint(0, vocab, (1, new), device=device, generator=g)
        # the cache argument's name (transformers renames past_key_values to cache)
        inner = getattr(model, "_orig_mod", model)
        name = "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"

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
        tokens = 1
        check = []

    t0 = time.perf_counter()
    first = step()
    _sync(device)
    first_s = time.perf_counter() - t0
    if spec["mode"] == "train":
        loss0 = float(first)
    elif spec["mode"] == "prefill":  # the output checked against eager's: each sequence's next token
        check = [int(t) for t in first[:, -1].float().argmax(-1).tolist()]
    for _ in range(spec["warmup"]):
        step()
    _sync(device)
    clocks = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        _busy(device, 0.2)
    for _ in range(spec["steps"]):
        if spec["mode"] == "decode":
            times.append(step() * 1e3)
        else:
            t0 = time.perf_counter()
            step()
            _sync(device)
            times.append((time.perf_counter() - t0) * 1e3)
        if device.type == "cuda":  # (after the step's timing: NVML is slow to ask)
            clocks.append(sm_clock_mhz(device.index).get("sm_clock_mhz"))
    ms = statistics.median(times)
    clocks = [c for c in clocks if c]
    return {"step_ms": ms, "p20_ms": _quantile(times, 0.2), "p80_ms": _quantile(times, 0.8),
            "tokens_per_s": tokens / (ms / 1e3), "peak_bytes": torch.cuda.max_memory_allocated(device)
            if device.type == "cuda" else None, "first_step_s": first_s, "loss0": loss0, "steps": len(times),
            "parameters": sum(p.numel() for p in model.parameters()),
            "tokens": check if spec["mode"] != "train" else None, "world_size": world, "rank": rank,
            "optimizer": optimizer, "sm_clock_mhz": statistics.median(clocks) if clocks else None,
            "sm_clock_min_mhz": min(clocks, default=None),
            "sm_clock_max_mhz": sm_clock_mhz(device.index).get("sm_clock_max_mhz") if device.type == "cuda" else None}


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


def _run_provider(spec: dict, timeout: float) -> dict:
    """One provider in a fresh process; its record (``status`` "ok" or "error" with the reason)."""
    cmd = [sys.executable, "-m", "roofkit.e2e", "--worker", json.dumps(spec)]
    if spec.get("nproc", 1) > 1:  # FSDP2 over nproc processes: rank 0 reports
        cmd[1:3] = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={spec['nproc']}", "-m",
                    "roofkit.e2e"]
    rec = {**{k: spec[k] for k in ("model", "layers", "mode", "batch", "seq", "provider")},
           "world_size": spec.get("nproc", 1)}
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {**rec, "status": "error", "error": f"no result within {timeout:.0f} s"}
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(_MARK)]
    if run.returncode != 0 or not lines:
        out = (run.stderr or run.stdout).strip().splitlines()
        # the exception's own line first (the last that names an error), then the lines after it
        at = max((i for i, ln in enumerate(out) if ln and not ln.startswith(" ") and ("Error" in ln or "Exception" in ln)),
                 default=max(0, len(out) - 3))
        return {**rec, "status": "error", "error": " | ".join(out[at:at + 4])[:600] or f"exit status {run.returncode}"}
    return {**rec, "status": "ok", **json.loads(lines[-1][len(_MARK):])}


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
    p.add_argument("--timeout", type=float, default=900, help="seconds per provider process (default: 900)")
    p.add_argument("--out", default="roofkit-out/e2e", help="folder for results.json, results.csv, e2e.png")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        rec = _worker(json.loads(args.worker))
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
    if args.nproc > 1 and torch.cuda.is_available() and torch.cuda.device_count() < args.nproc:
        p.error(f"--nproc {args.nproc}: this machine has {torch.cuda.device_count()} GPU(s)")
    spec = dict(model=args.model, layers=args.layers, mode=args.mode, seq=args.seq, steps=args.steps, nproc=args.nproc,
                warmup=args.warmup, decode_tokens=args.decode_tokens, tiny=tiny, optimizer=args.optimizer,
                processes=args.processes,
                batch=1 if args.mode == "decode" else (args.batch or 4))  # decode: batch 1 (what it runs)
    if tiny:
        spec.update(layers=min(args.layers, 2), seq=min(args.seq, 32), batch=min(spec["batch"], 2),
                    steps=min(args.steps, 2), warmup=0, decode_tokens=min(args.decode_tokens, 4))
        console.print("[yellow]No GPU: a tiny configuration of the model through the Triton interpreter (a check "
                      "that it runs; the times are not measurements)[/yellow]")
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
            for provider in args.providers:
                bar.update(task, description=f"e2e {args.model} {args.mode}: {provider}")
                why = _provider_available(provider)
                if why:
                    runs[provider].append({**{k: spec[k] for k in ("model", "layers", "mode", "batch", "seq")},
                                           "provider": provider, "status": "skipped", "error": why})
                else:
                    runs[provider].append(_run_provider({**spec, "provider": provider}, args.timeout))
                records = [_combine(rs) for rs in runs.values() if rs]
                _write(args.out, env, spec, records)  # after each process: an interrupted run keeps what it measured
                bar.advance(task)
    return records


def _combine(runs: list) -> dict:
    """One provider's record from its processes' (``--processes``): the process with the median
    time (of those that ran; the lower middle of an even count), with every process's time in
    ``process_ms``; a provider no process of which ran keeps its first process's record."""
    ok = sorted((r for r in runs if r["status"] == "ok"), key=lambda r: r["step_ms"])
    if not ok:
        return runs[0]
    rec = dict(ok[(len(ok) - 1) // 2])
    if len(runs) > 1:
        rec["process_ms"] = [r["step_ms"] if r["status"] == "ok" else None for r in runs]
        rec["processes_failed"] = len(runs) - len(ok)
    return rec


def _note(r: dict) -> str:
    notes = ["roofkit AdamW"] if r.get("optimizer") == "roofkit.optim.AdamW" else []
    if r.get("process_ms"):
        spread = [f"{ms:.2f}" if ms is not None else "failed" for ms in r["process_ms"]]
        notes.append(f"processes: {' '.join(spread)}")
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
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    names = [r["provider"] for r in ok]
    axes[0].barh(names, [r["tokens_per_s"] for r in ok], color="tab:blue")
    axes[0].set_xlabel("tokens / s")
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
