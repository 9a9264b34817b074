"""Verification of any implementation of a registered op against its float64 reference.

A result passes only if, for several fresh seeds per case and for the output and every gradient
the spec names, all of these hold (docs/design.md, "Verification rules"):

1. shape, dtype and device equal those of PyTorch's own implementation; NaN positions and signed
   infinities equal the reference's exactly;
2. every element was written: allocations made during the call are poisoned (NaN, or a sentinel
   for integers) and the output is snapshotted on the caller's stream right after the call, so
   unwritten elements and work left running on another stream show up as mismatches;
3. relative-L2 error <= l2_factor * max(PyTorch's error in the same dtype, the error of the
   reference rounded to the output dtype) + floor(dtype), and
   elementwise |impl - ref| <= atol * scale + rtol * |ref| (scale: the largest finite |ref|,
   grown with the reduction length);
4. the reference is not all zeros; integer outputs (counts, indices) equal the reference exactly;
5. inputs are bitwise unchanged unless the spec says the op mutates them;
6. ops that promise determinism (the spec, or a case with ``deterministic=True``) give
   bitwise-identical results on a repeat call.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from . import registry
from .inputs import make_generator, with_layout
from .spec import Case, Inputs, OpSpec

POISON_INT = 0x5A5A5A5A
COMPARE_CHUNK = 1 << 25  # elements per float64 comparison chunk


@dataclass
class Check:
    """Error figures of one output (the result, or one gradient) of one call."""

    output: str
    passed: bool
    reasons: list[str] = field(default_factory=list)
    err_l2: float = math.nan
    torch_err_l2: float = math.nan
    budget_l2: float = math.nan
    max_abs_err: float = math.nan
    mismatches: int = 0
    numel: int = 0
    worst: str = ""


@dataclass
class VerifyRow:
    """One (case, dtype, seed) of one op: the checks of each output."""

    op: str
    case: str
    dtype: str
    seed: int
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def describe(self) -> str:
        parts = []
        for c in self.checks:
            if not c.passed:
                parts.append(
                    f"{c.output}: {'; '.join(c.reasons)} (err_l2={c.err_l2:.3g}, "
                    f"budget={c.budget_l2:.3g}, torch={c.torch_err_l2:.3g}, "
                    f"max_abs={c.max_abs_err:.3g}, mismatches={c.mismatches}/{c.numel}"
                    f"{', worst ' + c.worst if c.worst else ''})"
                )
        return f"{self.op}[{self.case}, {self.dtype}, seed {self.seed}]: " + (
            " | ".join(parts) if parts else "ok"
        )


@dataclass
class VerifyReport:
    """All rows of one :func:`verify_op` call; ``passed`` is True only if every row passed."""

    op: str
    rows: list[VerifyRow]

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    def failures(self) -> list[VerifyRow]:
        return [r for r in self.rows if not r.passed]

    def summary(self) -> str:
        bad = self.failures()
        head = f"{self.op}: {len(self.rows) - len(bad)}/{len(self.rows)} passed"
        return "\n".join([head] + [r.describe() for r in bad])


# ----------------------------------------------------------------------------- poisoning


def _poison(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(POISON_INT if torch.iinfo(t.dtype).max >= POISON_INT else torch.iinfo(t.dtype).max)
    return t


@contextlib.contextmanager
def poisoned_allocations():
    """Make torch.empty / empty_like / empty_strided / Tensor.new_empty return poisoned memory.

    Covers allocations made from Python during the call (roofkit's wrappers and any user
    implementation written in Python), so an output element nobody wrote cannot pass.
    """
    originals = {
        "empty": torch.empty,
        "empty_like": torch.empty_like,
        "empty_strided": torch.empty_strided,
    }
    new_empty = torch.Tensor.new_empty

    def wrap(fn):
        def poisoned(*args, **kwargs):
            t = fn(*args, **kwargs)
            # Leave alone what compilers make while tracing (fake tensors, graph inputs).
            if torch.compiler.is_compiling() or type(t) is not torch.Tensor or t.requires_grad:
                return t
            with torch.no_grad():
                return _poison(t)

        return poisoned

    try:
        for name, fn in originals.items():
            setattr(torch, name, wrap(fn))
        torch.Tensor.new_empty = wrap(new_empty)
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)
        torch.Tensor.new_empty = new_empty


# ----------------------------------------------------------------------------- comparison


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    if a.is_floating_point() and a.element_size() == 1:
        # float8: torch has no == / signbit for it on every device; the bytes are the value.
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    if a.is_floating_point():
        # Equal values, or both NaN; signed zeros must match too (bit patterns).
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        return bool(same.all()) and bool((torch.signbit(a) == torch.signbit(b)).all())
    return torch.equal(a, b)


def compare(
    name: str,
    got: torch.Tensor,
    ref: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float,
    atol: float,
    l2_factor: float,
    l2_floor: float,
    device: torch.device,
) -> Check:
    """Compare ``got`` with the float64 ``ref``; ``expected`` is PyTorch's own same-dtype result."""
    c = Check(output=name, passed=True, numel=int(ref.numel()))
    if not isinstance(got, torch.Tensor):
        c.passed = False
        c.reasons.append(f"returned {type(got).__name__}, expected a tensor")
        return c
    if tuple(got.shape) != tuple(expected.shape):
        c.reasons.append(f"shape {tuple(got.shape)} != {tuple(expected.shape)}")
    if got.dtype != expected.dtype:
        c.reasons.append(f"dtype {got.dtype} != {expected.dtype}")
    if got.device.type != device.type:
        c.reasons.append(f"device {got.device} != {device}")
    if c.reasons:
        c.passed = False
        return c
    if ref.numel() == 0:
        return c
    if not (got.is_floating_point() or got.is_complex()):
        # Integer and boolean outputs (counts, indices, masks) must equal the reference exactly.
        bad = got.detach().reshape(-1).to(torch.int64) != ref.detach().reshape(-1).to(torch.int64)
        c.mismatches = int(bad.sum())
        if c.mismatches:
            j = int(bad.nonzero()[0])
            c.worst = f"{_unravel(j, ref.shape)}: got {int(got.reshape(-1)[j])}, ref {int(ref.reshape(-1)[j])}"
            c.reasons.append(f"{c.mismatches} integer element(s) differ from the exact reference")
        c.err_l2 = c.torch_err_l2 = c.budget_l2 = 0.0
        c.passed = not c.reasons
        return c
    # Large outputs are compared in chunks so the float64 temporaries stay bounded (2**31+
    # element cases must fit beside their own float64 reference).
    G = got.detach().reshape(-1)
    R = ref.detach().reshape(-1)
    E = expected.detach().reshape(-1)
    spans = [(i, min(i + COMPARE_CHUNK, R.numel())) for i in range(0, R.numel(), COMPARE_CHUNK)]

    def chunk(a, b):
        g = G[a:b].to(torch.float64)
        r = R[a:b].to(torch.float64)
        e = E[a:b].to(torch.float64)
        # Special values are judged against the reference rounded to the output dtype: a finite
        # float64 value beyond the dtype's range must come out as an infinity of the same sign.
        rs = r.to(got.dtype).to(torch.float64)
        finite = torch.isfinite(rs)
        gf = torch.where(torch.isfinite(g), g, torch.full_like(g, math.inf))
        diff = torch.where(finite, gf - r, torch.zeros_like(r))
        te = torch.where(finite & torch.isfinite(e), e - r, torch.zeros_like(r))
        return g, r, rs, finite, diff, te

    n_special, first_special = 0, None
    max_r = max_d = max_te = max_rep = 0.0
    for a, b in spans:
        g, r, rs, finite, diff, te = chunk(a, b)
        nan_bad = torch.isnan(g) != torch.isnan(rs)
        inf_bad = (torch.isinf(g) | torch.isinf(rs)) & ~(torch.isinf(g) & torch.isinf(rs) & (g == rs))
        special_bad = nan_bad | (inf_bad & ~torch.isnan(rs))
        k = int(special_bad.sum())
        if k and first_special is None:
            j = a + int(special_bad.nonzero()[0])
            first_special = (j, float(G[j]), float(R[j]))
        n_special += k
        rf = torch.where(finite, r, torch.zeros_like(r))
        max_r = max(max_r, float(rf.abs().max()))
        max_d = max(max_d, float(diff.abs().max()))
        max_te = max(max_te, float(te.abs().max()))
        rep = torch.where(finite, rs - r, torch.zeros_like(r))
        max_rep = max(max_rep, float(rep.abs().max()))
    if n_special:
        j, gv, rv = first_special
        c.reasons.append(
            f"{n_special} NaN/inf position(s) differ from the reference, first at "
            f"{_unravel(j, ref.shape)} (got {gv}, ref {rv})"
        )

    c.max_abs_err = max_d
    if max_r == 0.0:
        # Rule 4: a zero reference proves nothing by tolerance; such an output (e.g. the gradient
        # of a one-element softmax) must be exactly zero, which poisoned memory never is.
        if max_d != 0.0:
            c.reasons.append(f"reference is exactly zero but the output is not (max |err| {max_d:.3g})")
        c.passed = not c.reasons
        return c

    # Elementwise limit: the per-dtype table, never tighter than what the dtype can represent
    # (its smallest normal) nor than l2_factor x PyTorch's own worst elementwise error (so an
    # ill-conditioned element is judged against what the hardware precision allows).
    floor_abs = max(torch.finfo(got.dtype).tiny, l2_factor * max_te)
    ss_r = ss_d = ss_te = ss_rep = 0.0
    worst_ratio, worst_j = 0.0, None
    for a, b in spans:
        g, r, rs, finite, diff, te = chunk(a, b)
        rf = torch.where(finite, r, torch.zeros_like(r))
        ss_r += float(((rf / max_r) ** 2).sum())
        if max_d not in (0.0, math.inf):
            ss_d += float(((diff / max_d) ** 2).sum())
        if max_te > 0.0:
            ss_te += float(((te / max_te) ** 2).sum())
        if max_rep > 0.0:
            ss_rep += float(((torch.where(finite, rs - r, torch.zeros_like(r)) / max_rep) ** 2).sum())
        absdiff = diff.abs()
        limit = (atol * max_r + rtol * rf.abs()).clamp_min(floor_abs)
        bad = finite & ~(absdiff <= limit)
        nb = int(bad.sum())
        if nb:
            c.mismatches += nb
            ratio = torch.where(bad, absdiff / limit, torch.zeros_like(absdiff))
            kk = int(ratio.argmax())
            if float(ratio[kk]) > worst_ratio or worst_j is None:
                worst_ratio, worst_j = float(ratio[kk]), a + kk
    ref_norm = max_r * math.sqrt(ss_r)
    c.err_l2 = math.inf if max_d == math.inf else max_d * math.sqrt(ss_d) / ref_norm
    c.torch_err_l2 = max_te * math.sqrt(ss_te) / ref_norm
    # No result in the output dtype can beat the reference rounded to that dtype: torch's error
    # is never taken as smaller than that (a single scalar output, e.g. a mean loss, can land
    # on torch's side of a rounding boundary by luck).
    rounding_err_l2 = max_rep * math.sqrt(ss_rep) / ref_norm
    c.budget_l2 = l2_factor * max(c.torch_err_l2, rounding_err_l2) + l2_floor
    if not c.err_l2 <= c.budget_l2:
        c.reasons.append(f"relative L2 error {c.err_l2:.3g} > budget {c.budget_l2:.3g}")
    if c.mismatches:
        c.worst = f"{_unravel(worst_j, ref.shape)}: got {float(G[worst_j]):.6g}, ref {float(R[worst_j]):.6g}"
        c.reasons.append(
            f"{c.mismatches} element(s) outside max(atol={atol * max_r:.3g} + rtol={rtol:.3g}*|ref|, "
            f"{floor_abs:.3g})"
        )
    c.passed = not c.reasons
    return c


