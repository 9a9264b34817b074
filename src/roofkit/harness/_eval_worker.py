"""The process that runs candidates for ``roofkit eval`` (started by ``harness.evaluate``; never
imported by the judge itself).

It imports torch once, then forks one process per candidate. That process writes a ``hello``
(its pid) before any candidate code runs, points its stdout/stderr at ``candidate.log`` in its own
directory and stdin at /dev/null, imports the candidate file and answers one ``call`` message at a
time with the output and the inputs as they are after the call. When it ends, this process
reports its exit status (``ended``), so an ``os._exit`` or a crash in a candidate is told apart
from a hang. Messages travel as length-prefixed ``torch.save`` bytes over two inherited pipe
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


def _run_candidate(rfd: int, wfd: int, msg: dict) -> int:
    import importlib.util

    import torch

    from roofkit.harness.verify import poisoned_allocations

    os.chdir(msg["dir"])
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

    while True:
        msg = _recv(rfd)
        if msg is None or msg["kind"] != "call":
            return 0
        args, kwargs = list(msg["args"]), msg["kwargs"]
        grad_pos = msg.get("grad") or []
        # Arguments whose gradients are judged: each a leaf that requires grad seen through one
        # autograd step (so a candidate may still write into it, and be caught doing so).
        leaves = [args[i].detach().requires_grad_(True) for i in grad_pos]
        for i, leaf in zip(grad_pos, leaves):
            args[i] = leaf * 1
        reply = {"kind": "result", "seq": msg["seq"], "status": "ok", "type": "", "out": None, "message": "",
                 "grad_status": "", "grads": []}
        try:
            with poisoned_allocations():
                out = fn(*args, **kwargs)
            reply["type"] = f"{type(out).__module__}.{type(out).__qualname__}"
            if isinstance(out, torch.Tensor):
                reply["out"] = _plain(out)
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
                        reply["grads"] = [None if g is None else _plain(g) for g in grads]
                        reply["grad_status"] = "ok"
                    except Exception as e:  # noqa: BLE001 (SystemExit and the like pass as they are)
                        reply.update(grad_status="exception", grad_message=_describe(e))
        except SystemExit as e:
            reply.update(status="exit", message=f"sys.exit({e.code!r})")
        except BaseException as e:  # noqa: BLE001 (whatever the candidate raises is reported)
            reply.update(status="exception", message=_describe(e))
        try:
            reply["args"] = [_plain(a) if isinstance(a, torch.Tensor) else None for a in args]
            reply["kwargs"] = {k: _plain(v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
            _send(wfd, reply)
        except BaseException as e:  # noqa: BLE001 (a candidate's output may break serialization)
            _send(wfd, {"kind": "result", "seq": reply["seq"], "status": "exception", "type": "", "out": None,
                        "message": "the output could not be sent: " + _describe(e), "args": [], "kwargs": {}})
        if reply["status"] == "exit":
            return 0


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
