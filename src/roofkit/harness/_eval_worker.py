"""The process that runs candidates for ``roofkit eval`` (started by ``harness.evaluate``; never
imported by the judge itself).

It imports torch once, then forks one process per candidate. That process writes a ``hello``
(its pid) before any candidate code runs, points its stdout/stderr at ``candidate.log`` in its own
directory and stdin at /dev/null, imports the candidate file and answers one ``call`` message at a
time with the output and the inputs as they are after the call. When it ends, this process
reports its exit status (``ended``), so an ``os._exit`` or a crash in a candidate is told apart
from a hang. On a GPU (the ``candidate`` message's ``device``) every call's tensors move there
first and come back to the CPU, and a ``time`` message times the candidate on sets of inputs with
CUDA events (``_Timer``, bound before the candidate is imported). Messages travel as length-prefixed ``torch.save`` bytes over two inherited pipe
descriptors named by ``ROOFKIT_EVAL_FDS`` (read and removed from the environment at start); what
the candidate prints never reaches them. The judge trusts none of it: it decodes with
``weights_only=True`` and checks every value against references it computed itself.
"""

from __future__ import annotations

import os
import sys

FRAME_HEADER = 8  # bytes of the big-endian payload length before every message


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        data = os.read(fd, min(n - got, 1 << 20))
        if not data:
            return None
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def _recv(fd: int):
    import io

    import torch

    head = _read_exact(fd, FRAME_HEADER)
    if head is None:
        return None
    payload = _read_exact(fd, int.from_bytes(head, "big"))
    if payload is None:
        return None
    # Any argument a spec passes must arrive; what could write here can run code in this process anyway.
    return torch.load(io.BytesIO(payload), weights_only=False)


def _send(fd: int, obj) -> None:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    view = memoryview(len(data).to_bytes(FRAME_HEADER, "big") + data)
    while view:
        view = view[os.write(fd, view):]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def _plain(t):
    """A plain-``torch.Tensor`` detached copy of ``t`` (whatever subclass it is)."""
    import torch

    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(t.detach(), torch.Tensor).clone()


def _to(obj, device, copy: bool = False):
    """``obj`` (a tensor, or anything else) on ``device``, a tensor keeping its strides and
    storage offset (an expanded view stays one); ``copy``: a tensor already there copied too."""
    import torch

    if not isinstance(obj, torch.Tensor) or (obj.device == device and not copy):
        return obj
    t = obj.detach()
    with torch.no_grad():
        if t.numel() and any(st == 0 and sz > 1 for st, sz in zip(t.stride(), t.shape)):  # an expanded view
            idx = tuple(slice(0, 1) if st == 0 else slice(None) for st in t.stride())
            return _to(t[idx].contiguous(), device, copy).expand(t.shape)
        # (the same strides and storage offset: a candidate meets the alignment the case gives)
        span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) if t.numel() else 0
        base = torch.empty(t.storage_offset() + span, dtype=t.dtype, device=device)
        return base.as_strided(t.shape, t.stride(), t.storage_offset()).copy_(t)


def _twin(obj):
    """A copy of ``obj`` (a tensor on the GPU: same shape, strides and storage offset; anything
    else as it is)."""
    import torch

    if not isinstance(obj, torch.Tensor) or obj.device.type != "cuda":
        return obj
    return _to(obj, obj.device, copy=True)


def _back(t):
    """A tensor of the candidate's as a plain tensor for the channel (``_plain``), copied to the
    CPU from a GPU (a tensor elsewhere, e.g. on the meta device, goes as it is: the judge says so)."""
    t = _plain(t)
    return t.cpu() if t.device.type == "cuda" else t


# the sleep before a timed call (_Timer.run): at least COVER_MIN_US and COVER_HOST_TIMES times the
# warm-up's host time plus COVER_EXTRA_US, at most COVER_MAX_US (a slower launch only costs the candidate)
COVER_MIN_US, COVER_HOST_TIMES, COVER_EXTRA_US, COVER_MAX_US = 500.0, 4.0, 100.0, 20000.0
# a slow spell of the host lengthens a do-nothing call's idle delay 2.5x (docs/eval.md): the
# in-round side-stream baseline is taken up to this many times the one measured before the import
IDLE_SPELL_MAX = 3.0
_CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # CUlimit (cuda.h)
# the operators the timer's own work runs (flush, refill, copies, comparison): [namespace, name]
_TIMER_OPS = [["aten", op] for op in ("zero_", "fill_", "copy_", "clone", "equal", "_to_copy", "view", "reshape",
                                      "_reshape_alias", "contiguous", "empty_like", "empty_strided")]


