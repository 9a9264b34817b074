"""roofkit's kernels: the public functions. Their specs (references, costs, cases) are in each
module's ``SPECS``, which :mod:`roofkit.harness.registry` reads (this package never imports it)."""

from .attention import flash_attention, scaled_dot_product_attention
from .compact import compact, masked_select
from .cross_entropy import cross_entropy
from .embedding_bag import embedding_bag
from .glu import geglu, swiglu
from .layer_norm import layer_norm
from .linear_cross_entropy import linear_cross_entropy
from .matmul import linear, matmul
from .quant import dequantize, int8_matmul, quantize, scaled_mm
from .reduce import amax, mean, sum  # noqa: A004 (roofkit.sum mirrors torch.sum)
from .rms_norm import add_rms_norm, rms_norm
from .rope import rope
from .scatter import index_add, scatter_add
from .softmax import log_softmax, softmax
from .transpose import transpose

__all__ = ["softmax", "log_softmax", "rms_norm", "layer_norm", "cross_entropy", "sum", "mean", "amax", "transpose", "embedding_bag", "scatter_add",
           "index_add", "masked_select", "compact", "matmul", "linear",
           "quantize", "dequantize", "int8_matmul", "scaled_mm", "scaled_dot_product_attention", "flash_attention",
           "swiglu", "geglu", "add_rms_norm", "rope", "linear_cross_entropy"]
