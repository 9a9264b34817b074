"""The op runtime: what runs between a user's call and a kernel, declared once per op.

Two pieces, used by every op module:

- ``Launch``: one kernel launch whose kernel, grid, compile-time constants and options were
  decided once (by the op's configuration heuristic). Its first call goes through Triton's
  ``kernel[grid](...)`` (binding, specialization, compilation); later calls with arguments of
  the same specialization launch the compiled kernel directly on the current stream, skipping
  Triton's per-call binding (6-14 us of Python per launch). The specialization Triton would
  compute is reproduced cheaply (``_spec_key``: each tensor's dtype and 16-byte alignment, each
  integer's "is 1", "divisible by 16" and "needs 64 bits"), so a call whose arguments would have
  compiled differently never reuses the wrong binary.
- ``Op``: one declaration (the host launcher, its fake for tracing, optionally its autograd)
  that provides the three ways an op is called: eagerly (the launcher itself, no dispatcher in
  between; a ``torch.autograd.Function`` when a gradient is needed), while ``torch.compile``
  traces (a ``torch.library`` custom op with the fake and the autograd registered, so
  ``fullgraph=True`` holds), and ``torch.ops.roofkit.<name>`` for anyone calling it by name.
  Eager calls reach the custom op only while tracing: its dispatch costs ~11 us per call and
  ``register_autograd``'s wrapper ~25 us per forward + backward.

Everything here is also correct under CUDA-graph capture (launches go to the current stream,
nothing is read back) and under the Triton interpreter (where ``Launch`` always takes Triton's own
path).
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import torch

try:  # the fast path needs Triton's JIT internals; any other Triton falls back to kernel[grid]
    from triton import knobs as _knobs
    from triton.runtime.jit import JITFunction as _JITFunction
except Exception:  # pragma: no cover - depends on the installed triton
    _knobs = None
    _JITFunction = None

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# The current CUDA device's index without torch.cuda.current_device()'s lazy-init check (a CUDA
# tensor exists whenever this runs, so CUDA is initialized).
_current_device = torch._C._cuda_getDevice if hasattr(torch._C, "_cuda_getDevice") else (lambda: 0)


def _hooks_set() -> bool:
    """Whether a profiler registered launch hooks (they need Triton's own launch path). Triton 3.6
    keeps them in a HookChain, an always-true object whose ``calls`` list is empty when unused."""
    hook = _knobs.runtime.launch_enter_hook
    calls = getattr(hook, "calls", hook)
    if isinstance(calls, list):  # the plan recorder's own hook does not count
        return bool(calls) and not (len(calls) == 1 and calls[0] is _raw_launch_hook)
    return bool(calls)


def _spec_key(args) -> tuple:
    """What Triton specializes a kernel on, for the runtime arguments ``args``: tensors by dtype
    and 16-byte alignment, integers by "== 1", "% 16 == 0" and 32/64-bit range; floats, bools and
    None by type; tensor descriptors by everything they carry but the base address's high bits."""
    return tuple([
        (a.dtype, not a.data_ptr() & 15) if isinstance(a, torch.Tensor)
        else (a == 1, not a & 15, _INT32_MIN <= a <= _INT32_MAX) if type(a) is int
        else type(a) if type(a) in _PLAIN
        else _other_key(a)
        for a in args
    ])


_PLAIN = (float, bool, type(None))


def _other_key(a):
    base = getattr(a, "base", None)
    if isinstance(base, torch.Tensor):  # a host tensor descriptor (triton.tools / Gluon)
        layout = getattr(a, "layout", None)
        return (type(a), base.dtype, not base.data_ptr() & 15, tuple(a.shape), tuple(a.strides),
                tuple(a.block_shape), getattr(a, "padding", None), repr(layout) if layout is not None else None)
    try:
        hash(a)
    except TypeError:
        return object()  # unhashable: never equal to a cached key, so Triton's own path decides
    return (type(a), a)


class Launch:
    """A kernel launch decided once: ``Launch(kernel, grid, **constexprs_and_options)``, then
    ``launch(*runtime_args)`` per call (the arguments before the kernel's compile-time ones, in
    order). The compiled kernel is kept per argument specialization (see ``_spec_key``)."""

    __slots__ = ("fn", "grid", "consts", "g", "compiled", "tail")

    def __init__(self, fn, grid, **consts):
        self.fn = fn
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        self.grid = grid
        self.g = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        self.consts = consts
        self.compiled: dict[tuple, tuple] = {}
        self.tail: tuple | None = None  # the compile-time arguments' values, in parameter order

    def _slow(self, args):
        return self.fn[self.grid](*args, **self.consts)

    def __call__(self, *args):
        if _REC[0] and _recording_frame() is not None:
            _record_launch(self, args)
            return
        if _JITFunction is None or not isinstance(self.fn, _JITFunction) or _hooks_set():
            self._slow(args)  # the interpreter, a profiler's launch hooks, or an unknown Triton
            return
        device = _current_device()
        key = (device, _spec_key(args))
        hit = self.compiled.get(key)
        if hit is None:
            kernel = self._slow(args)
            tail = self._tail(len(args))
            if kernel is not None and tail is not None:
                self.tail = tail
                self.compiled[key] = (kernel.run, kernel.function, kernel.packed_metadata)
            return
        run, function, packed = hit
        g0, g1, g2 = self.g
        run(g0, g1, g2, _raw_stream(device), function, packed, None, None, None, *args, *self.tail)

    def bind(self, *args) -> "Bound | None":
        """Launch with ``args`` (as ``launch(*args)``) and return the compiled kernel bound to this
        grid and these constants for later calls of the same specialization, or None where only
        Triton's own path can launch it (the interpreter, launch hooks, an unknown Triton)."""
        self(*args)
        if _JITFunction is None or not isinstance(self.fn, _JITFunction) or _hooks_set():
            return None
        device = _current_device()
        hit = self.compiled.get((device, _spec_key(args)))
        if hit is None:
            return None
        return Bound(*hit, self.g, self.tail, device)

    def _tail(self, n: int):
        """The values of the kernel's parameters after the ``n`` runtime ones (compile-time
        constants given here or their defaults), or None if one of them is not compile-time
        (then every call takes Triton's path)."""
        out = []
        for p in self.fn.params[n:]:
            if not p.is_constexpr:
                return None
            if p.name in self.consts:
                out.append(self.consts[p.name])
            elif p.has_default:
                out.append(p.default)
            else:
                return None
        return tuple(out)


class Bound:
    """One compiled kernel with its grid and compile-time arguments bound (``Launch.bind``):
    ``bound(*runtime_args)`` launches it on the current stream, with no check at all. Only for
    an op's plan, whose key fixes everything Triton specialized the kernel on: the dtypes, the
    16-byte alignment of every pointer and the "== 1 / % 16 / 64-bit" class of every integer."""

    __slots__ = ("run", "function", "packed", "g0", "g1", "g2", "tail", "device")

    def __init__(self, run, function, packed, grid, tail, device):
        self.run, self.function, self.packed, self.tail, self.device = run, function, packed, tail, device
        self.g0, self.g1, self.g2 = grid

    def __call__(self, *args):
        self.run(self.g0, self.g1, self.g2, _raw_stream(self.device), self.function, self.packed, None, None,
                 None, *args, *self.tail)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


class Plans(dict):
    """An op's plans by key, dropped all at once past ``limit`` entries (a program that keeps
    making new shapes must not grow it without bound)."""

    def __init__(self, limit: int = 4096):
        super().__init__()
        self.limit = limit
        _all_plans.append(self)

    def add(self, key, plan):
        if len(self) >= self.limit:
            self.clear()
        self[key] = plan
        return plan


def fast_path_ok(*tensors) -> bool:
    """Whether an op's eager plan may serve a call on these tensors (None entries allowed; the
    first one is not None): plain strided CUDA tensors (``_plain``) on the current device, no
    transform active (``_transforms_active``), no profiler launch hooks, no CUDA-graph capture
    (a captured call takes the checked path, whose allocations the graph's pool owns)."""
    if torch.compiler.is_compiling():  # first: Dynamo must not trace the tensor queries below
        return False
    for t in tensors:
        if t is not None and not (type(t) in _PLAIN_TENSORS and t.layout is torch.strided and _plain(t)):
            return False
    x = tensors[0]
    return (x.is_cuda and x.get_device() == _current_device() and not _transforms_active()
            and not _hooks_set() and not torch.cuda.is_current_stream_capturing()
            and not (_REC[0] and _recording_frame() is not None))  # a recorder must see the launches


def needs_grad(*args) -> bool:
    """Whether autograd must record a call on these arguments (tensors or anything else)."""
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


LAUNCH_CACHE_LIMIT = 4096  # Launch objects kept per module before its cache starts over


def cached_launch(cache: dict, fn, grid, **consts) -> Launch:
    """The ``Launch`` of ``fn`` with this grid and these constants from ``cache`` (made once; the
    cache starts over past ``LAUNCH_CACHE_LIMIT`` entries, since grids follow the shapes: dropping
    one only costs Triton's own path on the next call of that grid)."""
    key = (fn, grid if not isinstance(grid, list) else tuple(grid), tuple(consts.items()))
    launch = cache.get(key)
    if launch is None:
        if len(cache) >= LAUNCH_CACHE_LIMIT:
            cache.clear()
        launch = cache[key] = Launch(fn, grid, **consts)
    return launch


def launch(cache: dict, fn, grid, *args, **consts) -> None:
    """``fn[grid](*args, **consts)`` through ``cached_launch``: the runtime arguments positionally,
    the compile-time ones and the options by keyword."""
    cached_launch(cache, fn, grid, **consts)(*args)


def _cuda_device_of(args) -> torch.device | None:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device if a.is_cuda else None
    return None


_STRIDE_TAGS = tuple(getattr(torch.Tag, t) for t in ("needs_exact_strides",) if hasattr(torch.Tag, t)) or (
    torch.Tag.needs_fixed_stride_order,)


class Op:
    """One op of the runtime, declared once.

    Args:
        name: ``"roofkit::<name>"``, the custom op's qualified name.
        impl: the host launcher (checks done by the public function; allocates and launches).
        fake: same signature, returns empty outputs of the right shape, dtype and device (the
            custom op's fake implementation, used while torch.compile traces).
        mutates_args: as ``torch.library.custom_op``.

    ``op(*args)`` runs ``impl`` directly in eager mode (on the device of the first CUDA tensor
    argument) and the custom op while torch.compile traces; ``op.custom`` is the custom op.
    ``op.autograd(setup, backward)`` makes ``op.apply(*args)`` differentiable, both ways.
    """

    def __init__(self, name: str, impl: Callable, fake: Callable, mutates_args=()):
        self.name = name
        self.impl = impl
        signature = inspect.signature(impl, eval_str=True)
        body = _on_device(impl, signature)
        # Compiled graphs hand the op its arguments with the strides seen while tracing (an
        # op's outputs may follow its inputs' layout, as rope's do, and the fake must agree).
        self.custom = torch.library.custom_op(name, mutates_args=mutates_args, tags=_STRIDE_TAGS)(body)
        self.custom.register_fake(fake)
        self._function = None
        # The arguments a call writes, by position: the dispatcher bumps their autograd version
        # counters, so an eager call must too (a later backward through a graph that saved one
        # of them then fails loudly instead of reading overwritten values).
        names = list(signature.parameters)
        self._mutated = tuple(names.index(a) for a in mutates_args) if mutates_args not in ((), "unknown") else ()
        # Eager calls' plans (see ``Plan``), by ``plan_key`` of the arguments. Ops that write their
        # arguments are not planned: their checks may depend on how the arguments overlap.
        self.plans = Plans() if not mutates_args else None
        functools.update_wrapper(self, impl)

    def __call__(self, *args):
        if not _direct(args):
            return self.custom(*args)
        if _REC[0] and _recording_frame() is not None:
            return _record_op(self, args, False)
        out = self._run(args)
        for i in self._mutated:
            if isinstance(args[i], torch.Tensor):
                torch.autograd.graph.increment_version(args[i])
        return out

    def _run(self, args, plan=None):
        """The host launcher on ``args``: through its plan (given, kept, or recorded now) when the
        call may be planned, else directly."""
        if plan is not None:
            return plan.run(args)
        plans = self.plans
        if plans is not None and PLANS[0]:
            key = plan_key(args)
            if key is not None:
                plan = plans.get(key)
                if plan is None:  # a key seen once runs as written: shapes that never repeat cost no recording
                    plans.add(key, _SEEN)
                elif plan is _SEEN and not _args_share_memory(args):
                    out, plan = _record(lambda: _call_on_device(self.impl, args), args)
                    plans[key] = plan
                    return out
                elif type(plan) is not Unplanned:
                    return plan.run(args)
        return _call_on_device(self.impl, args)

    def autograd(self, setup_context: Callable, backward: Callable) -> "Op":
        """Register ``backward(ctx, *grads)`` with ``setup_context(ctx, inputs, output)`` (the
        ``torch.library.register_autograd`` contract) for the custom op and for eager calls."""
        op_name = self.name.split("::")[-1]

        def custom_backward(ctx, *grads):
            # torch.ops.roofkit.<name> called eagerly: the same first-order guard as the eager
            # Function's (under torch.compile's tracing a mode is active, and the graph decides).
            if torch.is_grad_enabled() and not _transforms_active():
                raise RuntimeError(f"roofkit ({op_name}): double backward is not supported (the op is first "
                                   "order); compute this gradient without create_graph=True")
            return backward(ctx, *grads)

        self.custom.register_autograd(custom_backward, setup_context=setup_context)

        # The forward takes ctx itself (the older Function form): with a separate setup_context,
        # Function.apply binds default arguments through inspect.signature on every call.
        # ``plan``: the forward's plan when the caller already knows it (a replayed public call).
        def forward(ctx, plan, *args):
            output = self._run(args, plan)
            setup_context(ctx, args, output)
            return output

        # First order only: a backward that would itself be differentiated (create_graph=True)
        # raises at once instead of returning gradients without their second-order terms.
        def backward_(ctx, *grads):
            if torch.is_grad_enabled():
                raise RuntimeError(f"roofkit ({op_name}): double backward is not supported (the op is first "
                                   "order); compute this gradient without create_graph=True")
            ctx.needs_input_grad = ctx.needs_input_grad[1:]  # as if ``plan`` were not an input
            grads = backward(ctx, *grads)
            return (None, *grads) if isinstance(grads, tuple) else (None, grads)

        # Named after the op, so autograd graphs and profiles show e.g. "rms_norm_fwd_functionBackward".
        name = self.name.split("::")[-1] + "_function"
        self._function = type(name, (torch.autograd.Function,),
                              {"forward": staticmethod(forward), "backward": staticmethod(backward_)})
        return self

    def apply(self, *args):
        """Differentiable call: the autograd Function when a gradient can flow, else ``op(*args)``."""
        if _forward_ad._current_level >= 0:  # dual tensors are plain: the direct path would drop them
            _refuse_forward_ad(self.name, args)
        if not _direct(args):
            if _functorch_active():  # torch.func.jvp reaches the custom op, which has no forward rule
                _refuse_forward_ad(self.name, args)
            return self.custom(*args)
        if _REC[0] and _recording_frame() is not None:
            return _record_op(self, args, True)
        if needs_grad(*args):
            return self._function.apply(None, *args)
        return self._run(args)

    def _replay(self, args, plan, differentiable: bool):
        """A public plan's call of this op: ``apply`` (``differentiable``) or ``op(*args)``,
        with the forward's plan known."""
        if differentiable and needs_grad(*args):
            return self._function.apply(plan, *args)
        out = self._run(args, plan)
        for i in self._mutated:
            if isinstance(args[i], torch.Tensor):
                torch.autograd.graph.increment_version(args[i])
        return out


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


# torch.autograd.forward_ad: its module-level _current_level is -1 while no dual level is open.
_forward_ad = torch.autograd.forward_ad


def _refuse_forward_ad(name: str, args) -> None:
    """Forward-mode AD (dual tensors, torch.func.jvp) has no rule in roofkit's ops: without this
    check the tangent would silently vanish (a dual tensor does not require grad)."""
    op = name.split("::")[-1]
    message = (f"roofkit ({op}): forward-mode AD (dual tensors, torch.func.jvp) is not supported; "
               "use reverse mode (backward / torch.autograd.grad)")
    if _forward_ad._current_level >= 0:
        for a in args:
            if isinstance(a, torch.Tensor) and _forward_ad.unpack_dual(a).tangent is not None:
                raise NotImplementedError(message)
    if _functorch_active():
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        jvp = torch._C._functorch.TransformType.Jvp
        if any(i.key() == jvp for i in retrieve_all_functorch_interpreters()):
            raise NotImplementedError(message)
_tracing = getattr(torch._C, "_get_tracing_state", lambda: None)


def _transforms_active() -> bool:
    """torch.compile tracing, a dispatch mode (FakeTensorMode, torch.export, ...), a functorch
    transform (vmap, grad, jvp: their wrapped tensors report type torch.Tensor) or torch.jit's
    tracer: each must see the custom op (and its fake) through the dispatcher."""
    if torch.compiler.is_compiling():  # first: Dynamo must not trace the queries below
        return True
    modes = _dispatch_modes()
    if modes and _REC[0]:  # the plan recorder's own mode (one per recording thread) is no transform
        modes -= bool(_recording_frames())
    return bool(modes or _functorch_active() or _tracing())


def _plain(a: torch.Tensor) -> bool:
    """A tensor whose memory is what a kernel reads: not a subclass (FakeTensor, DTensor, ...), not
    a lazily negated or conjugated view (the dispatcher materializes those)."""
    return type(a) in _PLAIN_TENSORS and not a.is_neg() and not a.is_conj()


def _direct(args) -> bool:
    """Whether a call may run the host launcher itself: no transform active (``_transforms_active``)
    and every tensor argument plain (``_plain``); anything else goes through the dispatcher, which
    knows what to do with it."""
    if _transforms_active():
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and not _plain(a):
            return False
    return True


def _call_on_device(impl, args):
    """``impl(*args)`` with the current CUDA device set to the first CUDA tensor's (Triton launches
    on the current device); nothing to do on CPU or when it already is."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.is_cuda and a.get_device() != _current_device():
                with torch.cuda.device(a.device):
                    return impl(*args)
            break
    return impl(*args)


def _on_device(impl, signature):
    """``impl`` as a custom op body: the same device handling, ``signature`` with evaluated
    annotations (custom_op reads them from the function it is given)."""

    @functools.wraps(impl)
    def body(*args, **kwargs):
        device = _cuda_device_of((*args, *kwargs.values()))
        if device is not None and torch.cuda.is_initialized() and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                return impl(*args, **kwargs)
        return impl(*args, **kwargs)

    body.__signature__ = signature
    return body


# ----------------------------------------------------------------------------- plans
#
# A plan is one call recorded and kept for replay. The second eager call with a new ``plan_key``
# (every tensor's shape, strides, dtype, device, 16-byte alignment, storage offset and
# requires_grad; every
# other argument's type and value; grad mode, deterministic mode, autocast, the current device
# and ``EPOCH``) runs normally while a recorder notes what it does (the first runs as written:
# shapes that never repeat, as a growing KV cache's, cost no recording): each tensor operation torch
# dispatches (allocations, views, copies), each kernel launched through ``Launch`` (kept as its
# compiled kernel, grid and constants), each ``Op`` called (kept as that op's own plan). Later
# calls with the same key replay those steps on the new arguments: no checks, no configuration
# heuristics, no grid arithmetic, no Triton binding. The arguments only decide what a call does
# through what the key holds, so a replay does what the call would have done; a call that looks
# at more than that is not planned: one that reads a tensor's values on the host (``.item()``,
# ``.tolist()``, ``.cpu()``, ``nonzero``, ...), launches a kernel some other way, tunes
# configurations by timing them, or returns or launches on a tensor it did not get through the
# recorder. Its key is then marked unplanned and later calls run the op as written.
#
# Plans serve eager CUDA calls only: not while torch.compile, a dispatch mode, a functorch
# transform, torch.jit or a profiler's launch hooks are active, nor during CUDA-graph capture
# (a captured call allocates from the graph's pool through the op's own path). A call that fails
# leaves no plan: the next one fails the same way. The key also holds the current stream and
# the TF32 switch. What it does not hold, a plan freezes: the ops' module-level tunables and the
# ROOFKIT_* environment variables an op reads per call (ROOFKIT_AUTOTUNE among them) take effect
# for planned keys once ``clear_plans()`` drops the plans; ``ROOFKIT_PLANS=0`` turns them off.
# ``planned`` is for roofkit's public functions, which read only their arguments and roofkit's
# own state: a tensor the call neither gets nor makes is kept as a constant.

import os as _os
import threading as _threading
import weakref as _weakref

from torch.utils import _pytree as _pytree
from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode

PLANS = [_os.environ.get("ROOFKIT_PLANS", "1").strip().lower() not in ("0", "false", "off", "no")]
CPU_PLANS = [False]  # tests: plan CPU calls too (under the Triton interpreter)
EPOCH = [0]  # bumped by whatever changes a decision plans froze (configuration overrides, tuning)
_REC = [0]  # recordings in progress, any thread (a cheap test before the thread-local one)


class Unplanned:
    """What a key that cannot be planned keeps: why (for tests and for curious users)."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self):
        return f"Unplanned({self.why!r})"


_SEEN = Unplanned("seen once; recorded on its second call")  # never returned from a lookup as a plan


_all_plans: "list[Plans]" = []
_tls = _threading.local()
_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)
_autocast_enabled = torch.is_autocast_enabled
_det = torch.are_deterministic_algorithms_enabled


