"""Is this host steady enough for a host-bound figure? One process, one provider (argument:
eager or roofkit): `roofkit e2e --mode decode`'s model (llama3-8b shapes, 8 layers, bf16, a
2048-token prefix), ms per token over 5 repeats of 32 tokens, beside what the host itself did:
two microbenchmarks at start, after the warm-up and at the end (ms for 300k dict stores; us per
`add_` on 8 CPU floats), the CPU the process ran on, every thread's CPU ticks over the timed
repeats (a thread of the process competing for the GIL would show), context switches. Prints one
JSON line (DIAG ...). Run it in several fresh processes, optionally under `taskset -c N` (PIN=N
labels the record), after `. benchmarks/gpu_env.sh`."""
import json
import os
import resource
import statistics
import sys
import time


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def cpu_now():
    s = _read("/proc/self/stat").rsplit(")", 1)[1].split()
    return int(s[36])




def threads():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            raw = _read(f"/proc/self/task/{tid}/stat")
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        s = raw.rsplit(")", 1)[1].split()
        out[tid] = (comm, int(s[11]) + int(s[12]), int(s[36]))
    return out


def micro():
    t0 = time.perf_counter(); d = {}
    for i in range(300000):
        d[(i & 1023, "x")] = i
    py = time.perf_counter() - t0
    import torch
    x = torch.ones(8)
    t0 = time.perf_counter()
    for _ in range(20000):
        x.add_(1)
    tc = time.perf_counter() - t0
    return round(py * 1e3, 2), round(tc / 20000 * 1e6, 3)


prov = sys.argv[1]
rec = {"provider": prov, "pin": os.environ.get("PIN", ""), "cpu_start": cpu_now(), "micro_start": micro()}
import torch
from transformers import DynamicCache

from roofkit import e2e

spec = {"model": "llama3-8b", "layers": 8, "seq": 2048, "batch": 1, "mode": "decode", "tiny": False, "provider": prov}
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
rec["micro_mid"] = micro()
th0 = threads(); ru0 = resource.getrusage(resource.RUSAGE_SELF); w0 = time.perf_counter()
ms = [run() for _ in range(5)]
wall = time.perf_counter() - w0
th1 = threads(); ru1 = resource.getrusage(resource.RUSAGE_SELF)
rec["ms"] = [round(v, 3) for v in ms]
rec["ms_median"] = round(statistics.median(ms), 3)
rec["wall_s"] = round(wall, 3)
rec["nvcsw"] = ru1.ru_nvcsw - ru0.ru_nvcsw
rec["nivcsw"] = ru1.ru_nivcsw - ru0.ru_nivcsw
rec["utime_s"] = round(ru1.ru_utime - ru0.ru_utime, 3)
rec["stime_s"] = round(ru1.ru_stime - ru0.ru_stime, 3)
busy = []
for tid, (comm, ticks, cpu) in th1.items():
    d = ticks - th0.get(tid, (comm, 0, cpu))[1]
    if d:
        busy.append((comm, d, cpu))
rec["threads"] = len(th1)
rec["busy_threads_ticks_cpu"] = sorted(busy, key=lambda b: -b[1])[:6]
rec["cpu_end"] = cpu_now()
rec["micro_end"] = micro()
try:
    rec["loadavg"] = _read("/proc/loadavg").split()[:3]
except OSError:
    pass
print("DIAG " + json.dumps(rec))