def _unravel(flat: int, shape) -> tuple:
    idx = []
    for s in reversed(tuple(shape)):
        idx.append(flat % s)
        flat //= s
    return tuple(reversed(idx))


# ----------------------------------------------------------------------------- driver


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def select_cases(spec: OpSpec, device: torch.device, *, quick: bool = False, slow: bool = False) -> list[Case]:
    """The cases of ``spec`` that run on ``device``: ``gpu``/``slow`` need CUDA, ``slow`` needs ``slow``."""
    out = []
    for c in spec.cases:
        if device.type != "cuda" and ({"gpu", "slow"} & c.tags):
            continue
        if "slow" in c.tags and not slow:
            continue
        if quick and "quick" not in c.tags:
            continue
        out.append(c)
    return out


def _with_grad(inputs: Inputs, positions: Sequence[int]) -> Inputs:
    args = list(inputs.args)
    for i in positions:
        if isinstance(args[i], torch.Tensor):
            args[i] = args[i].detach().requires_grad_(True)
    return Inputs(tuple(args), dict(inputs.kwargs))


def _grad_targets(inputs: Inputs, positions: Sequence[int]) -> list[tuple[int, torch.Tensor]]:
    return [(i, inputs.args[i]) for i in positions if isinstance(inputs.args[i], torch.Tensor)]


