"""Broken: defines no softmax."""


def soft_max(input, dim=None, _stacklevel=3, dtype=None):
    return input
