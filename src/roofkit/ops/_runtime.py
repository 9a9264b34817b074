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
    return bool(getattr(hook, "calls", hook))


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
            and not _hooks_set() and not torch.cuda.is_current_stream_capturing())


def needs_grad(*tensors) -> bool:
    """Whether autograd must record a call on these tensors (any may be None)."""
    if not torch.is_grad_enabled():
        return False
    return any(t is not None and t.requires_grad for t in tensors)


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
        self.custom = torch.library.custom_op(name, mutates_args=mutates_args)(body)
        self.custom.register_fake(fake)
        self._function = None
        # The arguments a call writes, by position: the dispatcher bumps their autograd version
        # counters, so an eager call must too (a later backward through a graph that saved one
        # of them then fails loudly instead of reading overwritten values).
        names = list(signature.parameters)
        self._mutated = tuple(names.index(a) for a in mutates_args) if mutates_args not in ((), "unknown") else ()
        functools.update_wrapper(self, impl)

    def __call__(self, *args):
        if not _direct(args):
            return self.custom(*args)
        out = _call_on_device(self.impl, args)
        for i in self._mutated:
            if isinstance(args[i], torch.Tensor):
                torch.autograd.graph.increment_version(args[i])
        return out

    def autograd(self, setup_context: Callable, backward: Callable) -> "Op":
        """Register ``backward(ctx, *grads)`` with ``setup_context(ctx, inputs, output)`` (the
        ``torch.library.register_autograd`` contract) for the custom op and for eager calls."""
        self.custom.register_autograd(backward, setup_context=setup_context)
        impl = self.impl

        # The forward takes ctx itself (the older Function form): with a separate setup_context,
        # Function.apply binds default arguments through inspect.signature on every call.
        def forward(ctx, *args):
            output = _call_on_device(impl, args)
            setup_context(ctx, args, output)
            return output

        op_name = self.name.split("::")[-1]

        # First order only: a backward that would itself be differentiated (create_graph=True)
        # raises at once instead of returning gradients without their second-order terms.
        def backward_(ctx, *grads):
            if torch.is_grad_enabled():
                raise RuntimeError(f"roofkit ({op_name}): double backward is not supported (the op is first "
                                   "order); compute this gradient without create_graph=True")
            return backward(ctx, *grads)

        # Named after the op, so autograd graphs and profiles show e.g. "rms_norm_fwd_functionBackward".
        name = self.name.split("::")[-1] + "_function"
        self._function = type(name, (torch.autograd.Function,),
                              {"forward": staticmethod(forward), "backward": staticmethod(backward_)})
        return self

    def apply(self, *args):
        """Differentiable call: the autograd Function when a gradient can flow, else ``op(*args)``."""
        if not _direct(args):
            return self.custom(*args)
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return self._function.apply(*args)
        return _call_on_device(self.impl, args)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_tracing = getattr(torch._C, "_get_tracing_state", lambda: None)


def _transforms_active() -> bool:
    """torch.compile tracing, a dispatch mode (FakeTensorMode, torch.export, ...), a functorch
    transform (vmap, grad, jvp: their wrapped tensors report type torch.Tensor) or torch.jit's
    tracer: each must see the custom op (and its fake) through the dispatcher."""
    return bool(torch.compiler.is_compiling() or _dispatch_modes() or _functorch_active() or _tracing())


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


def op(name: str, fake: Callable, mutates_args=()) -> Callable[[Callable], Op]:
    """Decorator form of ``Op``: ``@op("roofkit::x_fwd", fake=...)`` over the host launcher."""

    def wrap(impl):
        return Op(name, impl, fake, mutates_args)

    return wrap


__all__ = ["Bound", "Launch", "Op", "Plans", "cached_launch", "fast_path_ok", "launch", "needs_grad", "op"]
