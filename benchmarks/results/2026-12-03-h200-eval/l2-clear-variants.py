import ctypes
import importlib.util

import torch

from roofkit.harness import _eval_worker as W

spec = importlib.util.spec_from_file_location("cand", "tests/harness/eval_zoo/honest_triton.py")
cand = importlib.util.module_from_spec(spec); spec.loader.exec_module(cand)
dev = torch.device("cuda"); torch.zeros(1, device=dev)
base = W._persisting_l2_controls()
read, clear = base
cuda = ctypes.CDLL("libcuda.so.1")
def put0(): cuda.cuCtxSetLimit(ctypes.c_int(6), ctypes.c_size_t(0))
def reset(): cuda.cuCtxResetPersistingL2Cache()
def both_sync(): clear(); torch.cuda.synchronize()
variants = {"none": None, "setlimit": (read, put0), "reset": (read, reset), "both": (read, clear), "both+sync": (read, both_sync),
            "read-only": (read, lambda: None)}
res = {}
for shape in [(1000, 4096), (4000, 4000)]:
  for rep in range(2):
    for name, ctl in variants.items():
        t = W._Timer(dev)
        t.l2 = ctl
        sets = [([torch.randn(shape, device=dev)], {"dim": -1}) for _ in range(15)]
        outs, times, idles, *_ = t.run(cand.softmax, sets, 25.0)
        times = sorted(times); idl = sorted(i - x for i, x in zip(idles, times))
        key = f"{shape[0]}x{shape[1]} {name}"
        res.setdefault(key, []).append([times[len(times)//2]*1e3, times[3]*1e3, times[11]*1e3, idl[len(idl)//2]*1e3, t.idle_baseline_ms*1e3])
for k, v in res.items():
    print(f"{k:24s}", "  ".join("med %.1f p20 %.1f p80 %.1f idle %.1f base %.1f us" % tuple(x) for x in v))
