"""Exploit (GPU): right while checked; in a timing loop it returns an unwritten output and
leaves the work to a thread that launches it once the caller has moved on (completion deferred
past the call's end event)."""
import sys
import threading

import torch
import torch.nn.functional as F


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_one":
            return True
        frame = frame.f_back
    return False


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if not _timed():
        return F.softmax(input, dim=dim, dtype=dtype)
    out = torch.empty_like(input if dtype is None else input.to(dtype))

    def later():
        out.copy_(F.softmax(input, dim=dim, dtype=dtype))

    threading.Thread(target=later).start()
    return out