def bump_epoch() -> None:
    """Invalidate every plan (a configuration override opened or closed, a configuration tuned):
    the epoch is part of every key, and the plans made before are dropped."""
    EPOCH[0] += 1
    for p in _all_plans:
        p.clear()


def clear_plans() -> None:
    """Drop every kept plan. Call it after changing what plans froze: an op module's tunables
    (module globals), ROOFKIT_* environment variables read per call, a monkeypatched function."""
    bump_epoch()


def _recording_frames() -> list:
    frames = getattr(_tls, "frames", None)
    if frames is None:
        frames = _tls.frames = []
    return frames


def _recording_frame():
    frames = _recording_frames()
    return frames[-1] if frames else None


def _scalar_key(a):
    t = type(a)
    if t in _SCALARS:
        return (t, a)
    if t is tuple or t is list or t is torch.Size:
        return (t, tuple(_scalar_key(v) for v in a))
    raise TypeError


def plan_key(args) -> tuple | None:
    """The plan key of a call with ``args`` (see above), or None when the call cannot be planned
    (an argument that is not a plain strided tensor on the current device, a scalar or a tuple
    of scalars; a transform, capture or launch hooks active)."""
    if _transforms_active() or (_knobs is not None and _hooks_set()):
        return None
    device = None
    out = [EPOCH[0], _grad_enabled(), _det(), _autocast_enabled("cuda")]
    append = out.append
    try:
        for a in args:
            t = type(a)
            if t is _Tensor or t is _Parameter:
                d = a.get_device()
                if d != device:
                    if device is not None:
                        return None
                    device = d
                if a.layout is not _STRIDED or a.is_neg() or a.is_conj():
                    return None
                append((a.shape, a.stride(), a.dtype, d, a.data_ptr() & 15, a.storage_offset(), a.requires_grad))
            elif t in _SCALARS:
                append((t, a))
            else:
                append(_scalar_key(a))
        key = tuple(out)
        hash(key)
    except (TypeError, RuntimeError):  # an unhashable value; a layout without strides
        return None
    if device is None:
        return None
    if device < 0:
        if not CPU_PLANS[0] or not all(a.is_cpu for a in args if isinstance(a, torch.Tensor)):
            return None  # (meta tensors also report device -1)
    elif device != _current_device() or _capturing():
        return None
    else:
        # The current stream (an op may keep per-stream state, as split-K's tile locks) and the
        # TF32 switch (float32 GEMMs read it per call).
        key = (key, _raw_stream(device), _allow_tf32())
    return key


