"""roofkit: verified Triton kernels for PyTorch, each placed on the roofline of its GPU.

Public ops mirror torch / torch.nn.functional: softmax, log_softmax, rms_norm, layer_norm,
cross_entropy, sum, mean, amax, transpose, embedding_bag, scatter_add, index_add, masked_select
and compact (its (values, count) form without a host sync); matmul and linear (GEMMs with a
fused epilogue); quantize, dequantize, int8_matmul and scaled_mm (fp8);
scaled_dot_product_attention and flash_attention (exact attention); swiglu and geglu (the gated
products of LLM MLPs), add_rms_norm (the residual add fused into the norm), rope (rotary
position embedding of q and k in one launch), linear_cross_entropy (the vocabulary projection and
its loss without the full logits).
Modules for models: :mod:`roofkit.nn`; AdamW with its update in one kernel pass per parameter:
:class:`roofkit.optim.AdamW`; the ops' tunables read and overridden: :mod:`roofkit.config`; a
transformers model patched in one line:
``roofkit.patch(model)`` (:mod:`roofkit.integration`).
The proof harness lives in :mod:`roofkit.harness`; the command line in :mod:`roofkit.cli`.

The ops are imported on first use, so a program (or the CLI) can set TRITON_INTERPRET=1 after
``import roofkit`` and before the kernels are defined.
"""

__version__ = "0.1.0"
_OPS = ("softmax", "log_softmax", "rms_norm", "layer_norm", "cross_entropy", "sum", "mean", "amax", "transpose", "embedding_bag", "scatter_add",
        "index_add", "masked_select", "compact", "matmul", "linear",
        "quantize", "dequantize", "int8_matmul", "scaled_mm", "scaled_dot_product_attention", "flash_attention",
        "swiglu", "geglu", "add_rms_norm", "rope", "linear_cross_entropy")
__all__ = [*_OPS, "patch", "__version__"]


def __getattr__(name):
    if name in ("nn", "optim", "config"):  # roofkit.nn, .optim, .config: imported on first use, as the ops are
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name == "patch":  # roofkit.integration.patch (transformers models)
        from .integration import patch

        globals()["patch"] = patch
        return patch
    if name in _OPS:
        from . import ops

        value = globals()[name] = getattr(ops, name)  # later lookups skip this function
        return value
    raise AttributeError(f"module 'roofkit' has no attribute {name!r}")
