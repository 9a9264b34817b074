"""Correct, but leaves a detached process behind (double fork + setsid), which could take over a
later evaluation's channel: it must not outlive the candidate. It writes its pid to _PIDFILE for
the test to check."""
import os
import time

import torch.nn.functional as F

_PIDFILE = "/tmp/roofkit-eval-zoo-orphan.pid"

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(_PIDFILE, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    os._exit(0)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return F.softmax(input, dim=dim, dtype=dtype)