_Tensor, _Parameter, _STRIDED = torch.Tensor, torch.nn.Parameter, torch.strided
_grad_enabled = torch.is_grad_enabled
_allow_tf32 = getattr(torch._C, "_get_cublas_allow_tf32", lambda: False)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)


class Plan:
    """A recorded call: ``run(args)`` replays its steps on new arguments of the same key."""

    __slots__ = ("steps", "pad", "out", "described", "consts", "sched")

    def __init__(self, steps, pad, out, described, consts, frees=None):
        self.steps, self.pad, self.out, self.described, self.consts = steps, pad, out, described, consts
        # frees: per step, the environment entries no later step reads (dropped after it, so a
        # call's temporaries live no longer than as written); None when all live to the end
        self.sched = None if frees is None else tuple(zip(steps, frees))

    def run(self, args):
        env = [*args, *self.pad]
        if self.sched is None:
            for step in self.steps:
                step(env)
        else:
            for step, free in self.sched:
                step(env)
                for i in free:
                    env[i] = None
        return self.out(env)

    def describe(self, indent: str = "") -> str:
        """The steps a replay runs, one a line (an op's own plan indented below it)."""
        lines = []
        for what, inner in self.described:
            lines.append(indent + what)
            if isinstance(inner, Plan):
                lines.append(inner.describe(indent + "    "))
        return "\n".join(lines)


