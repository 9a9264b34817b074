"""roofkit: verified Triton kernels for PyTorch, each placed on the roofline of its GPU.

Public ops mirror torch.nn.functional: :func:`softmax`, :func:`log_softmax`, :func:`rms_norm`.
The proof harness lives in :mod:`roofkit.harness`; the command line in :mod:`roofkit.cli`.
"""

from .ops import log_softmax, rms_norm, softmax

__version__ = "0.1.0"
__all__ = ["softmax", "log_softmax", "rms_norm", "__version__"]
