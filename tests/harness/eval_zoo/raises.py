"""Broken at run time: raises on every call."""


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    raise RuntimeError("kernel launch failed")