def _grad_outputs(outs, seed: int, dy_dtype, dy_layout: str, dy_fill: str) -> list[tuple[int, torch.Tensor]]:
    """(position, grad_output) for every floating output: drawn in float32 from ``seed + position``,
    rounded to ``dy_dtype`` (one dtype, or one per output; default the output's), cast to the
    output's dtype and laid out as ``dy_layout``."""
    dys = []
    for i, o in enumerate(outs):
        if not (isinstance(o, torch.Tensor) and o.is_floating_point()):
            continue
        g = make_generator(seed + i, o.device)
        dy = torch.randn(o.shape, generator=g, device=o.device, dtype=torch.float32)
        if dy_fill == "ones":
            dy = torch.ones_like(dy)
        rounded = dy_dtype[i] if isinstance(dy_dtype, (list, tuple)) else dy_dtype
        dys.append((i, with_layout(dy.to(rounded or o.dtype).to(o.dtype), dy_layout)))
    return dys


def run_outputs(
    fn: Callable,
    inputs: Inputs,
    grad_positions: Sequence[int],
    grad_out_seed: int,
    poison: bool,
    dy_dtype: torch.dtype | None = None,
    dy_layout: str = "contiguous",
    raw: list | None = None,
    dy_fill: str = "normal",
):
    """Call ``fn`` and, if asked, backpropagate a seeded random gradient.

    Every floating output is backpropagated at once, each with its own gradient: drawn in float32
    (seeded by ``grad_out_seed`` plus the output's position), rounded to ``dy_dtype`` (one dtype
    or one per output; default: the output's dtype), cast to the output's dtype and laid out as
    ``dy_layout`` (``dy_fill="ones"``: all ones, as
    ``loss.backward()`` gives a scalar loss), so the float64 reference sees exactly the
    values the implementation sees. Returns (name, tensor) snapshots taken on the current stream
    right after each call, before any synchronization, so work still running elsewhere is caught.
    A single tensor is named ``out``; a tuple or list ``out0, out1, ...``; a gradient
    ``grad[i]``; a grad_output that the backward modified adds ``("grad_output modified", True)``.
    ``raw``, if given, receives the returned tensors themselves (not copies).
    """
    ctx = poisoned_allocations() if poison else contextlib.nullcontext()
    inp = _with_grad(inputs, grad_positions)
    targets = _grad_targets(inp, grad_positions)
    results = []
    with ctx:
        ret = fn(*inp.args, **inp.kwargs)
        outs = _as_tuple(ret)
        names = [f"out{i}" for i in range(len(outs))] if isinstance(ret, (tuple, list)) else ["out"]
        results += [(n, o.detach().clone() if isinstance(o, torch.Tensor) else o) for n, o in zip(names, outs)]
        if raw is not None:
            raw.extend(o for o in outs if isinstance(o, torch.Tensor))
        if targets:
            # every floating output is differentiated, each with its own seeded gradient (the
            # first with grad_out_seed itself)
            dys = _grad_outputs(outs, grad_out_seed, dy_dtype, dy_layout, dy_fill)
            dys_before = [dy.clone() for _, dy in dys]
            pairs = [(outs[i], dy) for i, dy in dys if outs[i].requires_grad]
            if pairs:
                grads = torch.autograd.grad([o for o, _ in pairs], [t for _, t in targets], [dy for _, dy in pairs],
                                            allow_unused=True)
            else:  # no output depends on the inputs through autograd
                grads = [None] * len(targets)
            for (i, _), gr in zip(targets, grads):
                snap = gr.detach().clone() if gr is not None else None
                results.append((f"grad[{i}]", snap))
            if not all(_bitwise_equal(dy, before) for (_, dy), before in zip(dys, dys_before)):
                results.append(("grad_output modified", True))
    return results


