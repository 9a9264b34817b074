"""``roofkit eval``: judge a candidate implementation of a registered op, run in another process.

The judge (this process) draws every input from a fresh ``os.urandom`` seed, computes the float64
reference and PyTorch's same-dtype result (the error budget of ``verify``) on its own pristine
copies, and sends only the inputs to a worker process (``_eval_worker``) that imports the
candidate file in a fresh directory, with a minimal environment, its stdout/stderr sent to a
file, and runs it. Results come back over a private pipe as ``torch.save`` bytes decoded with
``weights_only=True``; every verdict is formed here. Each (case, dtype) is called ``seeds`` times
with fresh inputs, the rounds interleaved over all cases in a random order, so answers that
depend on the call count or replay an earlier output are caught.

Finding classes (one :class:`Finding` per class and case): ``wrong_result``, ``wrong_gradient``,
``no_gradient``, ``nan``, ``wrong_shape``, ``wrong_dtype``, ``wrong_type``, ``tensor_subclass``,
``input_mutation``, ``cached``, ``stateful``, ``exception``, ``exit``, ``crash``, ``hang``,
``protocol``. Gradients: for an op with a backward, every call also sends a grad_output (drawn as
verify draws it) and the arguments verify differentiates; a candidate whose output carries an
autograd graph has its gradients judged against the float64 reference's (verify's rules); one
whose output carries none is judged on its forward only, or rejected (``no_gradient``) when the
backward is required.

On a GPU (``device``, the default where one is present) the candidate's calls run there, and
``timing`` adds a timed round per evaluated case (hidden shapes apart): ``reps`` calls on fresh
inputs each, timed in the candidate's process as ``roofkit bench`` times (cold L2, CUDA events;
``_eval_worker._Timer``), every output judged as a checked call's, and the timing judged here:
``deferred`` (the output still changed after the call returned), ``side_stream`` (work went on
after the call's end event, on another stream), ``implausible`` (faster than the measured roofs
allow), ``timer`` (times that add up to more than the judge's own clock saw, or timing functions
replaced), ``persisting_l2`` (L2 set aside for persisting lines, which outlive the flush between
calls; cleared before every timed call), ``kernel_switch`` (a profiled timed call ran kernels a
profiled checked call of the same case did not: the timed code is not the checked code). The
report gives each case's time beside torch's, torch.compile's and roofkit's own, timed here by
``bench_case``, and the kernels of the profiled timed call (docs/eval.md).
"""

from __future__ import annotations

import io
import math
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import registry
from .inputs import make_generator
from .roofline import place
from .spec import Case, OpSpec
from .timing import summarize
from .verify import _bitwise_equal, _clone_layout, _grad_outputs, check_outputs, reference_outputs, select_cases

CLASSES = ("wrong_result", "wrong_gradient", "no_gradient", "nan", "wrong_shape", "wrong_dtype", "wrong_type", "tensor_subclass", "input_mutation",
           "cached", "stateful", "exception", "exit", "crash", "hang", "protocol",
           "deferred", "side_stream", "implausible", "timer", "persisting_l2", "kernel_switch")
TIMED_REPS = 10  # timed calls per case on a GPU, each on fresh inputs
KERNELS_KEPT = 256  # kernels of a profiled timed call read (the worker sends at most as many)
TIMED_WARMUP_CALLS = 4  # what a timed round's limit allows for its warm-up, in calls (the worker: 25 ms, 3 at least)
# side_stream: the device still busy after the call's end event, beyond the idle baseline, by more
# than this share of the call's own time, and at least SIDE_STREAM_MIN_MS
SIDE_STREAM_SHARE = 0.25
SIDE_STREAM_MIN_MS = 0.025
BASELINES = ("roofkit", "torch", "torch.compile")  # timed here beside the candidate (bench's method)
IDLE_BASELINE_MAX_MS = 5.0  # a do-nothing call's synchronize delay above this is not believed
# the round's baseline (do-nothing calls between the timed ones) at most this many times the one
# measured before the candidate's import: the worker caps it so (its IDLE_SPELL_MAX); above, forged
IDLE_SPELL_MAX = 3.0
QUICK_FALLBACK = 3  # cases taken by ``quick`` from a spec that tags none quick
HIDDEN_CASES = 3  # shapes no case of the op has, judged beside the evaluated cases
CALL_TIMEOUT_S = 120.0
TOTAL_TIMEOUT_S = 1800.0
START_TIMEOUT_S = 120.0  # the worker's start and the candidate's import
MAX_FRAME_BYTES = 1 << 34
# What the worker inherits of this process's environment (nothing else: no tokens, no keys).
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class EvaluationError(Exception):
    """The evaluation could not run (unknown op or case, missing candidate file)."""


@dataclass
class Finding:
    """One reason for rejection: its class (see ``CLASSES``), where, and the figures."""

    cls: str
    case: str
    detail: str


@dataclass
class CallRow:
    """One call of the candidate: its case, dtype, round and seed, and its error against the budget."""

    case: str
    dtype: str
    round: int
    seed: int
    status: str
    passed: bool
    err_l2: float = math.nan
    budget_l2: float = math.nan
    torch_err_l2: float = math.nan
    classes: list[str] = field(default_factory=list)
    gradients: str = ""  # "judged", "none" (the output carried no autograd graph), "" (not asked)


