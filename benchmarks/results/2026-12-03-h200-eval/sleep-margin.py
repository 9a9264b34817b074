import importlib.util
import time

import pynvml
import torch

from roofkit.harness.timing import _sleep_cycles_per_us

spec = importlib.util.spec_from_file_location("cand", "tests/harness/eval_zoo/honest_triton.py")
cand = importlib.util.module_from_spec(spec); spec.loader.exec_module(cand)
dev = torch.device("cuda"); torch.zeros(1, device=dev)
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
clk = lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
cpu = _sleep_cycles_per_us(dev)
fn = cand.softmax
def one(x, cycles, flush):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush(); h0 = time.perf_counter(); torch.cuda._sleep(cycles); s.record(); fn(x, dim=-1); e.record(); h1 = time.perf_counter()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3, (h1 - h0) * 1e6
from roofkit.harness.timing import L2Flusher

flush = L2Flusher(dev)
for rep in range(6):
    for floor_us in (0, 200):
        for busy in (False, True):
            xs = [torch.randn(1000, 4096, device=dev) for _ in range(15)]
            host = []
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.025:
                a = time.perf_counter(); fn(xs[0], dim=-1); host.append(time.perf_counter() - a); torch.cuda.synchronize()
            if busy:
                torch.cuda._sleep(int(cpu * 50000)); torch.cuda.synchronize()
            c0 = clk()
            med = sorted(host)[len(host)//2] * 1e6
            cycles = int(cpu * (max(2 * med + 20, floor_us)))
            r = [one(x, cycles, flush) for x in xs]
            c1 = clk()
            t = sorted(x[0] for x in r); hs = sorted(x[1] for x in r)
            print(f"rep {rep} floor {floor_us:3d} busy {busy:d} warm host {med:5.1f}us sleep {cycles/cpu:5.0f}us clk {c0}->{c1}  dev med {t[7]:5.1f} p20 {t[3]:5.1f} p80 {t[11]:5.1f}  host(sleep..e) med {hs[7]:5.1f} max {hs[-1]:5.1f}")
