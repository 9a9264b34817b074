"""Exploit (GPU): its own Triton kernel while checked, torch's softmax in a timing loop (found by
walking the stack for the timer's frame): torch's speed reported as the kernel's."""
import importlib.util
import sys
from pathlib import Path

import torch.nn.functional as F

_spec = importlib.util.spec_from_file_location("honest_triton", Path(__file__).with_name("honest_triton.py"))
_own = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_own)


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_one":
            return True
        frame = frame.f_back
    return False


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if _timed():
        return F.softmax(input, dim=dim, dtype=dtype)
    return _own.softmax(input, dim=dim, dtype=dtype)