@dataclass
class Report:
    """The verdict on one candidate. ``error`` set: the evaluation could not run (exit 2)."""

    op: str
    candidate: str
    findings: list[Finding] = field(default_factory=list)
    rows: list[CallRow] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0
    isolation: str = ""  # what the candidate's process ran in (``_isolation``)

    @property
    def accepted(self) -> bool:
        return self.error is None and not self.findings and bool(self.rows) and all(r.passed for r in self.rows)

    @property
    def classes(self) -> set[str]:
        return {f.cls for f in self.findings}

    device: str = "cpu"
    timings: list[dict] = field(default_factory=list)  # one per timed (case, dtype): see ``_judge_timing``

    def add(self, cls: str, case: str, detail: str) -> None:
        if not any(f.cls == cls and f.case == case for f in self.findings):
            self.findings.append(Finding(cls, case, detail))

    def summary(self) -> str:
        if self.error is not None:
            return f"{self.candidate}: evaluation could not run: {self.error}"
        verdict = "ACCEPTED" if self.accepted else "REJECTED"
        asked = [r for r in self.rows if r.gradients]
        grads = (f"; gradients judged on {sum(r.gradients == 'judged' for r in asked)} of {len(asked)} calls that "
                 "asked for them" if asked else "")
        head = (f"{self.candidate} as {self.op}: {verdict} ({len(self.rows)} calls{grads}, {self.elapsed_s:.1f} s; "
                f"isolation: {self.isolation or 'none'})")
        lines = [head] + [f"  {f.cls}: {f.case}: {f.detail}" for f in self.findings]
        for t in self.timings:
            ran = ", ".join(f"{k[:48]} {us:.1f} us" for k, us in t.get("kernels", [])[:4]) or t.get("kernel_note", "")
            share = t.get("own_kernel_share", float("nan"))
            own = (f"{100 * share:.0f} % in the candidate's own kernels" if not math.isnan(share) else "no kernel time seen")
            lines.append(f"  kernels of {t['case']}[{t['dtype']}]: {own}; {ran}")
        return "\n".join(lines)

    def table(self) -> str:
        """One line per (case, dtype): calls passed, and the worst relative-L2 error against its budget."""
        groups: dict[tuple[str, str], list[CallRow]] = {}
        for r in self.rows:
            groups.setdefault((r.case, r.dtype), []).append(r)
        lines = [f"  {'case':<32} {'dtype':<9} {'passed':>7} {'err_l2':>10} {'budget':>10}"]
        for (case, dtype), rows in sorted(groups.items()):
            worst = max(rows, key=lambda r: r.err_l2 / r.budget_l2 if r.budget_l2 > 0 else 0.0)
            err, budget = (f"{v:>10.3g}" if not math.isnan(v) else f"{'-':>10}" for v in (worst.err_l2, worst.budget_l2))
            lines.append(f"  {case:<32} {dtype:<9} {sum(r.passed for r in rows):>3}/{len(rows):<3} {err} {budget}")
        if self.timings:
            lines.append(f"  {'case (timed)':<32} {'dtype':<9} {'median ms':>10} {'% roof':>7}  "
                         + "  ".join(f"{'vs ' + b:>16}" for b in BASELINES))
            for t in self.timings:
                vs = "  ".join(f"{t['baselines'][b] / t['median_ms']:>15.2f}x" if b in t["baselines"] and t["median_ms"]
                               else f"{'-':>16}" for b in BASELINES)
                lines.append(f"  {t['case']:<32} {t['dtype']:<9} {t['median_ms']:>10.4f} {t['roof_pct']:>7.1f}  {vs}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        d = asdict(self)
        d["accepted"] = self.accepted
        return d


# ----------------------------------------------------------------------------- the worker


_UNSET = object()
MAX_MESSAGE_DEPTH = 32  # containers in containers a message may hold (the worker's go 3 deep)


def _shallow(obj, depth: int) -> bool:
    """Whether ``obj``'s lists, tuples and dicts nest at most ``depth`` levels (without recursion)."""
    todo = [(obj, 0)]
    while todo:
        o, d = todo.pop()
        if isinstance(o, (list, tuple, dict)):
            if d >= depth:
                return False
            todo.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return True


class _Timeout(Exception):
    pass


class _Closed(Exception):
    pass


class _Malformed(Exception):
    pass


# The worker runs in a PID namespace of its own (with its own /proc) where util-linux's ``unshare``
# may make one: a candidate then sees, signals and reads the memory of no process outside it (the
# judge included), and every process in it dies with the worker. As root, or unprivileged through
# a user namespace.
_ISOLATIONS = (
    ("pid namespace", ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")),
    ("pid namespace (user namespace)", ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc",
                                        "--kill-child")),
)
_ISOLATION: list = []  # (name, command prefix), decided once per process


def _isolation() -> tuple[str, tuple[str, ...]]:
    """(what the worker runs in, the command prefix that puts it there): the first of
    ``_ISOLATIONS`` this machine allows (tried once), else ("none: ...", ())."""
    if not _ISOLATION:
        why = "no unshare command"
        if shutil.which("unshare"):
            for name, prefix in _ISOLATIONS:
                try:
                    ok = subprocess.run([*prefix, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, timeout=30).returncode == 0
                except (OSError, subprocess.SubprocessError):
                    ok = False
                if ok:
                    _ISOLATION.append((name, prefix))
                    break
            else:
                why = "namespaces not permitted here"
        if not _ISOLATION:
            _ISOLATION.append((f"none ({why})", ()))
    return _ISOLATION[0]


def _worker_env(root: str, device: torch.device) -> dict:
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    import roofkit

    env.update(HOME=root, PYTHONPATH=str(Path(roofkit.__file__).resolve().parents[1]), PYTHONNOUSERSITE="1",
               PYTHONDONTWRITEBYTECODE="1")
    if device.type != "cuda":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


class _Worker:
    """A started ``_eval_worker`` process (a process group of its own) and the two pipes to it."""

    def __init__(self, root: str, device: torch.device):
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        env = _worker_env(root, device)
        env["ROOFKIT_EVAL_FDS"] = f"{to_r},{from_w}"
        self.log = open(os.path.join(root, "worker.log"), "ab")  # noqa: SIM115 (closed by close())
        self.isolation, prefix = _isolation()
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "roofkit.harness._eval_worker"], cwd=root, env=env,
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     pass_fds=(to_r, from_w), start_new_session=True)
        os.close(to_r)
        os.close(from_w)
        self.wfd, self.rfd = to_w, from_r
        os.set_blocking(self.wfd, False)
        self.buf = bytearray()

    def send(self, obj, deadline: float) -> None:
        buf = io.BytesIO()
        torch.save(obj, buf)
        data = buf.getvalue()
        view = memoryview(len(data).to_bytes(8, "big") + data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout()
            _, writable, _ = select.select([], [self.wfd], [], left)
            if writable:
                try:
                    view = view[os.write(self.wfd, view):]
                except BlockingIOError:
                    continue
                except OSError as e:
                    raise _Closed() from e

    def recv(self, deadline: float) -> dict:
        while True:
            if len(self.buf) >= 8:
                n = int.from_bytes(self.buf[:8], "big")
                if not 0 < n <= MAX_FRAME_BYTES:
                    raise _Malformed(f"a message of {n} bytes announced")
            if len(self.buf) >= 8 and len(self.buf) >= 8 + n:
                payload, self.buf = bytes(self.buf[8:8 + n]), self.buf[8 + n:]
                try:
                    msg = torch.load(io.BytesIO(payload), weights_only=True)
                except Exception as e:
                    raise _Malformed(f"undecodable message ({type(e).__name__})") from e
                if not isinstance(msg, dict) or not isinstance(msg.get("kind"), str):
                    raise _Malformed("a message that is not a dict with a kind")
                if not _shallow(msg, MAX_MESSAGE_DEPTH):  # (reading it would recurse past Python's limit)
                    raise _Malformed(f"a message nested deeper than {MAX_MESSAGE_DEPTH} levels")
                return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout()
            readable, _, _ = select.select([self.rfd], [], [], left)
            if readable:
                data = os.read(self.rfd, 1 << 20)
                if not data:
                    raise _Closed()
                self.buf += data

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and anything a candidate left running
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for fd in (self.wfd, self.rfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


# ----------------------------------------------------------------------------- the plan


def _plan(spec: OpSpec, cases, dtypes, quick: bool) -> list[tuple[Case, torch.dtype]]:
    cpu = torch.device("cpu")
    if cases:
        try:
            chosen = [spec.case(c) if isinstance(c, str) else c for c in cases]
        except KeyError as e:
            raise EvaluationError(str(e.args[0])) from None
    else:
        chosen = select_cases(spec, cpu, quick=quick)
        if quick and not chosen:
            chosen = select_cases(spec, cpu)[:QUICK_FALLBACK]
    wanted = tuple(dtypes) if dtypes is not None else None
    keys = [(c, dt) for c in chosen for dt in spec.case_dtypes(c) if wanted is None or dt in wanted]
    if not keys:
        raise EvaluationError(f"{spec.name}: no case takes the dtypes asked for")
    return keys


def _hidden(spec: OpSpec, keys, count: int, rng: random.Random) -> list[tuple[Case, torch.dtype]]:
    """Up to ``count`` (case, dtype) pairs of shapes no case of the op has: the evaluated cases in
    turn, each ``shape`` with every dimension above 1 drawn again (from half to twice it, plus up
    to 7), the other parameters kept, at most 4x its elements (4096 at least); only shapes whose
    inputs and reference the spec builds on the CPU. Named ``hidden_<shape>`` in the report; the
    candidate's process sees only the inputs."""
    public = {tuple(c.get("shape")) for c in spec.cases if isinstance(c.get("shape"), (tuple, list))}
    pool = [(c, dt) for c, dt in keys if isinstance(c.get("shape"), (tuple, list))
            and all(isinstance(d, int) and not isinstance(d, bool) for d in c["shape"])]
    rng.shuffle(pool)
    cpu = torch.device("cpu")
    out = []
    for i in range(4 * count if pool else 0):  # the cases in turn, a few tries each
        if len(out) >= count:
            break
        c, dt = pool[i % len(pool)]
        base = tuple(c["shape"])
        for _ in range(4):
            shape = tuple(d if d <= 1 else rng.randint(max(2, d // 2), 2 * d + 7) for d in base)
            if shape not in public and math.prod(shape) <= max(4 * math.prod(base), 4096):
                break
        else:
            continue
        hidden = Case(f"hidden_{'x'.join(map(str, shape)) or 'scalar'}", {**c.params, "shape": shape}, frozenset(),
                      c.dtypes)
        try:
            inputs = spec.make_inputs(hidden, dt, make_generator(rng.getrandbits(62), "cpu"), cpu)
            reference_outputs(spec, inputs, (), 0)
        except Exception:  # noqa: BLE001 (a shape the op's cases do not allow: drawn no more)
            continue
        public.add(shape)
        out.append((hidden, dt))
    return out


def _grad_positions(spec: OpSpec, case: Case, inputs) -> list[int]:
    """The arguments whose gradients verify checks for this case (floating tensors of the spec's
    grad_args), or none."""
    if not case.get("grad", True):
        return []
    return [i for i in spec.grad_args if i < len(inputs.args) and isinstance(inputs.args[i], torch.Tensor)
            and inputs.args[i].is_floating_point()]


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _exit_finding(report: Report, where: str, exitcode, log_tail: str) -> None:
    tail = f"; candidate output ends: {log_tail!r}" if log_tail else ""
    if type(exitcode) is not int:  # (a forged message: the judge reads it, it never trusts it)
        raise _Malformed(f"an exit status that is not an int: {exitcode!r:.60}")
    if exitcode >= 0:
        report.add("exit", where, f"the process exited with status {exitcode}{tail}")
    else:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        report.add("crash", where, f"the process was killed by {name}{tail}")


def _log_tail(cand_dir: str, n: int = 300) -> str:
    """The candidate log's last ``n`` characters, reading only its last bytes (it may be huge)."""
    try:
        with open(Path(cand_dir, "candidate.log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4 * n))
            return f.read().decode(errors="replace")[-n:].strip()
    except OSError:
        return ""


# ----------------------------------------------------------------------------- judging one call


def _judge_gradients(spec, case, dtype, row: CallRow, msg: dict, grad_expected, grad_refs, backward: bool,
                     report: Report, where: str) -> None:
    """The gradients a call sent back, against the float64 reference's (verify's rules)."""
    status = msg.get("grad_status")
    if status == "none":
        row.gradients = "none"
        if backward:
            report.add("no_gradient", where, "the output carries no autograd graph: the op's backward was required")
            row.classes.append("no_gradient")
        return
    if status == "skipped":  # the forward's shape or dtype was wrong (judged above)
        return
    if status == "exception":
        report.add("exception", where, f"in the backward: {str(msg.get('grad_message', ''))[:500]}")
        row.classes.append("exception")
        return
    if status != "ok":
        raise _Malformed(f"gradient status {status!r}")
    row.gradients = "judged"
    grads = list(msg.get("grads") or [])
    if len(grads) != len(grad_expected) or not all(g is None or type(g) is torch.Tensor for g in grads):
        raise _Malformed("gradients of another number or type than asked for")
    got = [(name, g) for (name, _), g in zip(grad_expected, grads)]
    checks = check_outputs(spec, case, dtype, grad_refs, grad_expected, got, torch.device("cpu"))
    _add_findings(report, row, where, checks, "wrong_gradient", named=True)


def _add_findings(report: Report, row: CallRow, where: str, checks, cls_wrong: str, named: bool = False) -> None:
    """A finding per reason of each failed check: ``nan`` for NaN / inf positions, else ``cls_wrong``
    (``named``: the output's name leads the detail)."""
    for c in checks:
        for reason in c.reasons:
            cls = "nan" if "NaN/inf" in reason else cls_wrong
            report.add(cls, where, f"{c.output + ': ' if named else ''}{reason} (err_l2={c.err_l2:.3g}, "
                                   f"budget={c.budget_l2:.3g}, torch={c.torch_err_l2:.3g}"
                                   f"{', worst ' + c.worst if c.worst else ''})")
            if cls not in row.classes:
                row.classes.append(cls)


def _judge_call(spec, case, dtype, row: CallRow, msg: dict, expected, refs, pristine, history,
                report: Report, device: torch.device = torch.device("cpu")) -> None:
    where = f"{case.name}[{row.dtype}]"
    if msg.get("status") == "exception":
        report.add("exception", where, str(msg.get("message", ""))[:500])
        row.classes.append("exception")
        return
    out = msg.get("out")
    typename = str(msg.get("type", ""))
    if not isinstance(out, torch.Tensor) or type(out) is not torch.Tensor:
        report.add("wrong_type", where, f"returned {typename or 'nothing'}, expected a torch.Tensor")
        row.classes.append("wrong_type")
        return
    where_out = str(msg.get("device", out.device))
    if where_out != str(device):
        report.add("wrong_type", where, f"returned a tensor on {where_out}, the inputs were on {device}")
        row.classes.append("wrong_type")
        return
    if out.device.type != "cpu" or out.layout != torch.strided:  # nothing to compare (e.g. a meta tensor)
        report.add("wrong_type", where, f"returned a tensor on {out.device} with layout {out.layout}, expected a "
                                        "dense tensor with values")
        row.classes.append("wrong_type")
        return
    if typename != "torch.Tensor":
        report.add("tensor_subclass", where, f"returned a {typename}, a subclass of torch.Tensor")
        row.classes.append("tensor_subclass")
    exp = expected[0][1]
    if tuple(out.shape) != tuple(exp.shape):
        report.add("wrong_shape", where, f"shape {tuple(out.shape)}, expected {tuple(exp.shape)}")
        row.classes.append("wrong_shape")
    if out.dtype != exp.dtype:
        report.add("wrong_dtype", where, f"dtype {_dtype_name(out.dtype)}, expected {_dtype_name(exp.dtype)}")
        row.classes.append("wrong_dtype")
    if "wrong_shape" not in row.classes and "wrong_dtype" not in row.classes:
        checks = check_outputs(spec, case, dtype, refs, expected, [("out", out)], torch.device("cpu"))
        for c in checks:
            row.err_l2, row.budget_l2, row.torch_err_l2 = c.err_l2, c.budget_l2, c.torch_err_l2
        _add_findings(report, row, where, checks, "wrong_result")
        # The same output for inputs whose true outputs differ: an earlier answer replayed.
        for prev_exp, prev_out in history:
            if _bitwise_equal(out, prev_out) and not _bitwise_equal(exp, prev_exp):
                report.add("cached", where, "returned bitwise the output of an earlier call on other inputs")
                row.classes.append("cached")
                break
        history.append((exp, out))
    if pristine is None:  # (a timed call: its inputs were checked on the checked calls)
        return
    # Inputs as the candidate left them, against this process's pristine copies.
    after = list(msg.get("args") or [])
    for pos, a in enumerate(pristine.args):
        if isinstance(a, torch.Tensor) and pos not in spec.mutates:
            b = after[pos] if pos < len(after) else None
            if not isinstance(b, torch.Tensor) or not _bitwise_equal(b, a):
                report.add("input_mutation", where, f"argument {pos} was modified by the call")
                row.classes.append("input_mutation")
    after_kw = msg.get("kwargs") or {}
    for k, a in pristine.kwargs.items():
        if isinstance(a, torch.Tensor):
            b = after_kw.get(k)
            if not isinstance(b, torch.Tensor) or not _bitwise_equal(b, a):
                report.add("input_mutation", where, f"argument {k!r} was modified by the call")
                row.classes.append("input_mutation")


# ----------------------------------------------------------------------------- one candidate


class _Judge:
    """Runs candidates one after another through one worker, started again after any anomaly."""

    def __init__(self, root: str, device: torch.device):
        self.root = root
        self.device = device
        self.worker: _Worker | None = None
        self.count = 0

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def run(self, path: Path, spec: OpSpec, keys, seeds: int, timeout_s: float, total_timeout_s: float,
            backward: bool = False, timed_keys=(), reps: int = TIMED_REPS, baselines: dict | None = None) -> Report:
        t0 = time.monotonic()
        report = Report(spec.name, str(path), device=str(self.device))
        deadline_total = t0 + total_timeout_s
        if self.worker is None:
            self.worker = _Worker(self.root, self.device)
        w = self.worker
        report.isolation = w.isolation
        self.count += 1
        cand_dir = os.path.join(self.root, f"candidate{self.count}")
        os.mkdir(cand_dir, 0o700)
        pid = None
        where = "import"
        clean = False
        limit_s = START_TIMEOUT_S + timeout_s  # what the answer being waited for may take
        try:
            start_deadline = min(time.monotonic() + limit_s, deadline_total)
            w.send({"kind": "candidate", "path": str(path), "name": spec.name, "dir": cand_dir,
                    "device": str(self.device)}, start_deadline)
            hello = w.recv(start_deadline)
            if hello.get("kind") != "hello" or not isinstance(hello.get("pid"), int):
                raise _Malformed("no hello from the candidate's process")
            pid = hello["pid"]
            imp = w.recv(start_deadline)
            if imp.get("kind") == "ended":
                _exit_finding(report, where, imp.get("exitcode", 0), _log_tail(cand_dir))
                clean = True
                return report
            status = imp.get("status")
            if status == "exit":
                report.add("exit", where, str(imp.get("message", "")))
            elif status in ("error", "missing"):
                report.error = str(imp.get("message", ""))
            elif status != "ok":
                raise _Malformed(f"unexpected import status {status!r}")
            if status != "ok":  # the candidate's process ends by itself
                clean = w.recv(start_deadline).get("kind") == "ended"
                return report

            rng = random.SystemRandom()
            history = {k: [] for k in range(len(keys))}
            passed_once = set()
            checked_kernels: dict = {}  # key -> the kernels a profiled checked call ran (timed keys)
            timed_ks = [i for i, key in enumerate(keys) if key in timed_keys]
            # (a last round on the timed keys alone: one checked call each, profiled, without gradients)
            for rnd in range(seeds + bool(timed_ks)):
                profiling = rnd == seeds
                order = list(timed_ks) if profiling else list(range(len(keys)))
                rng.shuffle(order)
                for k in order:
                    case, dtype = keys[k]
                    where = f"{case.name}[{_dtype_name(dtype)}]"
                    seed = int.from_bytes(os.urandom(8), "big") >> 2
                    inputs = spec.make_inputs(case, dtype, make_generator(seed, "cpu"), torch.device("cpu"))
                    pristine = inputs.map(lambda t: _clone_layout(t.detach()))
                    grad_pos, grad_seed = _grad_positions(spec, case, inputs), seed + 7919
                    fill = case.get("grad_output", "normal")
                    expected, refs = reference_outputs(spec, inputs.map(lambda t: _clone_layout(t.detach())), grad_pos,
                                                       grad_seed, fill)
                    grad_expected = [x for x in expected if x[0].startswith("grad[")]
                    grad_refs = [x for x in refs if x[0].startswith("grad[")]
                    expected = [x for x in expected if not x[0].startswith("grad[")]
                    refs = [x for x in refs if not x[0].startswith("grad[")]
                    call = {"kind": "call", "seq": len(report.rows) + 1, "args": list(inputs.args),
                            "kwargs": dict(inputs.kwargs)}
                    if profiling:
                        call["profile"] = True
                    elif grad_pos and len(expected) == 1:  # (one output: the grad_output verify draws for it)
                        call["grad"] = grad_pos
                        call["dy"] = _grad_outputs([expected[0][1]], grad_seed, None,
                                                   case.get("grad_layout", "contiguous"), fill)[0][1]
                    row = CallRow(case.name, _dtype_name(dtype), rnd, seed, "ok", False)
                    report.rows.append(row)
                    limit_s = timeout_s
                    call_deadline = min(time.monotonic() + timeout_s, deadline_total)
                    w.send(call, call_deadline)
                    msg = w.recv(call_deadline)
                    if msg.get("kind") == "ended":
                        row.status = "exit"
                        _exit_finding(report, where, msg.get("exitcode", 0), _log_tail(cand_dir))
                        row.classes.append(report.findings[-1].cls)
                        clean = True
                        return report
                    if msg.get("kind") != "result" or msg.get("seq") != len(report.rows):
                        raise _Malformed(f"a {msg.get('kind')!r} message (seq {msg.get('seq')!r}) where the result "
                                         f"of call {len(report.rows)} was due")
                    row.status = str(msg.get("status"))
                    if row.status == "exit":  # the candidate's process ends by itself
                        report.add("exit", where, str(msg.get("message", "")))
                        row.classes.append("exit")
                        clean = w.recv(min(time.monotonic() + timeout_s, deadline_total)).get("kind") == "ended"
                        return report
                    try:
                        _judge_call(spec, case, dtype, row, msg, expected, refs, pristine, history[k], report,
                                    self.device)
                        if "grad" in call and row.status == "ok" and msg.get("grad_status"):
                            _judge_gradients(spec, case, dtype, row, msg, grad_expected, grad_refs, backward, report,
                                             where)
                        elif "grad" in call and row.status == "ok" and not row.classes:
                            raise _Malformed("no gradient status for a call that asked for gradients")
                    except Exception as e:  # noqa: BLE001 (whatever came back, the judge itself goes on)
                        raise _Malformed(f"a result the judge could not check ({type(e).__name__}: {e})"[:300]) from e
                    row.passed = not row.classes
                    if profiling:
                        checked_kernels[k] = msg.get("kernels")
                    if row.passed:
                        passed_once.add(k)
                    elif k in passed_once and {"wrong_result", "nan"} & set(row.classes) \
                            and "cached" not in row.classes:
                        report.add("stateful", where, f"right on an earlier call, wrong on call {len(report.rows)}")
                        row.classes.append("stateful")
            for case, dtype in timed_keys:
                where = f"{case.name}[{_dtype_name(dtype)}] (timed)"
                limit_s = timeout_s * (reps + TIMED_WARMUP_CALLS)  # (a round: warm-up and reps calls)
                ended = self._time(w, spec, case, dtype, reps, report, passed_once, history, keys,
                                   min(time.monotonic() + limit_s, deadline_total), cand_dir, baselines or {},
                                   checked_kernels)
                if ended == "exit":  # the candidate's process ends by itself
                    clean = w.recv(min(time.monotonic() + timeout_s, deadline_total)).get("kind") == "ended"
                if ended:
                    clean = clean or ended == "ended"
                    return report
            w.send({"kind": "done"}, min(time.monotonic() + timeout_s, deadline_total))
            end = w.recv(min(time.monotonic() + timeout_s, deadline_total))
            if end.get("kind") != "ended":
                raise _Malformed(f"a {end.get('kind')!r} message where the end was due")
            if end.get("exitcode") != 0:
                _exit_finding(report, "after the last call", end.get("exitcode", 0), _log_tail(cand_dir))
            clean = True
        except _Timeout:
            over = time.monotonic() >= deadline_total
            timed = where.endswith("(timed)")
            report.add("hang", where, f"no answer within {total_timeout_s if over else limit_s:g} s"
                                      + (" (the whole evaluation's limit)" if over else
                                         " (the timed round's limit: the per-call limit per call)" if timed else
                                         " (the per-call limit)"))
            if report.rows and not timed:
                report.rows[-1].status = "hang"
        except _Closed:
            report.add("crash", where, "the worker process closed the result channel")
        except _Malformed as e:
            report.add("protocol", where, f"malformed message on the result channel: {e}")
        finally:
            if not clean:
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                self.close()
            report.elapsed_s = time.monotonic() - t0
        return report


    def _time(self, w: "_Worker", spec: OpSpec, case: Case, dtype: torch.dtype, reps: int, report: Report,
              passed_once: set, history: dict, keys, deadline: float, cand_dir: str, baselines: dict,
              checked_kernels: dict) -> str:
        """One timed round of (case, dtype): ``reps`` fresh input sets, each output judged as a
        checked call's, then the timing itself (``_judge_timing``). Returns "" to go on, else how
        the candidate's process ended ("ended": it exited; "exit": it is exiting)."""
        where = f"{case.name}[{_dtype_name(dtype)}]"
        sets, checks = [], []
        for _ in range(reps):
            seed = int.from_bytes(os.urandom(8), "big") >> 2
            inputs = spec.make_inputs(case, dtype, make_generator(seed, "cpu"), torch.device("cpu"))
            expected, refs = reference_outputs(spec, inputs.map(lambda t: _clone_layout(t.detach())), (), seed)
            sets.append((list(inputs.args), dict(inputs.kwargs)))
            checks.append((seed, expected, refs))
        seq = len(report.rows) + 1
        sent = time.monotonic()
        w.send({"kind": "time", "seq": seq, "sets": sets}, deadline)
        msg = w.recv(deadline)
        wall_ms = (time.monotonic() - sent) * 1e3
        if msg.get("kind") == "ended":
            _exit_finding(report, f"{where} (timed)", msg.get("exitcode", 0), _log_tail(cand_dir))
            return "ended"
        if msg.get("kind") != "timed" or msg.get("seq") != seq:
            raise _Malformed(f"a {msg.get('kind')!r} message (seq {msg.get('seq')!r}) where the timed round {seq} was due")
        status = str(msg.get("status"))
        if status != "ok":
            report.add("exit" if status == "exit" else "exception", f"{where} (timed)", str(msg.get("message", ""))[:500])
            return "exit" if status == "exit" else ""
        outs, types, devices = msg.get("outs") or [], msg.get("types") or [], msg.get("devices") or []
        if not all(isinstance(x, (list, tuple)) for x in (outs, types, devices)) \
                or not len(outs) == len(types) == len(devices) == reps:
            raise _Malformed(f"timed outputs, types and devices that are not {reps} each")
        k = next(i for i, key in enumerate(keys) if key == (case, dtype))
        for i, (seed, expected, refs) in enumerate(checks):
            row = CallRow(case.name, _dtype_name(dtype), -1, seed, "ok", False)
            report.rows.append(row)
            one = {"out": outs[i], "type": types[i], "device": devices[i] or "", "status": "ok"}
            try:
                _judge_call(spec, case, dtype, row, one, expected, refs, None, history[k], report, self.device)
            except Exception as e:  # noqa: BLE001
                raise _Malformed(f"a timed output the judge could not check ({type(e).__name__}: {e})"[:300]) from e
            row.passed = not row.classes
            if not row.passed and k in passed_once and {"wrong_result", "nan"} & set(row.classes) \
                    and "cached" not in row.classes:
                report.add("stateful", where, f"right on the checked calls, wrong on timed call {i + 1} of {reps}")
                row.classes.append("stateful")
        ceilings = _ceilings()  # (the judge's own work: outside the reading of the reply below)
        try:
            timing = _judge_timing(spec, case, dtype, msg, wall_ms, report, baselines.get((case.name, dtype), {}),
                                   checked_kernels.get(k), ceilings)
        except (KeyError, TypeError, ValueError, OverflowError, RuntimeError, AttributeError) as e:
            # (what a forged reply makes reading it raise: a tensor where a list was, an infinite count)
            raise _Malformed(f"timing figures the judge could not read ({type(e).__name__}: {e})"[:300]) from e
        report.timings.append(timing)
        return ""


def _judge_timing(spec: OpSpec, case: Case, dtype: torch.dtype, msg: dict, wall_ms: float, report: Report,
                  baselines: dict, checked_kernels=None, ceilings=_UNSET) -> dict:
    """The timing of one timed round, checked: the figures for the report, findings added.
    ``checked_kernels``: the kernel names a profiled checked call of the same case ran (None:
    not profiled)."""
    where = f"{case.name}[{_dtype_name(dtype)}]"
    times = [float(t) for t in msg["times_ms"]]
    idles = [float(t) for t in msg["idle_ms"]]
    base = float(msg["idle_baseline_ms"])
    first = float(msg["idle_baseline_first_ms"])
    if not times or len(idles) != len(times) or not all(math.isfinite(t) and t >= 0 for t in times + idles):
        raise ValueError(f"{len(times)} times, {len(idles)} idle times, not all finite and >= 0")
    if not (0 <= base <= IDLE_BASELINE_MAX_MS and 0 <= first <= IDLE_BASELINE_MAX_MS):  # (NaN fails too)
        raise ValueError(f"an idle baseline of {base} ms, {first} ms before the import (a synchronize takes "
                         "microseconds)")
    if base > IDLE_SPELL_MAX * first * (1 + 1e-9):
        raise ValueError(f"an idle baseline of {base} ms, more than {IDLE_SPELL_MAX:g}x the {first} ms measured "
                         "before the import (the worker caps it there)")
    summary = summarize(times, TIMED_METHOD)
    median = summary.median_ms
    late = statistics.median(i - t for t, i in zip(times, idles)) - base
    if any(msg.get("deferred") or ()):
        n = sum(bool(d) for d in msg["deferred"])
        report.add("deferred", where, f"the output changed after the call returned on {n} of {len(times)} timed calls "
                                      "(work still writing it, unordered with the caller's stream)")
    if late > max(SIDE_STREAM_MIN_MS, SIDE_STREAM_SHARE * median):
        report.add("side_stream", where, f"the device stayed busy {late:.4f} ms past the call's end event (median, "
                                         f"beyond the {base:.4f} ms of a call doing nothing) against {median:.4f} ms "
                                         "timed: work on another stream")
    tampered = [str(t) for t in msg.get("tampered") or ()]
    if tampered:
        report.add("timer", where, f"the candidate replaced {', '.join(tampered[:6])} in its process: the "
                                   "figures of its timed calls are not trusted")
    if sum(times) > wall_ms:
        report.add("timer", where, f"timed calls adding up to {sum(times):.3f} ms where the judge's clock saw "
                                   f"{wall_ms:.3f} ms for the whole round")
    held = [int(b) for b in msg.get("persisting_l2") or ()]
    if any(held):
        report.add("persisting_l2", where, f"{max(held)} bytes of L2 set aside for persisting lines on "
                                           f"{sum(b > 0 for b in held)} of {len(times)} timed calls (data pinned "
                                           "there outlives the L2 flush between calls; cleared before each)")
    kernels = _kernel_report(msg)
    # (compared where both profiles worked: a timed call that ran no kernel at all while the
    # checked one ran some is a switch too)
    if checked_kernels is not None and (kernels["kernels"] or not kernels["kernel_note"]) \
            and (kernels["kernels"] or checked_kernels):
        checked = {str(n)[:200] for n in list(checked_kernels)[:1024]}  # (as _kernel_report cuts them)
        # (names the timer's own flush and sleep share are left out of the timed call's list: of
        # the checked call's too)
        checked -= {str(n)[:200] for n in list(msg.get("timer_kernels") or ())[:64]}
        timed = {k for k, _ in kernels["kernels"]}
        new = sorted(timed - checked)
        gone = sorted(checked - timed) if len(kernels["kernels"]) < KERNELS_KEPT else []  # (a cut list: not all seen)
        if new or gone:
            said = "; ".join([f"timed only: {n[:80]}" for n in new[:3]] + [f"checked only: {n[:80]}" for n in gone[:3]])
            report.add("kernel_switch", where, f"the profiled timed call and the profiled checked call of the case ran "
                                               f"different kernels ({said}): what was timed is not what was checked")
    entry = dict(case=case.name, dtype=_dtype_name(dtype), reps=summary.reps, median_ms=median,
                 p20_ms=summary.p20_ms, p80_ms=summary.p80_ms, idle_late_ms=late, roof_pct=float("nan"),
                 baselines=dict(baselines), method=summary.method, persisting_l2_bytes=max(held, default=0), **kernels)
    if ceilings is _UNSET:
        ceilings = _ceilings()
    if ceilings is not None:
        p = place(spec.cost(case, dtype), median, ceilings, dtype, matrix=spec.matrix)
        entry.update(roof_pct=p.roof_pct, gbps=p.gbps, tflops=p.tflops)
        if p.implausible:
            report.add("implausible", where, f"{median:.4f} ms is faster than the measured roofs allow "
                                             f"({p.gbps:.0f} GB/s against {p.roof_gbps:.0f}, {p.tflops:.1f} TFLOP/s "
                                             f"against {p.roof_tflops:.1f}); not reported as a speed")
    return entry


def _kernel_report(msg: dict) -> dict:
    """What ran on the device in one profiled call (information, not a verdict): the kernels and
    their microseconds, the candidate's own Triton kernels among them and their share of the
    time (0 for a candidate that calls library code, such as torch's own op)."""
    kernels = [[str(k[0])[:200], float(k[1])] for k in (msg.get("kernels") or ())[:KERNELS_KEPT]
               if isinstance(k, (list, tuple)) and len(k) == 2 and isinstance(k[1], (int, float))
               and math.isfinite(k[1]) and k[1] >= 0]
    own_names = {str(n) for n in (msg.get("own_kernels") or ())[:256]}
    total = sum(us for _, us in kernels)
    own = [k for k, _ in kernels if k in own_names]
    share = sum(us for k, us in kernels if k in own_names) / total if total > 0 else float("nan")
    return dict(kernels=kernels, own_kernels=own, own_kernel_share=share,
                kernel_note=str(msg.get("kernel_note") or "")[:300])


TIMED_METHOD = ("CUDA events per call in the candidate's process, cold L2 (2x L2 overwritten before each call), a "
                "device-side sleep hiding the launch, fresh inputs per call, warm-up 25 ms")


def _ceilings():
    """This GPU's measured ceilings (``roofkit device --measure``'s cache, measured if missing)."""
    from .device import load_ceilings

    return load_ceilings()


def _baselines(spec: OpSpec, keys, device: torch.device) -> dict:
    """(case name, dtype) -> {provider: median ms} for ``BASELINES``, timed in this process by
    ``bench_case`` (bench's method: the numbers ``roofkit bench`` reports)."""
    from .bench import bench_case

    out = {}
    ceilings = _ceilings()
    for case, dtype in keys:
        records = bench_case(spec, case, dtype, ceilings, providers=list(BASELINES), device=device)
        out[(case.name, dtype)] = {r.provider: r.median_ms for r in records if r.status == "ok" and r.median_ms}
    return out


# ----------------------------------------------------------------------------- API


def evaluate_many(
    paths: Sequence[str | os.PathLike],
    op: str,
    cases: Iterable[str] | None = None,
    quick: bool = False,
    seeds: int = 2,
    timeout_s: float = CALL_TIMEOUT_S,
    total_timeout_s: float = TOTAL_TIMEOUT_S,
    dtypes: Iterable[torch.dtype] | None = None,
    hidden: int = HIDDEN_CASES,
    backward: bool = False,
    device: str | torch.device | None = None,
    timing: bool | None = None,
    reps: int = TIMED_REPS,
    baselines: bool = True,
) -> list[Report]:
    """:func:`evaluate` each candidate in turn; one worker process (started once, and again after
    a candidate that broke it) forks a fresh process for each candidate. Candidates that may
    interfere with each other through processes they leave behind belong in separate calls; the
    hidden shapes are drawn once per call, for every candidate alike."""
    spec = _spec(op)
    keys = _plan(spec, cases, dtypes, quick)
    if seeds < 1:
        raise EvaluationError("seeds must be at least 1")
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 0:
        raise EvaluationError(f"hidden must be an integer >= 0, got {hidden!r}")
    dev = _device(device)
    if timing is not None and not isinstance(timing, bool):
        raise EvaluationError(f"timing must be True, False or None, got {timing!r}")
    timing = dev.type == "cuda" if timing is None else timing
    if timing and dev.type != "cuda":
        raise EvaluationError("timing needs a CUDA device (device='cuda')")
    if timing and (isinstance(reps, bool) or not isinstance(reps, int) or reps < 1):
        raise EvaluationError(f"reps must be an integer >= 1, got {reps!r}")
    timed_keys = list(keys) if timing else []
    keys = keys + _hidden(spec, keys, hidden, random.SystemRandom())
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.is_file():
            raise EvaluationError(f"no candidate file {str(p)!r}")
    times = _baselines(spec, timed_keys, dev) if timing and baselines else {}
    root = tempfile.mkdtemp(prefix="roofkit-eval-")
    judge = _Judge(root, dev)
    try:
        return [judge.run(p.resolve(), spec, keys, seeds, timeout_s, total_timeout_s, backward, timed_keys, reps, times)
                for p in paths]
    finally:
        judge.close()
        shutil.rmtree(root, ignore_errors=True)


def evaluate(
    path: str | os.PathLike,
    op: str,
    cases: Iterable[str] | None = None,
    quick: bool = False,
    seeds: int = 2,
    timeout_s: float = CALL_TIMEOUT_S,
    total_timeout_s: float = TOTAL_TIMEOUT_S,
    dtypes: Iterable[torch.dtype] | None = None,
    hidden: int = HIDDEN_CASES,
    backward: bool = False,
    device: str | torch.device | None = None,
    timing: bool | None = None,
    reps: int = TIMED_REPS,
    baselines: bool = True,
) -> Report:
    """Judge the function named ``op`` in the file ``path`` against the op's float64 reference.

    Args:
        path: a Python file defining a function named like the op, with its public signature.
        op: a registered op name (``roofkit list``).
        cases: case names of the op (default: every case that runs on the CPU).
        quick: only the cases tagged quick (a few first cases if none is).
        seeds: calls per (case, dtype), each on fresh inputs from ``os.urandom``; rounds interleave.
        timeout_s: limit of one call (and, plus START_TIMEOUT_S, of the start and the import).
        total_timeout_s: limit of the whole evaluation.
        dtypes: only these dtypes (default: the spec's, narrowed per case).
        hidden: how many shapes no case of the op has (drawn afresh from the evaluated cases'
            shapes, from the OS's randomness) are judged beside them, at random positions.
        backward: require the op's backward: a candidate whose output carries no autograd graph
            is rejected (``no_gradient``). Without it such a candidate is judged on its forward
            only; one whose output carries a graph has its gradients judged either way.
        device: where the candidate runs ("cpu": through the Triton interpreter; default "cuda"
            where a GPU is present); inputs, references and verdicts stay on the CPU here.
        timing: add a timed round per evaluated case (GPU only; default on a GPU).
        reps: timed calls per case, each on fresh inputs, each output judged.
        baselines: also time roofkit's kernel, torch and torch.compile on each timed case here
            (``bench_case``), for the report's comparison.
    Returns:
        Report; ``accepted`` only if every call passed and nothing was found.
    Raises:
        EvaluationError: unknown op or case, no such file, no dtype left. An import error or a
            missing function is ``Report.error`` (the candidate could not be run).
    """
    return evaluate_many([path], op, cases=cases, quick=quick, seeds=seeds, timeout_s=timeout_s,
                         total_timeout_s=total_timeout_s, dtypes=dtypes, hidden=hidden, backward=backward,
                         device=device, timing=timing, reps=reps, baselines=baselines)[0]


def _device(device) -> torch.device:
    """The evaluation's device, made concrete ("cuda" -> "cuda:<current>")."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise EvaluationError(f"unknown device {device!r}") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise EvaluationError("device 'cuda' asked for, but no CUDA device is available")
        if dev.index is not None and not 0 <= dev.index < torch.cuda.device_count():
            raise EvaluationError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
    if dev.type != "cpu":
        raise EvaluationError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return torch.device("cpu")


def _spec(op: str) -> OpSpec:
    try:
        return registry.get(op)
    except KeyError as e:
        raise EvaluationError(str(e.args[0])) from None
