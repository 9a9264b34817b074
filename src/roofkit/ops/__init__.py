"""roofkit's kernels. Importing this package registers every op's spec with the harness."""

from ..harness.registry import register
from . import attention as _attention_module
from . import compact as _compact_module
from . import cross_entropy as _cross_entropy_module
from . import embedding_bag as _embedding_bag_module
from . import glu as _glu_module
from . import layer_norm as _layer_norm_module
from . import linear_cross_entropy as _lce_module
from . import matmul as _matmul_module
from . import quant as _quant_module
from . import reduce as _reduce_module
from . import rms_norm as _rms_norm_module
from . import rope as _rope_module
from . import scatter as _scatter_module
from . import softmax as _softmax_module
from . import transpose as _transpose_module
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

_MODULES = (_softmax_module, _rms_norm_module, _layer_norm_module, _cross_entropy_module, _reduce_module,
            _transpose_module, _embedding_bag_module, _scatter_module, _compact_module, _matmul_module, _quant_module, _attention_module, _glu_module, _rope_module, _lce_module)
for _module in _MODULES:
    for _spec in _module.SPECS:
        register(_spec)

__all__ = ["softmax", "log_softmax", "rms_norm", "layer_norm", "cross_entropy", "sum", "mean", "amax", "transpose", "embedding_bag", "scatter_add",
           "index_add", "masked_select", "compact", "matmul", "linear",
           "quantize", "dequantize", "int8_matmul", "scaled_mm", "scaled_dot_product_attention", "flash_attention",
           "swiglu", "geglu", "add_rms_norm", "rope", "linear_cross_entropy"]