def check_outputs(spec: OpSpec, case: Case, dtype: torch.dtype, refs, expected, got, device) -> list[Check]:
    """Compare each (name, tensor) of ``got`` with the float64 ``refs`` (rules 1-4); tolerances
    are those of each output's own dtype (an output cast by ``dtype=`` is judged in its dtype)."""
    checks = []
    for name, value in got:
        if name == "grad_output modified":
            checks.append(Check(output="grad_output", passed=False, reasons=["the backward modified grad_output"]))
    got = [(n, v) for n, v in got if n != "grad_output modified"]
    got_names, ref_names = [n for n, _ in got], [n for n, _ in expected]
    if got_names != ref_names:
        checks.append(Check(output="outputs", passed=False,
                            reasons=[f"returned {got_names}, expected {ref_names} (a tensor where torch returns a tensor)"]))
        return checks
    for (name, r), (_, e), (_, o) in zip(refs, expected, got):
        if r is None:
            continue
        if o is None:
            checks.append(Check(output=name, passed=False, reasons=["no gradient returned"]))
            continue
        if not (e.is_floating_point() or e.is_complex()):
            # Integer / bool outputs are compared exactly: no tolerance applies.
            checks.append(compare(name, o, r, e, rtol=0.0, atol=0.0, l2_factor=0.0, l2_floor=0.0, device=device))
            continue
        odt = e.dtype
        rtol, atol = spec.tolerance.elementwise(odt, spec.reduction_length(case))
        checks.append(
            compare(
                name, o, r, e,
                rtol=rtol, atol=atol,
                l2_factor=spec.tolerance.l2_factor,
                l2_floor=spec.tolerance.floor(odt, gradient=name.startswith("grad[")),
                device=device,
            )
        )
    return checks