class _Refused(Exception):
    pass


class _Step:
    """One recorded step: ``make()`` builds what the replay calls; ``uses``: the environment
    indices it reads as tensors; ``outs``: those it writes; ``lazy``: a view, dropped when
    nothing materialized needs it (kernels take a view as its root's address plus an offset)."""

    __slots__ = ("what", "make", "uses", "outs", "lazy", "plan")

    def __init__(self, what, make, uses=(), outs=(), lazy=False, plan=None):
        self.what, self.make, self.uses, self.outs, self.lazy, self.plan = what, make, uses, outs, lazy, plan


class _Frame:
    """One call being recorded: its tensors by identity (``id``, forgotten when the tensor dies,
    so a reused id is never mistaken for it: the recording keeps no temporary alive longer than
    the call as written does), the steps so far, and why it cannot be planned, if it cannot."""

    def __init__(self, args):
        self.n_args = len(args)
        self.ids: dict[int, int] = {}
        self.size = len(args)  # environment entries so far
        self.addr: dict[int, int] = {}  # environment index -> its tensor's address when made
        self.finalizers: list = []
        self.root: dict[int, tuple[int, int]] = {}  # a view's index -> (its root's index, byte offset)
        self.fresh: set[int] = set()  # indices of tensors a step allocated
        self.consts: list = []
        self.steps: list[_Step] = []
        self.refused: str | None = None
        self.depth = 0  # inside an opaque step (an op, a launch): its own operations are not steps
        self.arg_storages = set()
        self.device = None
        self.grad = torch.is_grad_enabled()  # the plan's (the key holds it)
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                self.ids.setdefault(id(a), i)
                self.addr[i] = a.data_ptr()
                self.arg_storages.add(a.untyped_storage().data_ptr())
                if self.device is None:
                    self.device = a.device

    def refuse(self, why: str):
        if self.refused is None:
            self.refused = why

    def slot(self, t: torch.Tensor) -> int | None:
        """``t``'s index in the replay's environment (an argument or an earlier step's output), or
        None for a constant the replay passes as it is: a tensor the op keeps (a workspace),
        never one sharing an argument's memory."""
        i = self.ids.get(id(t))
        if i is not None:
            return i
        if type(t) not in _PLAIN_TENSORS or (t.numel() and t.untyped_storage().data_ptr() in self.arg_storages):
            raise _Refused("a tensor derived from an argument outside the recorder")
        self.consts.append(t)
        return None

    def pointer(self, i: int) -> tuple[int, int]:
        """(root index, byte offset) of environment entry ``i``: what a kernel's address is."""
        return self.root.get(i, (i, 0))

    def add(self, t) -> int:
        i = self.size
        self.size += 1
        self.addr[i] = t.data_ptr()
        self.alias(t, i)
        return i

    def alias(self, t, i: int) -> None:
        """Know tensor ``t`` as environment entry ``i`` while it lives."""
        self.ids[id(t)] = i
        self.finalizers.append(_weakref.finalize(t, self._forget, id(t), i))

    def _forget(self, key: int, i: int) -> None:
        if self.ids.get(key) == i:
            del self.ids[key]

    def close(self) -> None:
        """Recording over: no callback outlives it."""
        for f in self.finalizers:
            f.detach()
        self.finalizers.clear()

    def outputs(self, out, fresh: bool = False) -> tuple:
        """Register the tensors a step returned; their indices (None: one already known)."""
        leaves = [out] if isinstance(out, torch.Tensor) else _pytree.tree_leaves(out)
        new = []
        for t in leaves:
            if isinstance(t, torch.Tensor):
                if id(t) in self.ids:
                    new.append(None)
                else:
                    new.append(self.add(t))
                    if fresh:
                        self.fresh.add(new[-1])
            elif isinstance(t, (bool, int, float)):
                raise _Refused("a value read back from a tensor")
        return tuple(new)


