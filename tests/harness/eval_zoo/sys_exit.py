"""Exploit: raises SystemExit(0) from the call."""
import sys


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    sys.exit(0)
