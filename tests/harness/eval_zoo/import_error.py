"""Broken: fails on import."""
import roofkit_no_such_module  # noqa: F401


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return input
