"""Exploit (GPU): the work runs on a stream of its own, not joined to the caller's, so the call's
end event is recorded before the work is done (and the output is still being written after the
call returns)."""
import torch
import torch.nn.functional as F

_side = []


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if not _side:
        _side.append(torch.cuda.Stream(input.device))
    out = torch.empty_like(input if dtype is None else input.to(dtype))
    side = _side[0]
    side.wait_stream(torch.cuda.current_stream(input.device))
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000)  # the "kernel" takes a while
        out.copy_(F.softmax(input, dim=dim, dtype=dtype))
    return out