def _clone_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same strides (a repeat call must see the same layout); overlapping
    layouts (stride 0) are rebuilt by expanding a copy of their distinct elements."""
    if t.numel() and any(st == 0 and sz > 1 for st, sz in zip(t.stride(), t.shape)):
        idx = tuple(slice(0, 1) if st == 0 else slice(None) for st, sz in zip(t.stride(), t.shape))
        return t[idx].clone().expand(t.shape)
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def reference_outputs(spec: OpSpec, inputs: Inputs, grad_pos: Sequence[int], grad_seed: int, dy_fill: str = "normal"):
    """(expected, refs): PyTorch's same-dtype outputs and the float64 reference's, each with the
    gradients of ``grad_pos`` for the same seeded grad_output."""
    expected = run_outputs(spec.torch_impl, inputs.map(lambda t: t.detach().clone()), grad_pos, grad_seed,
                           poison=False, dy_fill=dy_fill)
    ref_inputs = inputs.map(lambda t: t.detach().to(torch.float64) if t.is_floating_point() else t.detach())
    dy_dtypes = [v.dtype if isinstance(v, torch.Tensor) else None for n, v in expected if n.startswith("out")]
    refs = run_outputs(spec.reference, ref_inputs, grad_pos, grad_seed, poison=False, dy_dtype=dy_dtypes,
                       dy_fill=dy_fill)
    return expected, refs


def verify_case(
    spec: OpSpec,
    impl: Callable,
    case: Case,
    dtype: torch.dtype,
    seed: int,
    device: torch.device,
    *,
    check_determinism: bool = True,
) -> VerifyRow:
    """Verify ``impl`` on one (case, dtype, seed); see the module docstring for the rules."""
    gen = make_generator(seed, device)
    inputs = spec.make_inputs(case, dtype, gen, device)
    pristine = inputs.map(lambda t: _clone_layout(t.detach()))
    grad_pos = spec.grad_args if case.get("grad", True) else ()
    grad_seed = seed + 7919

    dy_layout = case.get("grad_layout", "contiguous")
    dy_fill = case.get("grad_output", "normal")
    expected, refs = reference_outputs(spec, inputs, grad_pos, grad_seed, dy_fill)
    raw: list = []
    got = run_outputs(impl, inputs, grad_pos, grad_seed, poison=True, dy_layout=dy_layout, raw=raw, dy_fill=dy_fill)
    if device.type == "cuda":
        torch.cuda.synchronize(device)

    checks = check_outputs(spec, case, dtype, refs, expected, got, device)

    # Rule 5: inputs untouched (bitwise) unless the op mutates them.
    for pos, (a, b) in enumerate(zip(inputs.args, pristine.args)):
        if isinstance(a, torch.Tensor) and pos not in spec.mutates and not _bitwise_equal(a.detach(), b):
            checks.append(Check(output=f"input[{pos}]", passed=False, reasons=["input was modified"]))

    # Rule 6: a repeat call on the same inputs gives the same bits.
    if (spec.deterministic or case.get("deterministic")) and check_determinism:
        again = run_outputs(impl, pristine.map(_clone_layout), grad_pos, grad_seed, poison=True, dy_layout=dy_layout,
                            dy_fill=dy_fill)
        for (name, o1), (_, o2) in zip(got, again):
            if isinstance(o1, torch.Tensor) and isinstance(o2, torch.Tensor) and not _bitwise_equal(o1, o2):
                checks.append(Check(output=name, passed=False, reasons=["not bitwise identical on a repeat call"]))
        # The first call's outputs must be its own: a later call on other inputs may not
        # overwrite them (a shared output buffer would).
        other = spec.make_inputs(case, dtype, make_generator(seed + 1, device), device)
        impl(*other.args, **other.kwargs)
        for (name, snap), r in zip(got, raw):
            if isinstance(snap, torch.Tensor) and not _bitwise_equal(r.detach(), snap):
                checks.append(Check(output=name, passed=False, reasons=["output storage was overwritten by a later call"]))
    return VerifyRow(spec.name, case.name, str(dtype).removeprefix("torch."), seed, checks)


def verify_plan(
    op: OpSpec | str,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    cases: Iterable[Case | str] | None = None,
    seeds: int = 3,
    device: torch.device | str | None = None,
    quick: bool = False,
    slow: bool = False,
) -> list[tuple[Case, torch.dtype, int]]:
    """The (case, dtype, seed) rows :func:`verify_op` runs with the same arguments, in order
    (nothing is run: for progress reports)."""
    spec = registry.get(op) if isinstance(op, str) else op
    device = torch.device(device) if device is not None else default_device()
    if cases is None:
        chosen = select_cases(spec, device, quick=quick, slow=slow)
    else:
        chosen = [spec.case(c) if isinstance(c, str) else c for c in cases]
    wanted = tuple(dtypes) if dtypes is not None else None
    return [(c, dt, 1000 * s + 17) for c in chosen for dt in spec.case_dtypes(c)
            if wanted is None or dt in wanted for s in range(seeds)]


def verify_op(
    op: OpSpec | str,
    impl: Callable | None = None,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    cases: Iterable[Case | str] | None = None,
    seeds: int = 3,
    device: torch.device | str | None = None,
    quick: bool = False,
    slow: bool = False,
    on_row: Callable[[VerifyRow], None] | None = None,
) -> VerifyReport:
    """Verify ``impl`` (default: roofkit's own) against the float64 reference of ``op``.

    Args:
        op: an :class:`OpSpec` or the name of a registered op.
        impl: any callable with the op's public signature.
        dtypes: dtypes to check (default: the spec's, narrowed per case).
        cases: cases or case names (default: every case that runs on ``device``).
        seeds: fresh random inputs per (case, dtype).
        device: where inputs live (default: CUDA if present, else CPU through the interpreter).
        quick, slow: case selection when ``cases`` is None (see :func:`select_cases`).
        on_row: called with each :class:`VerifyRow` as soon as it is checked (progress reports).
    Returns:
        VerifyReport whose ``passed`` is True only if every check of every row passed.
    Raises:
        KeyError for an unknown op or case name; exceptions raised by ``impl`` propagate.
    """
    spec = registry.get(op) if isinstance(op, str) else op
    impl = impl if impl is not None else spec.impl
    device = torch.device(device) if device is not None else default_device()
    rows = []
    for c, dt, seed in verify_plan(spec, dtypes=dtypes, cases=cases, seeds=seeds, device=device, quick=quick, slow=slow):
        rows.append(verify_case(spec, impl, c, dt, seed, device, check_determinism=(seed == 17)))
        if on_row is not None:
            on_row(rows[-1])
    return VerifyReport(spec.name, rows)