def _template(frame: _Frame, args, launch: bool | None = True) -> tuple[list, tuple]:
    """``args`` (a flat sequence) as a list to copy per replay, and the (position, environment
    index) pairs to fill in. The other values must be a launch's scalars (``launch``), or an op's
    scalars and tuples of them (``launch=False``); None: anything (a dispatched operation's)."""
    tmpl = list(args)
    slots = []
    for p, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            j = frame.slot(a)
            if j is not None:
                slots.append((p, j))
                tmpl[p] = None
        elif launch is None:
            continue
        elif launch and not isinstance(a, _LAUNCH_SCALARS):
            raise _Refused(f"a launch argument of type {type(a).__name__}")
        elif not launch:
            try:
                _scalar_key(a)  # scalars, and tuples and lists of them, only (no nested tensor)
            except TypeError:
                raise _Refused(f"an op argument of type {type(a).__name__}") from None
    return tmpl, tuple(slots)


_LAUNCH_SCALARS = (int, float, bool, type(None))


def _setter(new: tuple, out=None):
    """How a replayed step's output enters the environment (at the indices recorded; ``out``:
    the recorded output, whose structure a replay's has)."""
    if len(new) == 1 and new[0] is not None:
        i = new[0]

        def put(env, out):
            env[i] = out
    elif all(i is None for i in new):
        def put(env, out):
            pass
    else:
        pairs = tuple((k, i) for k, i in enumerate(new) if i is not None)
        flat = type(out) is tuple and all(isinstance(t, torch.Tensor) for t in out)

        def put(env, out):
            if flat:  # the common case: a tuple of tensors
                for k, i in pairs:
                    env[i] = out[k]
                return
            leaves = [out] if isinstance(out, torch.Tensor) else [
                t for t in _pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
            for t, i in zip(leaves, new):
                if i is not None:
                    env[i] = t
    return put


def _record_launch(launch: "Launch", args) -> None:
    frame = _recording_frame()
    if frame.depth or frame.refused:
        frame.depth += 1
        try:
            launch._slow(args)
        finally:
            frame.depth -= 1
        return
    frame.depth += 1
    try:
        kernel = launch._slow(args)
    finally:
        frame.depth -= 1
    descs = []  # (position, environment index of its base, the descriptor as recorded)
    plain = list(args)
    for p, a in enumerate(args):
        base = getattr(a, "base", None) if not isinstance(a, (torch.Tensor, *_LAUNCH_SCALARS)) else None
        if isinstance(base, torch.Tensor):  # a host tensor descriptor (TMA): rebuilt on its new base
            descs.append((p, a))
            plain[p] = None
    try:
        tmpl, slots = _template(frame, plain)
        descs = tuple((p, frame.slot(d.base), _rebased(d, None)) for p, d in descs)  # (no base kept)
        if any(j is None for _, j, _ in descs):
            raise _Refused("a descriptor over a tensor the recorder did not see")
    except _Refused as e:
        frame.refuse(str(e))
        return
    name = f"launch {getattr(launch.fn, '__name__', 'kernel')} grid {launch.g}"
    tail = launch._tail(len(args)) if _JITFunction is not None and isinstance(launch.fn, _JITFunction) else None
    if kernel is not None and hasattr(kernel, "packed_metadata") and tail is not None:
        # The compiled kernel on the current stream (what ``Bound`` does, one call less), every
        # tensor passed as its address: a view's is its root's plus a fixed offset, so views
        # need not be rebuilt, and the launcher skips its pointer query.
        krun, function, packed = kernel.run, kernel.function, kernel.packed_metadata
        g0, g1, g2 = launch.g
        device = _current_device()
        for p, a in enumerate(args):
            if isinstance(a, torch.Tensor) and tmpl[p] is not None:  # a constant: its address
                tmpl[p] = a.data_ptr()
        pointers = tuple((p, *frame.pointer(j)) for p, j in slots)
        dpointers = tuple((p, *frame.pointer(j), d) for p, j, d in descs)
        full = tmpl + list(tail)

        def make():
            if not dpointers:
                def step(env):
                    a = full.copy()
                    for p, j, off in pointers:
                        a[p] = env[j].data_ptr() + off
                    krun(g0, g1, g2, _raw_stream(device), function, packed, None, None, None, *a)
            else:
                def step(env):
                    a = full.copy()
                    for p, j, off in pointers:
                        a[p] = env[j].data_ptr() + off
                    for p, j, off, d in dpointers:
                        a[p] = _rebased(d, _Address(env[j].data_ptr() + off))
                    krun(g0, g1, g2, _raw_stream(device), function, packed, None, None, None, *a)
            return step

        uses = tuple(j for _, j, _ in pointers) + tuple(j for _, j, _, _ in dpointers)
        frame.steps.append(_Step(name, make, uses=uses))
        return

    def make_slow():  # the interpreter (or an unknown Triton): the Launch, through Triton's path
        def step(env):
            a = tmpl.copy()
            for p, j in slots:
                a[p] = env[j]
            for p, j, d in descs:
                a[p] = _rebased(d, env[j])
            launch(*a)
        return step

    frame.steps.append(_Step(name, make_slow, uses=tuple(j for _, j in slots) + tuple(j for _, j, _ in descs)))


class _Address:
    """What a rebuilt tensor descriptor's base needs to be for Triton's launcher: an address."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


def _rebased(desc, base):
    """A copy of tensor descriptor ``desc`` over ``base`` (shape, strides, block and layout kept:
    the key fixes them), without its constructor's checks (they passed when it was recorded)."""
    d = object.__new__(type(desc))
    d.__dict__.update(desc.__dict__)
    d.base = base
    return d


def _record_op(op: "Op", args, differentiable: bool):
    """An op called while a public call is recorded: one opaque step (the op's own plan)."""
    frame = _recording_frame()
    if frame.depth or frame.refused:
        frame.depth += 1
        try:
            if differentiable and needs_grad(*args):
                return op._function.apply(None, *args)
            return op._run(args)
        finally:
            frame.depth -= 1
    grad = differentiable and needs_grad(*args)
    frame.depth += 1
    try:
        out = op._replay(args, None, differentiable)
    finally:
        frame.depth -= 1
    plan = None
    if op.plans is not None:
        key = plan_key(args)
        plan = op.plans.get(key) if key is not None else None
        if type(plan) is Unplanned:  # unplanned, or _SEEN: the replay looks it up again
            plan = None
    try:
        tmpl, slots = _template(frame, args, launch=False)
        new = frame.outputs(out, fresh=not grad)
    except _Refused as e:
        frame.refuse(str(e))
        return out
    put = _setter(new, out)
    # The key fixes the branch (autograd or not) only through the call's own arguments' flags.
    direct = plan is not None and not op._mutated and not grad and all(j < frame.n_args for _, j in slots)

    def make():
        if direct:  # the key fixes the branch (grad mode, requires_grad): the op's plan itself
            run = plan.run

            def step(env):
                a = tmpl.copy()
                for p, j in slots:
                    a[p] = env[j]
                put(env, run(a))
        else:
            def step(env):
                a = tmpl.copy()
                for p, j in slots:
                    a[p] = env[j]
                put(env, op._replay(a, plan, differentiable))
        return step

    what = f"op {op.name}" + (" (autograd)" if grad else "") + ("" if plan is not None else " (unplanned)")
    frame.steps.append(_Step(what, make, uses=tuple(j for _, j in slots), outs=new, plan=plan))
    return out


_aten = torch.ops.aten
# torch.tensor(data) reaches the dispatcher as lift_fresh of a tensor made outside it: a replay
# would hand every call that one tensor.
_REFUSED_ATEN = {_aten.lift_fresh.default, getattr(_aten, "lift_fresh_copy", _aten.lift_fresh).default}


def _has_tensor(flat) -> bool:
    return any(isinstance(a, torch.Tensor) for a in flat)


class _Recorder(_TorchDispatchMode):
    """Notes every tensor operation of the innermost frame being recorded on this thread."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        frame = _recording_frame()
        if frame is None or frame.depth or frame.refused:
            return out
        try:
            _record_aten(frame, func, args, kwargs, out)
        except _Refused as e:
            frame.refuse(str(e))
        return out


# Operations on metadata the plan key fixes (dtypes), never on values: no step (the Python that
# uses their result decided the same for every call of the key). torch.promote_types reaches the
# dispatcher (an op asking for its output dtype would otherwise never be planned).
_KEY_FIXED = {_aten.promote_types.default, _aten.result_type.Tensor, _aten.result_type.Scalar,
              _aten.result_type.Scalar_Tensor, _aten.result_type.Scalar_Scalar}


def _record_aten(frame: _Frame, func, args, kwargs, out):
    if func in _KEY_FIXED:
        return
    tags = func.tags
    if torch.Tag.data_dependent_output in tags or torch.Tag.dynamic_output_shape in tags:
        raise _Refused(f"{func} reads tensor values on the host")
    for t in ([out] if isinstance(out, torch.Tensor) else _pytree.tree_leaves(out)):
        if isinstance(t, torch.Tensor) and t.device != frame.device:
            raise _Refused(f"{func} moves a tensor to {t.device}")
    flat, spec = _pytree.tree_flatten((args, kwargs))
    tmpl, slots = _template(frame, flat, launch=None)
    uses = tuple(j for _, j in slots)
    if (func is _aten.detach.default and len(slots) == 1 and slots[0][1] in frame.fresh
            and isinstance(out, torch.Tensor) and not out.requires_grad):
        # Recording artefact: the recorder holds a new tensor, so autograd's wrapper detaches
        # a shallow copy of it; the call as written returns the tensor itself.
        frame.alias(out, slots[0][1])
        return
    view = getattr(func, "is_view", False) and isinstance(out, torch.Tensor) and len(slots) >= 1
    if func in _REFUSED_ATEN:
        raise _Refused(f"{func} makes a tensor from Python data")
    if any(isinstance(a, torch.Generator) for a in flat):
        raise _Refused(f"{func} draws from a generator the call holds")
    # fresh: a factory's output (no tensor input), whose recording artefact detach is elided
    new = frame.outputs(out, fresh=not _has_tensor(flat))
    put = _setter(new, out)
    if view and new[0] is not None:
        base, off = frame.pointer(slots[0][1])
        frame.root[new[0]] = (base, off + out.data_ptr() - frame.addr[slots[0][1]])
    size = None
    if func is _aten.empty.memory_format and not slots:
        size, kw = tuple(args[0]), dict(kwargs)
        if not (kw.pop("layout", None) in (None, torch.strided) and not kw.pop("pin_memory", False)
                and kw.pop("memory_format", None) in (None, torch.contiguous_format) and set(kw) <= {"dtype", "device"}):
            size = None
    if size is not None:
        dtype, device = kw.get("dtype"), kw.get("device")
        stride, acc = [], 1
        for d in reversed(size):
            stride.append(acc)
            acc *= max(d, 1)
        stride = tuple(reversed(stride))
        i = new[0]

        def make():
            def step(env):  # empty_strided: torch.empty's device parsing costs ~1 us more
                env[i] = torch.empty_strided(size, stride, dtype=dtype, device=device)
            return step

        frame.steps.append(_Step(f"empty {size} {dtype}", make, outs=new))
        return
    if func is _aten.empty_like.default and len(slots) == 1 and slots[0][0] == 0:
        j, i = slots[0][1], new[0]
        kw = {k: v for k, v in kwargs.items() if not (k == "pin_memory" and v is False)}

        def make():
            def step(env):
                env[i] = torch.empty_like(env[j], **kw)
            return step

        frame.steps.append(_Step("empty_like", make, uses, new))
        return
    if func is _aten.view.default and len(slots) == 1 and slots[0][0] == 0 and not kwargs \
            and torch.is_grad_enabled() == frame.grad:
        j, i, shape = slots[0][1], new[0], args[1]

        def make():
            def step(env):
                env[i] = env[j].view(shape)
            return step

        frame.steps.append(_Step(f"view {tuple(shape)}", make, uses, new, lazy=True))
        return

    grad = torch.is_grad_enabled()
    if (frame.grad and not grad and getattr(func, "namespace", "aten") not in ("aten", "prim")
            and any(isinstance(a, torch.Tensor) and a.requires_grad for a in flat)):
        # A custom op with an autograd formula of its own is seen here from inside that formula's
        # forward (grad mode off): replayed as seen, it would lose its backward.
        raise _Refused(f"{func} differentiates itself (its autograd runs above the recorder)")

    def make_generic():
        def step(env):
            flat = tmpl.copy()
            for p, j in slots:
                flat[p] = env[j]
            a, kw = _pytree.tree_unflatten(flat, spec)
            put(env, func(*a, **kw))

        if grad == frame.grad:
            return step

        def in_mode(env):  # recorded inside a no_grad / enable_grad block of the call
            with torch.set_grad_enabled(grad):
                step(env)
        return in_mode

    frame.steps.append(_Step(str(func), make_generic, uses, new, lazy=view))


def _raw_launch_hook(*_):
    """Triton's launch-enter hook while recording: a kernel launched other than through
    ``Launch`` (whose own launches happen inside an opaque step) cannot be replayed."""
    frame = _recording_frame() if _REC[0] else None
    if frame is not None and not frame.depth:
        frame.refuse("a kernel launched outside the runtime")


def refuse_plan(why: str) -> None:
    """Called by code whose effect a replay would not reproduce (tuning by timing candidates):
    the calls being recorded on this thread are not planned."""
    if _REC[0]:
        for frame in _recording_frames():
            frame.refuse(why)


def _host_reader(name: str, original):
    """``torch.Tensor.<name>`` while recording: reading values on the host outside the dispatcher
    (``tolist``, ``numpy``) makes the call unplannable, as ``.item()`` does."""

    @functools.wraps(original)
    def read(self, *args, **kwargs):
        refuse_plan(f"Tensor.{name} reads tensor values on the host")
        return original(self, *args, **kwargs)

    return read


_HOST_READERS = ("tolist", "numpy", "__array__")
_patched = [0]  # recordings that hold the Tensor methods patched (any thread)
_patch_lock = _threading.Lock()


def _patch_readers(on: bool) -> None:
    with _patch_lock:
        if on:
            _patched[0] += 1
            if _patched[0] == 1:
                _patched.append({n: getattr(torch.Tensor, n) for n in _HOST_READERS})
                for n, f in _patched[1].items():
                    setattr(torch.Tensor, n, _host_reader(n, f))
        else:
            _patched[0] -= 1
            if _patched[0] == 0:
                for n, f in _patched.pop().items():
                    setattr(torch.Tensor, n, f)


def _args_share_memory(args) -> bool:
    """Whether two tensor arguments share memory (the same tensor twice, or views of one
    storage). Such a call is not recorded: the recorder knows a tensor by its identity and its
    memory, so it could not tell which argument a kernel was given, and the key (which holds no
    aliasing) is shared with calls whose arguments are distinct. Left seen, the key is recorded
    by its next call with distinct arguments; a plan replayed on aliased arguments is right, since
    every position keeps its own slot."""
    seen, objects = set(), set()
    for a in args:
        if isinstance(a, torch.Tensor):
            if id(a) in objects:  # the same tensor twice (empty ones have no memory to compare)
                return True
            objects.add(id(a))
            if a.numel():
                p = a.untyped_storage().data_ptr()
                if p in seen:
                    return True
                seen.add(p)
    return False


def _record(call: Callable, args):
    """Run ``call()`` recording it; returns its output and its ``Plan`` (or, if the
    call cannot be replayed: an ``Unplanned``)."""
    frames = _recording_frames()
    frame = _Frame(args)
    outermost = not frames
    frames.append(frame)
    _REC[0] += 1
    mode = None
    try:
        if outermost:
            _patch_readers(True)
            if _knobs is not None:
                _knobs.runtime.launch_enter_hook.add(_raw_launch_hook)
            mode = _Recorder()
            mode.__enter__()
        out = call()
    finally:
        try:
            if mode is not None:
                mode.__exit__(None, None, None)
        finally:
            if outermost:
                _patch_readers(False)
                if _knobs is not None:
                    _knobs.runtime.launch_enter_hook.remove(_raw_launch_hook)
            frames.pop()
            _REC[0] -= 1
    try:
        return out, _finish(frame, out)
    finally:
        frame.close()


def _finish(frame: _Frame, out):
    """The plan of a recorded call (or why there is none)."""
    if frame.refused is not None:
        return Unplanned(frame.refused)
    try:
        flat, spec = _pytree.tree_flatten(out)
        tmpl = list(flat)
        slots = []
        for p, t in enumerate(flat):
            if isinstance(t, torch.Tensor):
                i = frame.ids.get(id(t))
                if i is None:
                    raise _Refused("an output the recorder did not see made")
                slots.append((p, i))
                tmpl[p] = None
    except _Refused as e:
        return Unplanned(str(e))
    if isinstance(out, torch.Tensor):
        i = slots[0][1]
        result = lambda env: env[i]  # noqa: E731
    elif type(out) is tuple and len(tmpl) == len(out) and all(isinstance(t, torch.Tensor) for t in out):
        idx = tuple(j for _, j in slots)
        result = lambda env: tuple([env[j] for j in idx])  # noqa: E731
    else:
        def result(env, tmpl=tmpl, slots=tuple(slots), spec=spec):
            flat = tmpl.copy()
            for p, j in slots:
                flat[p] = env[j]
            return _pytree.tree_unflatten(flat, spec)
    # Views nothing materialized reads are dropped (kernels take their root's address).
    needed = {j for _, j in slots}
    kept = []
    for st in reversed(frame.steps):
        if st.lazy and not needed.intersection(i for i in st.outs if i is not None):
            continue
        needed.update(st.uses)
        kept.append(st)
    kept.reverse()
    steps = tuple(st.make() for st in kept)
    described = tuple((st.what, st.plan) for st in kept)
    return Plan(steps, (None,) * (frame.size - frame.n_args), result, described, tuple(frame.consts),
                _frees(kept, frame.n_args, {j for _, j in slots}))


def _frees(steps, n_args: int, results: set) -> list | None:
    """Per step, the temporaries (not arguments, not results) no later step reads; None when
    dropping them early would free nothing before the call's end."""
    last = {}
    for k, st in enumerate(steps):
        for j in st.outs:
            if j is not None:
                last.setdefault(j, k)
        for j in st.uses:
            last[j] = k
    frees = [[] for _ in steps]
    for j, k in last.items():
        if j >= n_args and j not in results:
            frees[k].append(j)
    if not any(frees[:-1]):
        return None
    return [tuple(f) for f in frees]


def planned(fn: Callable) -> Callable:
    """A public function whose eager calls are planned (see above): a repeated call with the same
    key skips the function's checks and replays what it did, down to the kernels. Positional and
    keyword arguments are both part of the key."""
    plans = Plans()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling() or not PLANS[0]:
            return fn(*args, **kwargs)
        if _REC[0] and _recording_frame() is not None:
            # Inside another call's recording: run as written, so that the recorder sees every
            # operation and launch (a replay's compiled launches would be invisible to it).
            return fn(*args, **kwargs)
        if kwargs:
            values = (*args, *kwargs.values())
            key = plan_key(values)
            if key is not None:
                key = (tuple(kwargs), key)
        else:
            values = args
            key = plan_key(args)
        if key is None:
            return fn(*args, **kwargs)
        plan = plans.get(key)
        if plan is None:  # seen once: runs as written (shapes that never repeat cost no recording)
            plans.add(key, _SEEN)
            return fn(*args, **kwargs)
        if plan is _SEEN:
            if _args_share_memory(values):
                return fn(*args, **kwargs)
            out, plan = _record(lambda: fn(*args, **kwargs), values)
            plans[key] = plan
            return out
        if type(plan) is Unplanned:
            return fn(*args, **kwargs)
        return plan.run(values)

    wrapper.plans = plans
    return wrapper


def op(name: str, fake: Callable, mutates_args=()) -> Callable[[Callable], Op]:
    """Decorator form of ``Op``: ``@op("roofkit::x_fwd", fake=...)`` over the host launcher."""

    def wrap(impl):
        return Op(name, impl, fake, mutates_args)

    return wrap


__all__ = ["Bound", "Launch", "Op", "Plan", "Plans", "bump_epoch", "cached_launch", "clear_plans", "fast_path_ok",
           "launch", "needs_grad", "op", "plan_key", "planned", "refuse_plan"]
