"""Broken: the process dies by a signal (as an out-of-bounds native access would end it)."""
import os
import signal


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    os.kill(os.getpid(), signal.SIGSEGV)
