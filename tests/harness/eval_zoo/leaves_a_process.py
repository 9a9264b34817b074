"""Correct, but leaves a detached process behind (double fork + setsid), which could take over a
later evaluation's channel: it must not outlive the candidate. It writes a heartbeat (the time)
to _PIDFILE every 0.1 s for the test to check (a pid would not do: the candidate may run in a PID
namespace of its own)."""
import os
import time

import torch.nn.functional as F

_PIDFILE = "/tmp/roofkit-eval-zoo-orphan.pid"

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(1200):
            with open(_PIDFILE + ".tmp", "w") as f:
                f.write(repr(time.time()))
            os.replace(_PIDFILE + ".tmp", _PIDFILE)
            time.sleep(0.1)
    os._exit(0)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return F.softmax(input, dim=dim, dtype=dtype)
