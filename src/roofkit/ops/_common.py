"""Host-side helpers shared by the op modules: argument checks, row views, device facts."""

from __future__ import annotations

import functools
import inspect
import operator
import os

import torch
import triton

from .._env import interpreter_active  # noqa: F401 (re-exported: the op modules import it from here)

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def on_input_device(fn):
    """Decorator for the public ops and the bodies of their custom ops: run ``fn`` with the
    current CUDA device set to the device of its first CUDA tensor argument. Triton launches on
    the current device, so without this an input on another GPU than the current one would be
    read by a kernel on the wrong GPU. The custom-op bodies carry it too, so every
    torch.compile backend and direct ``torch.ops.roofkit`` calls get it. Nothing is done on
    CPU, while torch.compile traces (the custom ops' bodies run later), for tensors that claim
    CUDA before CUDA is initialized (fake tensors on a CPU-only build), or when the device is
    already current."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not torch.compiler.is_compiling():
            for a in (*args, *kwargs.values()):
                if isinstance(a, torch.Tensor) and a.is_cuda and torch.cuda.is_initialized():
                    if a.device.index != torch.cuda.current_device():
                        with torch.cuda.device(a.device):
                            return fn(*args, **kwargs)
                    break
        return fn(*args, **kwargs)

    # The signature with its annotations evaluated in fn's module: torch.library.custom_op
    # evaluates string annotations (`from __future__ import annotations`) in the globals of the
    # function it is given, which are this module's for the wrapper.
    try:
        wrapper.__signature__ = inspect.signature(fn, eval_str=True)
    except Exception:
        pass
    return wrapper


def copy_to_host_async(t: torch.Tensor):
    """(a pinned host copy of small device tensor ``t``, an event recorded after the copy on the
    current stream), without waiting: the host reads the copy after ``event.synchronize()``,
    once the kernels that follow are queued, so the device does not idle for the round trip.
    On CPU: (``t``, None)."""
    if t.device.type != "cuda":
        return t, None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    ready = torch.cuda.Event()
    ready.record(torch.cuda.current_stream(t.device))
    return host, ready


# Whether the kernels defined by this import run through Triton's interpreter: Triton decides it
# when a kernel is defined, so it is read once here, not per call (an environment read per launch
# costs microseconds on the host path).
INTERPRETED = interpreter_active()


def bf16_rne(dtype: torch.dtype) -> bool:
    """Whether kernels must round bfloat16 stores by hand (see ``_jit._round_for_store``)."""
    return dtype == torch.bfloat16 and INTERPRETED


def check_tensor(op: str, name: str, t, dtypes=FLOAT_DTYPES) -> None:
    """Raise TypeError / ValueError naming ``op`` and ``name`` unless ``t`` is a usable tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"roofkit.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter and type(t).__name__ == "DTensor":
        raise TypeError(f"roofkit.{op}: {name} is a DTensor (a distributed tensor, e.g. an FSDP2 parameter outside "
                        f"the module's forward); roofkit's kernels take local tensors: call the op where the "
                        f"parameters are unsharded (inside the FSDP2 module's forward), or pass {name}.full_tensor() "
                        f"(the whole tensor) or {name}.to_local() (this rank's shard)")
    if t.layout != torch.strided:
        raise TypeError(f"roofkit.{op}: {name} must be a dense (strided) tensor, got layout {t.layout}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"roofkit.{op}: {name} must have dtype {allowed}; got {str(t.dtype).removeprefix('torch.')}")
    if t.device.type == "cuda":
        return
    if t.device.type == "cpu" and interpreter_active():
        return
    raise ValueError(
        f"roofkit.{op}: {name} is on {t.device}; roofkit's kernels need a CUDA tensor "
        "(or TRITON_INTERPRET=1 to run them on CPU tensors through the Triton interpreter)"
    )


def check_same_dtype(op: str, name: str, t: torch.Tensor, ref: torch.Tensor, ref_name: str = "input") -> None:
    """TypeError naming ``op`` unless ``t`` (argument ``name``) has ``ref``'s dtype."""
    if t.dtype != ref.dtype:
        raise TypeError(f"roofkit.{op}: {name} dtype {t.dtype} differs from {ref_name} dtype {ref.dtype}")


def check_same_device(op: str, name: str, t: torch.Tensor, ref: torch.Tensor) -> None:
    if t.device != ref.device:
        raise ValueError(f"roofkit.{op}: {name} is on {t.device} but input is on {ref.device}")


def as_int(op: str, name: str, value, expected: str = "an int") -> int:
    """``value`` as an int, taking what torch takes for an int argument (any integer-like but
    bool), or a TypeError naming ``op`` and ``name``: "<name> must be <expected>, got <type>"."""
    if isinstance(value, bool):
        raise TypeError(f"roofkit.{op}: {name} must be {expected}, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"roofkit.{op}: {name} must be {expected}, got {type(value).__name__}") from None


def normalize_dim(op: str, dim, ndim: int) -> int:
    """``dim`` as a non-negative int for a ``ndim``-d tensor (a 0-d tensor takes -1 and 0), or a
    TypeError / IndexError naming ``op``, as torch accepts it (any integer-like but bool)."""
    dim = as_int(op, "dim", dim)
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"roofkit.{op}: dim {dim} out of range for a {ndim}-d input (expected [{-n}, {n - 1}])")
    return dim % n


def row_view(t: torch.Tensor, dim: int) -> torch.Tensor | None:
    """``t`` with ``dim`` moved last, as a 2-D (rows, N) *view* sharing memory, or None."""
    tm = t.movedim(dim, -1)
    n = tm.shape[-1]
    try:
        return tm.view(-1, n)
    except RuntimeError:
        return None


def rows_of(t: torch.Tensor, dim: int) -> torch.Tensor:
    """A 2-D (rows, N) tensor holding ``t`` with ``dim`` last: a view when strides allow, else a copy."""
    if (dim == -1 or dim == t.dim() - 1) and t.is_contiguous() and t.dim():
        return t.view(-1, t.shape[-1])  # the common case, without movedim's cost on the host path
    v = row_view(t, dim)
    if v is not None:
        return v
    return t.movedim(dim, -1).contiguous().view(-1, t.shape[dim])


def needs_int64(*extents: int) -> bool:
    """True if an element offset built from these (size * stride) products can reach 2**31."""
    return sum(abs(e) for e in extents) >= 2**31


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1), in plain integer arithmetic (Triton 3.6's
    ``triton.next_power_of_2`` / ``triton.cdiv`` are jit-wrapped: ~2 us per host call)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def check_power_of_two(op: str, name: str, value: int) -> None:
    """A launch tunable that becomes a Triton block edge must be a power of two >= 1; refused
    by name (Triton's own error would not say which setting)."""
    if value < 1 or value & (value - 1):
        raise ValueError(f"roofkit.{op}: the tunable {name} must be a power of two >= 1; got {value}")


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for integers, on the host (see ``next_pow2``)."""
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def _sm_count(device_type: str, index: int | None) -> int:
    if device_type == "cuda":
        return torch.cuda.get_device_properties(index).multi_processor_count
    return os.cpu_count() or 1


def device_index(device: torch.device) -> int:
    """The CUDA device index of ``device`` (the current device when it names none)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (read from the device); CPU cores on CPU."""
    return _sm_count(device.type, device.index if device.type == "cuda" else None)


@functools.lru_cache(maxsize=None)
def shared_memory_limits(index: int) -> tuple[int, int]:
    """(bytes one block may opt in to, bytes per SM) of shared memory on CUDA device ``index``,
    read from the device (the driver's attribute through Triton, the SM's through torch)."""
    from triton.runtime import driver

    per_block = driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return int(per_block), int(torch.cuda.get_device_properties(index).shared_memory_per_multiprocessor)


@functools.lru_cache(maxsize=None)
def registers_per_sm(index: int) -> int:
    """32-bit registers of one SM of CUDA device ``index`` (torch's property where it has it,
    else the driver's per-block limit, the same number on every GPU since Volta)."""
    from triton.runtime import driver

    regs = getattr(torch.cuda.get_device_properties(index), "regs_per_multiprocessor", None)
    return int(regs or driver.active.utils.get_device_properties(index)["max_num_regs"])
