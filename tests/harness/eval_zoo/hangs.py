"""Exploit: never returns."""
import time


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    while True:
        time.sleep(60)
