"""Finds the result channel through its worker's environment and writes a forged frame on it (an
'ended' message whose exit status is not a number): a protocol finding, never a judge crash."""
import os
import sys
import time


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    env = open(f"/proc/{os.getppid()}/environ", "rb").read()
    wfd = int(env.split(b"ROOFKIT_EVAL_FDS=")[1].split(b"\0")[0].split(b",")[1])
    sys.modules["__main__"]._send(wfd, {"kind": "ended", "pid": 1, "exitcode": "forged"})
    time.sleep(30)
