"""roofkit's kernels. Importing this package registers every op's spec with the harness."""

from ..harness.registry import register
from . import rms_norm as _rms_norm_module
from . import softmax as _softmax_module
from .rms_norm import rms_norm
from .softmax import log_softmax, softmax

for _module in (_softmax_module, _rms_norm_module):
    for _spec in _module.SPECS:
        register(_spec)

__all__ = ["softmax", "log_softmax", "rms_norm"]