def _persisting_l2_controls():
    """(read, clear) of the current context's persisting-L2 set-aside through the CUDA driver API
    (``cuCtxGetLimit`` / ``cuCtxSetLimit`` / ``cuCtxResetPersistingL2Cache``): ``read()`` gives the
    bytes set aside (a stream's access-policy window keeps lines there, out of reach of an L2
    flush), ``clear()`` sets it to none and returns persisting lines to normal. None where the
    driver or the device does not offer it."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        get, put, reset = cuda.cuCtxGetLimit, cuda.cuCtxSetLimit, cuda.cuCtxResetPersistingL2Cache
    except (OSError, AttributeError):
        return None
    get.argtypes, put.argtypes, reset.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int], \
        [ctypes.c_int, ctypes.c_size_t], []
    value, limit = ctypes.c_size_t(), _CU_LIMIT_PERSISTING_L2_CACHE_SIZE

    def read() -> int:
        return int(value.value) if get(ctypes.byref(value), limit) == 0 else -1

    def clear() -> None:
        put(limit, 0)
        reset()

    if read() < 0:
        return None
    clear()
    return read, clear


class _Timer:
    """Times calls as ``roofkit bench`` does (harness/timing.py): before each, the L2 overwritten
    (twice its size, read from the device) and a device-side sleep sized from the call's host
    time, so launch work is not device time; CUDA events around the call. Also per call: a copy
    of the output taken on the stream right after it returns, compared with the output once the
    whole device is idle (work still writing it: ``deferred``), and an event recorded after a
    device-wide synchronize (work on other streams ends before it: ``idle_ms``, the call's time
    plus what the device did after that copy), and the persisting-L2 set-aside read after the
    warm-up and after every call, and cleared (lines a candidate pins there would survive the
    flush: ``persisting_l2``; nothing of the candidate's runs between a call and the next flush).
    Everything it
    uses is bound here, before the candidate is imported (a candidate that replaces torch's
    functions later does not reach these references). The idle delay of a call that does
    nothing, the baseline of the judge's side-stream check, is measured after each timed call
    (and once here, for a reply whose round failed)."""

    def __init__(self, device):
        import time

        import torch

        from roofkit.harness.timing import L2Flusher, _sleep_cycles_per_us

        self.device = device
        self.torch = torch
        self.Event = torch.cuda.Event
        base = torch._C._CudaEventBase
        self.record, self.elapsed = base.record, base.elapsed_time
        self.stream = torch.cuda.current_stream
        self.sync = torch.cuda.synchronize
        self.sleep = torch.cuda._sleep
        self.perf = time.perf_counter
        self.equal = torch.equal
        self.uint8 = torch.uint8
        # what a candidate could replace to change the figures: checked again after every round
        self.watched = {f"{owner.__name__}.{name}": (owner, name, getattr(owner, name)) for owner, names in (
            (torch.cuda.Event, ("record", "elapsed_time", "synchronize")),
            (base, ("record", "elapsed_time", "synchronize")),
            (torch.cuda, ("Event", "synchronize", "current_stream", "_sleep")),
            (torch, ("equal",)), (torch.Tensor, ("clone", "contiguous", "view", "reshape", "zero_", "copy_")),
            (time, ("perf_counter", "monotonic"))) for name in names}
        self.flush = L2Flusher(device)
        self.flush_buffer = self.flush.buffer
        self.own_kernels: list[str] = []  # what a profiled call doing nothing ran (flush, sleep)
        self.cycles_per_us = _sleep_cycles_per_us(device)
        self.cover_us = (COVER_MIN_US, COVER_HOST_TIMES, COVER_EXTRA_US, COVER_MAX_US)
        self.spell_max = IDLE_SPELL_MAX
        self.l2 = _persisting_l2_controls()
        from torch.profiler import ProfilerActivity, profile

        self.watched.update({f"profile.{name}": (profile, name, getattr(profile, name))
                             for name in ("start", "stop", "events")})
        self.watched["L2Flusher.__call__"] = (L2Flusher, "__call__", L2Flusher.__call__)
        # kernels registered from Python for the operators the timer's own work dispatches to
        # (torch.library; a registration straight through torch._C is not seen: docs/eval.md)
        self.impls = getattr(torch.library, "_impls", None)
        self.impls_before = set(self.impls) if isinstance(self.impls, set) else None
        self.profile, self.cuda_activity, self.events = profile, ProfilerActivity.CUDA, profile.events
        self.cuda_type = torch.autograd.DeviceType.CUDA
        empty = [self._one(lambda: None, 0)[1:3] for _ in range(21)]
        self.idle_baseline_ms = sorted(i - t for t, i in empty)[len(empty) // 2]
        self.own = dict(vars(self))  # (its own references too: a candidate could reach this object)

    def tampered(self) -> list[str]:
        """The watched names (``module.attribute``) no longer bound to what they were."""
        changed = [k for k, (owner, name, obj) in self.watched.items() if getattr(owner, name, None) is not obj]
        if self.flush.buffer is not self.flush_buffer or vars(self.flush).keys() != {"nbytes", "buffer"}:
            changed.append("the timer's L2 flush")
        if self.impls_before is not None:
            new = {i for i in self.impls - self.impls_before if i.split("/")[:2] in _TIMER_OPS and not i.endswith("/Meta")}
            changed += [f"a kernel registered for {i}" for i in sorted(new)]
        mine = vars(self)
        changed += [f"the timer's {k}" for k, v in self.own.items() if k != "own" and mine.get(k) is not v]
        return changed + [f"the timer's {k}" for k in mine if k not in self.own and k != "own"]

    def _held_l2(self) -> int:
        """The bytes of persisting L2 set aside now (0 where it cannot be read); the set-aside and
        any persisting lines cleared whatever was read (a candidate may have set the limit back
        to 0 with lines still marked)."""
        if self.l2 is None:
            return 0
        held = self.l2[0]()
        self.l2[1]()
        return max(held, 0)

    def _one(self, call, sleep_cycles, prof=None):
        s, e, c, idle = (self.Event(enable_timing=True) for _ in range(4))
        stream = self.stream(self.device)
        if prof is not None:
            try:
                prof[0].start()
            except Exception as exc:  # noqa: BLE001 (the profiler's own failure: the call is timed unprofiled)
                prof[1].append(_describe(exc))
                prof = None
        self.flush()
        self.sleep(sleep_cycles)
        self.record(s, stream)
        try:
            out = call()
            self.record(e, stream)
        finally:  # (stopped whatever the call did: later rounds are not timed under the profiler)
            if prof is not None:
                self.sync(self.device)
                try:
                    prof[0].stop()
                except Exception as exc:  # noqa: BLE001
                    prof[1].append(_describe(exc))
        early = out.detach().clone() if isinstance(out, self.torch.Tensor) and out.layout == self.torch.strided \
            else None
        self.record(c, stream)
        self.sync(self.device)
        self.record(idle, stream)
        self.sync(self.device)
        t = self.elapsed(s, e)
        # (the device's busy time past the copy's end: the copy itself is not the call's)
        return out, t, t + self.elapsed(c, idle), early, self._held_l2()

    def _profiled(self, call, sleep_cycles) -> tuple[dict | None, str]:
        """({kernel name: device microseconds}, "") of one call timed as the others are, under
        torch.profiler, without what the timer itself runs (L2 flush, sleep: the kernels of a
        profiled call that does nothing); (None, why) where the profiler failed. What the
        candidate raises passes through."""
        runs, notes = [], []
        for fn in (lambda: None, call):
            try:
                prof = (self.profile(activities=[self.cuda_activity]), notes)
            except Exception as exc:  # noqa: BLE001
                return None, _describe(exc)
            self._one(fn, sleep_cycles, prof)
            if notes:
                return None, notes[0]
            try:
                runs.append(_kernel_times(self.events(prof[0]), self.cuda_type))
            except Exception as exc:  # noqa: BLE001
                return None, _describe(exc)
        self.own_kernels[:] = sorted(runs[0])
        return {k: us for k, us in runs[1].items() if k not in runs[0]}, ""

    def _refill(self, into: list, values: list) -> list:
        """``values`` with each tensor copied into the tensor at its position in ``into`` where both
        have one shape, dtype and layout and ``into``'s elements do not overlap; else as given."""
        torch = self.torch
        out = []
        for dst, src in zip(into, values):
            if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and dst is not src \
                    and (dst.shape, dst.stride(), dst.dtype, dst.device) == (src.shape, src.stride(), src.dtype, src.device) \
                    and not any(st == 0 and n > 1 for st, n in zip(dst.stride(), dst.shape)):
                try:
                    with torch.no_grad():
                        dst.copy_(src)
                    out.append(dst)
                except RuntimeError:  # (elements that overlap: the set's own tensor)
                    out.append(src)
            else:
                out.append(src)
        return out + list(values[len(out):])

    def _same_bits(self, a, b) -> bool:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return self.equal(a.contiguous().reshape(-1).view(self.uint8), b.contiguous().reshape(-1).view(self.uint8))

    def run(self, fn, sets, warmup_ms: float):
        """(outputs, device ms per call, ms until the device was idle, deferred flags, persisting-L2
        bytes found, kernels of a profiled call (None: not profiled), why not, the idle delay of a
        call doing nothing: median over one after each timed call, at most IDLE_SPELL_MAX times
        the one measured before the import) of one call of ``fn`` on each of ``sets`` ((args, kwargs) on the device), after calls on a
        copy of the first set for ``warmup_ms`` (three at least) that size the sleep."""
        args0, kwargs0 = sets[0]
        # (the warm-up on copies: the first set's own tensors are first seen by the first timed call)
        warm_args, warm_kwargs = [_twin(a) for a in args0], {k: _twin(v) for k, v in kwargs0.items()}
        n, t0, host = 0, self.perf(), []
        while n < 3 or (self.perf() - t0) * 1e3 < warmup_ms:
            h = self.perf()
            fn(*warm_args, **warm_kwargs)
            host.append(self.perf() - h)
            self.sync(self.device)
            n += 1
        # (longer than bench's sleep: each call here starts on an idle device (it is synchronized
        # after), so the flush and the sleep alone must cover the host's sleep, event and launch
        # path, 2-4x the bare call's host time on the H200's host and 2.5x that in a slow spell:
        # the 500 us floor covers it for launches up to about 50 us; COVER_MAX_US bounds what a
        # candidate's slow warm-up can make every call wait)
        low, times_host, extra, high = self.cover_us
        host_us = sorted(host)[len(host) // 2] * 1e6
        cycles = int(self.cycles_per_us * min(high, max(low, times_host * host_us + extra)))
        warm_l2 = self._held_l2()  # (what the warm-up left set aside: counted with the first timed call)
        outs, times, idles, deferred, held, empty = [], [], [], [], [], []
        for args, kwargs in sets:
            # (fresh values in the first set's tensors where the layouts allow: the same objects at
            # the same addresses on every call, as a harness reusing its buffers would pass them,
            # so a cache keyed by identity answers with a stale output and is caught)
            args, kwargs = self._refill(args0, args), dict(zip(kwargs, self._refill(
                [kwargs0.get(k) for k in kwargs], list(kwargs.values()))))
            out, t, idle, early, l2 = self._one(lambda a=args, k=kwargs: fn(*a, **k), cycles)
            times.append(t)
            idles.append(idle)
            # (the judged copy taken at once, once the device is idle, and the deferred check made
            # against that same copy: nothing can finish the output between the two. Copied, not
            # kept: an output that is a view of an input, such as torch.transpose's, or a buffer
            # the candidate reuses, would otherwise take the next call's values)
            if isinstance(out, self.torch.Tensor) and out.layout == self.torch.strided:
                out = out.detach().clone()
            deferred.append(early is not None and not self._same_bits(early, out))
            outs.append(out)
            held.append(l2)
            # (a call doing nothing after each: the idle delay of the same moments, the baseline of
            # the side-stream check; a slow spell of the host lengthens both alike)
            empty.append(self._one(lambda: None, cycles)[1:3])
        held[0] = max(held[0], warm_l2)
        # One more call on the first set, timed as the others (its time not reported), profiled.
        kernels, note = self._profiled(lambda: fn(*args0, **kwargs0), cycles)
        # (at most IDLE_SPELL_MAX times the delay measured before the candidate was imported: a
        # candidate's thread that keeps the device busy during the do-nothing calls raises the
        # baseline its side-stream work is measured against, but no further than that)
        base = min(sorted(i - t for t, i in empty)[len(empty) // 2], self.spell_max * self.idle_baseline_ms)
        return outs, times, idles, deferred, held, kernels, note, base


def _run_candidate(rfd: int, wfd: int, msg: dict) -> int:
    import importlib.util

    import torch

    from roofkit.harness.verify import poisoned_allocations

    os.chdir(msg["dir"])
    device = torch.device(msg.get("device", "cpu"))
    timer = _Timer(device) if device.type == "cuda" else None
    _send(wfd, {"kind": "hello", "pid": os.getpid()})
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open("candidate.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    try:
        mod_spec = importlib.util.spec_from_file_location("candidate", msg["path"])
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules["candidate"] = module
        mod_spec.loader.exec_module(module)
    except SystemExit as e:
        _send(wfd, {"kind": "import", "status": "exit", "message": f"sys.exit({e.code!r}) while importing"})
        return 0
    except BaseException as e:  # noqa: BLE001 (whatever the candidate raises is reported)
        _send(wfd, {"kind": "import", "status": "error", "message": _describe(e)})
        return 0
    fn = getattr(module, msg["name"], None)
    if not callable(fn):
        _send(wfd, {"kind": "import", "status": "missing",
                    "message": f"{msg['path']} defines no function named {msg['name']!r}"})
        return 0
    _send(wfd, {"kind": "import", "status": "ok"})
    own = _jit_names(module)

    while True:
        msg = _recv(rfd)
        if msg is not None and msg["kind"] == "time" and timer is not None:
            reply = _timed(fn, msg, device, timer, own)
            _send(wfd, reply)
            if reply["status"] == "exit":
                return 0
            continue
        if msg is None or msg["kind"] != "call":
            return 0
        args = [_to(a, device) for a in msg["args"]]
        kwargs = {k: _to(v, device) for k, v in msg["kwargs"].items()}
        if "dy" in msg:
            msg["dy"] = _to(msg["dy"], device)
        grad_pos = msg.get("grad") or []
        # Arguments whose gradients are judged: each a leaf that requires grad seen through one
        # autograd step (so a candidate may still write into it, and be caught doing so).
        leaves = [args[i].detach().requires_grad_(True) for i in grad_pos]
        for i, leaf in zip(grad_pos, leaves):
            args[i] = leaf * 1
        reply = {"kind": "result", "seq": msg["seq"], "status": "ok", "type": "", "out": None, "message": "",
                 "grad_status": "", "grads": []}
        try:
            if msg.get("profile") and device.type == "cuda":  # (unpoisoned: no fill kernels in its list)
                out, reply["kernels"] = _profiled_call(fn, args, kwargs)
            else:
                with poisoned_allocations():
                    out = fn(*args, **kwargs)
            reply["type"] = f"{type(out).__module__}.{type(out).__qualname__}"
            if isinstance(out, torch.Tensor):
                reply["device"] = str(out.device)
                reply["out"] = _back(out)
                dy = msg.get("dy")
                if not grad_pos:
                    pass
                elif not out.requires_grad:
                    reply["grad_status"] = "none"
                elif (out.shape, out.dtype) != (dy.shape, dy.dtype):
                    reply["grad_status"] = "skipped"  # (the forward's shape or dtype is wrong already)
                else:
                    try:
                        with poisoned_allocations():
                            grads = torch.autograd.grad(out, leaves, dy, allow_unused=True)
                        reply["grads"] = [None if g is None else _back(g) for g in grads]
                        reply["grad_status"] = "ok"
                    except Exception as e:  # noqa: BLE001 (SystemExit and the like pass as they are)
                        reply.update(grad_status="exception", grad_message=_describe(e))
        except SystemExit as e:
            reply.update(status="exit", message=f"sys.exit({e.code!r})")
        except BaseException as e:  # noqa: BLE001 (whatever the candidate raises is reported)
            reply.update(status="exception", message=_describe(e))
        try:
            reply["args"] = [_back(a) if isinstance(a, torch.Tensor) else None for a in args]
            reply["kwargs"] = {k: _back(v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
            _send(wfd, reply)
        except BaseException as e:  # noqa: BLE001 (a candidate's output may break serialization)
            _send(wfd, {"kind": "result", "seq": reply["seq"], "status": "exception", "type": "", "out": None,
                        "message": "the output could not be sent: " + _describe(e), "args": [], "kwargs": {}})
        if reply["status"] == "exit":
            return 0


def _jit_names(module) -> list[str]:
    """The names of the Triton kernels a candidate module defines (``@triton.jit`` functions, also
    under ``triton.autotune`` / ``triton.heuristics``): what its own kernels are called."""
    names = []
    for obj in list(vars(module).values()):
        try:
            inner, depth = obj, 0
            while hasattr(inner, "fn") and depth < 4:  # Autotuner / Heuristics -> JITFunction -> function
                inner, depth = inner.fn, depth + 1
            if depth and callable(inner) and isinstance(getattr(inner, "__name__", None), str):
                names.append(inner.__name__)
        except Exception:  # noqa: BLE001, S112 (an object that will not say: not a kernel of ours to name)
            continue
    return sorted(set(names))


PROFILE_LOST = "(the profiler stopped or failed while the candidate ran)"


def _kernel_times(events, cuda_type) -> dict:
    """{kernel name: device microseconds} of a profile's events (those on the GPU)."""
    times: dict = {}
    for ev in events:
        if getattr(ev, "device_type", None) == cuda_type:
            times[ev.name] = times.get(ev.name, 0.0) + float(getattr(ev, "device_time_total", 0.0))
    return times


def _profiled_call(fn, args, kwargs):
    """(output, the names of the kernels one call of ``fn`` ran by torch.profiler) on a GPU: None
    where the profiler would not start, ``[PROFILE_LOST]`` where it failed after the candidate's
    code had run (a candidate can stop it); what ``fn`` raises passes through."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.start()
    except Exception:  # noqa: BLE001 (the profiler's own failure: not the candidate's)
        return fn(*args, **kwargs), None
    try:
        out = fn(*args, **kwargs)
        torch.cuda.synchronize()
    finally:
        try:
            prof.stop()
        except Exception:  # noqa: BLE001
            prof = None
    try:
        return out, sorted(_kernel_times(prof.events(), torch.autograd.DeviceType.CUDA))
    except Exception:  # noqa: BLE001
        return out, [PROFILE_LOST]


def _timed(fn, msg: dict, device, timer: _Timer, own: list) -> dict:
    """The answer to a ``time`` message: the candidate timed on each of its input sets
    (``_Timer.run``), with every output (on the CPU) for the judge to check."""
    import torch

    sets = [([_to(a, device) for a in args], {k: _to(v, device) for k, v in kwargs.items()})
            for args, kwargs in msg["sets"]]
    reply = {"kind": "timed", "seq": msg["seq"], "status": "ok", "message": "", "times_ms": [], "idle_ms": [],
             "deferred": [], "outs": [], "types": [], "devices": [], "idle_baseline_ms": timer.idle_baseline_ms,
             "idle_baseline_first_ms": timer.idle_baseline_ms,
             "tampered": [], "kernels": [], "kernel_note": "", "own_kernels": own, "persisting_l2": []}
    try:
        outs, times, idles, deferred, held, ran, note, base = timer.run(fn, sets, float(msg.get("warmup_ms", 25.0)))
        reply.update(times_ms=[float(t) for t in times], idle_ms=[float(t) for t in idles], idle_baseline_ms=float(base),
                     deferred=[bool(d) for d in deferred], persisting_l2=[int(b) for b in held])
        for out in outs:
            reply["types"].append(f"{type(out).__module__}.{type(out).__qualname__}")
            tensor = isinstance(out, torch.Tensor)
            reply["devices"].append(str(out.device) if tensor else "")
            reply["outs"].append(_back(out) if tensor and out.layout == torch.strided else None)
        if ran is not None:
            reply["kernels"] = sorted(([k, v] for k, v in ran.items()), key=lambda kv: -kv[1])[:256]
        reply["kernel_note"] = note
        reply["timer_kernels"] = list(timer.own_kernels)
        reply["tampered"] = timer.tampered()
    except SystemExit as e:
        reply.update(status="exit", message=f"sys.exit({e.code!r})")
    except BaseException as e:  # noqa: BLE001 (whatever the candidate raises is reported)
        reply.update(status="exception", message=_describe(e))
    return reply


def _become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``):
    a process a candidate detaches (double fork, ``setsid``) is re-parented here, not to init, so
    ``_kill_descendants`` finds it. False where the call is not available."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    pids = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return pids


def _kill_descendants() -> None:
    """SIGKILL every process left under this one (as subreaper: a candidate's detached ones too),
    reaping them, until none is left."""
    import signal

    for _ in range(1000):
        kids = _children()
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def main() -> None:
    rfd, wfd = (int(x) for x in os.environ.pop("ROOFKIT_EVAL_FDS").split(","))
    import torch  # noqa: F401  (once, before forking: each candidate starts with it loaded)

    import roofkit.harness.verify  # noqa: F401

    _become_subreaper()
    try:
        while True:
            msg = _recv(rfd)
            if msg is None or msg["kind"] != "candidate":
                return
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    code = _run_candidate(rfd, wfd, msg)
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            _kill_descendants()  # whatever the candidate started dies with it
            _send(wfd, {"kind": "ended", "pid": pid, "exitcode": os.waitstatus_to_exitcode(status)})
    finally:
        _kill_descendants()


if __name__ == "__main__":
    main()
