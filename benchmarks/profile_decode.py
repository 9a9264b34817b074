"""Where a decoded token's host time goes, per provider: `roofkit e2e --mode decode`'s model
(llama3-8b shapes, $LAYERS layers (8), bf16, batch 1, a 2048-token prefix through the cache),
then 32 tokens one at a time. Per provider: ms per token (median of 3 repeats, no profiler), then
one repeat under cProfile: the functions with the most cumulative time, and those of roofkit's
and transformers' modules by own time (under cProfile every Python call costs more; compare
providers, not absolute figures). Usage: python benchmarks/profile_decode.py [PROVIDER...]
(default: eager roofkit)"""
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch
from transformers import DynamicCache

from roofkit import e2e


def main(providers):
    layers = int(os.environ.get("LAYERS", "8"))
    rows = []
    for prov in providers:
        spec = dict(model="llama3-8b", layers=layers, seq=2048, batch=1, mode="decode", tiny=False, provider=prov)
        model, family = e2e._build(spec, torch.device("cuda"), torch.bfloat16)
        model = e2e._apply(prov, model, family).eval()
        g = torch.Generator(device="cuda").manual_seed(1)
        ids = torch.randint(0, model.config.vocab_size, (1, 2048), device="cuda", generator=g)
        feed = torch.randint(0, model.config.vocab_size, (1, 32), device="cuda", generator=g)

        def run():
            with torch.no_grad():
                cache = DynamicCache(config=model.config)
                model(input_ids=ids, use_cache=True, logits_to_keep=1, past_key_values=cache)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for t in range(feed.shape[1]):
                    model(input_ids=feed[:, t:t + 1], use_cache=True, past_key_values=cache)
                torch.cuda.synchronize()
                return (time.perf_counter() - t0) / feed.shape[1] * 1e3

        for _ in range(2):
            run()
        ms = statistics.median(run() for _ in range(3))
        clock = torch.cuda.clock_rate()  # (the SM clock right after the timed repeats, MHz)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as kprof:
            run()
        kernels = {}
        for ev in kprof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                kernels[ev.name] = kernels.get(ev.name, 0.0) + ev.device_time_total
        device_ms = sum(kernels.values()) / 1e3 / (feed.shape[1] + 1)  # (the prefix counts as one)
        print(f"\n=== {prov}: {ms:.3f} ms / token; SM clock {clock} MHz; device time {device_ms:.3f} ms per "
              "forward (prefix included)")
        for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {us / 1e3:9.3f} ms  {name[:110]}")
        if os.environ.get("CPROFILE", "1") == "1":
            prof = cProfile.Profile()
            prof.enable()
            prof_ms = run()
            prof.disable()
            print(f"--- {prov} under cProfile: {prof_ms:.3f} ms / token")
            st = pstats.Stats(prof)
            st.sort_stats("cumulative").print_stats(45)
            st.sort_stats("tottime").print_stats(r"roofkit|transformers", 30)
            st.sort_stats("ncalls").print_stats(r"roofkit|triton", 40)  # (which paths the calls took)
        rows.append((prov, ms, clock, device_ms))
        del model
        torch.cuda.empty_cache()
    print("\nprovider        ms/token  SM MHz  device ms/forward")
    for prov, ms, clock, device_ms in rows:
        print(f"{prov:<15} {ms:8.3f}  {clock:6}  {device_ms:8.3f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["eager", "roofkit"])
