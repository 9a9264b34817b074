"""roofkit inside a transformers model in one line: ``roofkit.patch(model)``.

For the causal-LM models of the Llama, Mistral, Qwen2, Qwen3 and Gemma families (transformers
>= 5), in place:

- **rms_norm**: every RMSNorm module (the decoder's, the final one, Qwen3's per-head q / k norms)
  through :func:`roofkit.rms_norm` (Gemma's ``1 + weight`` form included);
- **mlp**: the gated MLP's product through :func:`roofkit.swiglu` (``hidden_act`` silu) or
  :func:`roofkit.geglu` (gelu, gelu_pytorch_tanh); the projections stay torch's. When a
  gradient is wanted (and ``down_proj`` is a plain, unhooked ``nn.Linear`` in the activations'
  dtype, outside autocast), the product and ``down_proj`` go through
  :func:`roofkit.ops.glu.glu_linear`, which does not save the (tokens x intermediate) product:
  the backward makes it again;
- **rope**: the attention modules' call of ``apply_rotary_pos_emb`` through :func:`roofkit.rope`
  (their forward, unchanged, runs with that one name bound to roofkit's: the transformers module
  itself, and every other model of the family, keep theirs);
- **attention**: ``roofkit`` registered in transformers' attention-function and attention-mask
  registries (the mask function is SDPA's: None where ``is_causal`` covers it, also while
  torch.compile traces, else a boolean 4-D mask for padding and sliding windows), and the model
  switched to it: attention through
  :func:`roofkit.scaled_dot_product_attention`, exactly torch's semantics; packed sequences (and
  every training batch while torch.compile traces, where transformers cannot tell) reach it as
  the sequences' ids, through :func:`roofkit.flash_attention`'s ``segment_ids``, instead of a
  4-D mask (the model's forward runs with ``create_causal_mask`` bound to roofkit's, which
  calls transformers' for every other case);
- **loss**: in training with ``labels``, the vocabulary projection and its cross-entropy through
  :func:`roofkit.linear_cross_entropy` (the (tokens x vocabulary) logits are never made; the
  output's ``logits`` is None, as other fused-loss integrations return it). Evaluation, or no
  labels, runs the model's own forward.

Modules are patched by switching their class to a subclass whose ``forward`` calls roofkit
(parameters, buffers, state-dict keys and ``isinstance`` unchanged; a module with a forward of its
own, as hooks install, is left and reported). What was replaced is kept in ``model.roofkit_patch``
(a :class:`Summary`), and printed with ``verbose=True``. Limits: save a patched model with
``state_dict`` / ``save_pretrained`` (its generated classes do not pickle: ``torch.save(model)``
fails); the attention switch is made on the model's config, which transformers shares with any
model built from the same config object; Gemma's ``1 + weight`` is rounded to the activations'
dtype before the norm (16-bit models: up to twice transformers' rounding error there). Under
autocast, attention runs in the autocast dtype, as torch's SDPA does.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import sys
import types

import torch
import torch.nn.functional as F

import roofkit
from roofkit.nn import gated_mlp_forward

__all__ = ["patch", "Summary", "FAMILIES"]

# config.model_type -> the transformers module that defines the family
FAMILIES = {
    "llama": "transformers.models.llama.modeling_llama",
    "mistral": "transformers.models.mistral.modeling_mistral",
    "qwen2": "transformers.models.qwen2.modeling_qwen2",
    "qwen3": "transformers.models.qwen3.modeling_qwen3",
    "gemma": "transformers.models.gemma.modeling_gemma",
}
_GLU = {"silu": ("swiglu", None), "swish": ("swiglu", None), "gelu": ("geglu", "none"),
        "gelu_pytorch_tanh": ("geglu", "tanh"), "gelu_new": ("geglu", "tanh")}
ATTENTION = "roofkit"


@dataclasses.dataclass
class Summary:
    """What :func:`patch` replaced (module counts by kind) and what it left, with the reason."""

    family: str
    replaced: dict = dataclasses.field(default_factory=dict)
    left: dict = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        done = ", ".join(f"{k} ({v})" for k, v in self.replaced.items()) or "nothing"
        lines = [f"roofkit.patch ({self.family}): replaced {done}"]
        lines += [f"  left {k}: {why}" for k, why in self.left.items()]
        return "\n".join(lines)


# ----------------------------------------------------------------------------- replacements


def _rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    w = self.weight
    if w.dtype != hidden_states.dtype:  # an fp32 weight on 16-bit activations: the model's own forward
        return super(type(self), self).forward(hidden_states)
    eps = getattr(self, "variance_epsilon", None)
    return roofkit.rms_norm(hidden_states, (w.shape[-1],), w, self.eps if eps is None else eps)


def _gemma_rms_norm_forward(self, x: torch.Tensor) -> torch.Tensor:
    # Gemma scales by (1 + weight) (in float32, then rounded once with the output): the factor is
    # rounded to the activations' dtype first here, one more rounding for 16-bit weights.
    return roofkit.rms_norm(x, (self.weight.shape[-1],), (1.0 + self.weight.float()).to(x.dtype), self.eps)


def _swiglu_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    return gated_mlp_forward(self, x, "silu", roofkit.swiglu)


def _geglu_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    approximate = self._roofkit_approximate
    return gated_mlp_forward(self, x, "gelu_tanh" if approximate == "tanh" else "gelu",
                    lambda g, u: roofkit.geglu(g, u, approximate=approximate))


def _rope(q, k, cos, sin, unsqueeze_dim=1):
    return roofkit.rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention-function signature (query (B, H, S, D); returns (B, S, H, D), None),
    with the decisions of its SDPA integration: causal only without a mask and with more than
    one query, keys cropped to the queries for a causal call on an empty cache."""
    if dropout:
        raise NotImplementedError("roofkit.patch: attention dropout is not supported (the model is in training mode "
                                  "with attention_dropout > 0); patch with attention=False")
    if query.device.type in ("cuda", "cpu") and torch.is_autocast_enabled(query.device.type):
        # torch's SDPA runs in the autocast dtype (rope's float32 tables promote q and k; a cache
        # may hold float32 values): so does this
        dtype = torch.get_autocast_dtype(query.device.type)
        query, key, value = (t.to(dtype) for t in (query, key, value))
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if _is_segment_ids(attention_mask):  # packed sequences (``_create_causal_mask``): causal within each
        # (ids below S: int16 ones go to the kernels as they are, others are relabeled first)
        ids = attention_mask.to(torch.int16) if attention_mask.shape[-1] < 2**15 else attention_mask
        out = roofkit.flash_attention(query, key, value, causal=bool(causal), scale=scaling, segment_ids=ids)
        return out.transpose(1, 2).contiguous(), None
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    if causal and key.shape[2] > query.shape[2]:
        key, value = key[:, :, :query.shape[2]], value[:, :, :query.shape[2]]
    out = roofkit.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, is_causal=causal,
                                               scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def _cache_argument(forward) -> str:
    """The name ``forward`` takes the KV cache by: transformers renames ``past_key_values`` to
    ``cache`` (and warns when a caller still uses the old name). Asked at patch time: the patched
    forward reads the answer as a string attribute (torch.compile traces no signature)."""
    try:
        return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        return "past_key_values"


def _causal_lm_forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                       inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0, **kwargs):
    # (only the arguments given are passed on: transformers renames and deprecates some)
    given = {k: v for k, v in dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                   inputs_embeds=inputs_embeds, use_cache=use_cache).items() if v is not None}
    head = self.lm_head
    if (labels is None or not self.training or type(head) is not torch.nn.Linear or head.bias is not None
            or head._forward_hooks or head._forward_pre_hooks):
        # (a wrapped or hooked head, e.g. an adapter, runs as the model runs it)
        if past_key_values is not None:
            given[self._roofkit_cache_names[0]] = past_key_values
        return super(type(self), self).forward(**given, labels=labels, logits_to_keep=logits_to_keep, **kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    num_items = kwargs.pop("num_items_in_batch", None)
    ignore_index = kwargs.pop("ignore_index", -100)
    shift_labels = kwargs.pop("shift_labels", None)
    return_dict = kwargs.pop("return_dict", None)
    if past_key_values is not None:
        given[self._roofkit_cache_names[1]] = past_key_values
    outputs = self.model(**given, return_dict=True, **kwargs)
    hidden = outputs.last_hidden_state
    # transformers' causal-LM loss: labels shifted left, the last position ignored (or the
    # shifted labels given, as context-parallel training passes them)
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    target = shift_labels.to(hidden.device).reshape(-1)
    loss = roofkit.linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), head.weight, target,
                                        reduction="mean" if num_items is None else "sum", ignore_index=ignore_index)
    if num_items is not None:
        loss = loss / (num_items.to(loss.device) if isinstance(num_items, torch.Tensor) else num_items)
    # (the cache's field is "cache" in newer transformers, "past_key_values" before)
    field = "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"
    cache = next((outputs[k] for k in ("cache", "past_key_values") if k in outputs), None)
    out = CausalLMOutputWithPast(loss=loss, logits=None, hidden_states=outputs.hidden_states,
                                 attentions=outputs.attentions, **{field: cache})
    return out if return_dict is not False else out.to_tuple()


# ----------------------------------------------------------------------------- patching

_SUBCLASSES: dict = {}
_REBOUND: dict = {}


def _with_globals(forward, module_dict: dict, names: dict):
    """``forward`` (a module's, defined in the module whose globals are ``module_dict``) with the
    globals ``names`` (name -> object) bound to roofkit's, decorators kept (each wrapper copied
    with its closure pointing at the rebound function it wraps); None if that cannot be done (a
    function from another module, or a wrapper that does not hold what it wraps in its closure)."""
    key = (forward, tuple(names.items()))
    if key in _REBOUND:
        return _REBOUND[key]
    inner = getattr(forward, "__wrapped__", None)
    if inner is None:
        if getattr(forward, "__globals__", None) is not module_dict:
            return None
        new = types.FunctionType(forward.__code__, _module_with(module_dict, names), forward.__name__,
                                 forward.__defaults__, forward.__closure__)
    else:
        new_inner = _with_globals(inner, module_dict, names)
        cells = getattr(forward, "__closure__", None) or ()
        hits = [i for i, c in enumerate(cells) if _cell_holds(c, inner)]
        if new_inner is None or len(hits) != 1:
            return None
        cells = tuple(types.CellType(new_inner) if i == hits[0] else c for i, c in enumerate(cells))
        new = types.FunctionType(forward.__code__, forward.__globals__, forward.__name__, forward.__defaults__, cells)
        new.__dict__.update(forward.__dict__)
        new.__wrapped__ = new_inner
    new.__kwdefaults__, new.__qualname__, new.__doc__ = forward.__kwdefaults__, forward.__qualname__, forward.__doc__
    _REBOUND[key] = new
    return new


_MODULES: dict = {}


def _module_with(module_dict: dict, names: dict) -> dict:
    """The globals of a module made for the rebound functions: ``module_dict``'s, with ``names``
    bound to roofkit's, under a name of its own in ``sys.modules`` (torch.compile reaches a
    function's globals through the module its ``__name__`` names: so it guards what the function
    really reads, not the transformers module's objects of the same names)."""
    key = (module_dict["__name__"], tuple(names.items()))
    if key not in _MODULES:
        bound = "_".join(f"{k}_{getattr(v, '__name__', id(v))}" for k, v in names.items())
        name = f"roofkit_patched_{module_dict['__name__'].replace('.', '_')}_{bound}"
        module = types.ModuleType(name)
        vars(module).update({**module_dict, **names, "__name__": name})
        sys.modules[name] = module
        _MODULES[key] = vars(module)
    return _MODULES[key]


def _cell_holds(cell, obj) -> bool:
    try:
        return cell.cell_contents is obj
    except ValueError:  # an empty cell
        return False


def _swap(module: torch.nn.Module, forward, **attrs) -> bool:
    """Give ``module`` a roofkit subclass of its class whose forward is ``forward``; False (and
    nothing changed) when the module has a forward of its own (an instance attribute, as
    accelerate's hooks set), which a class's forward would not replace."""
    if "forward" in vars(module):
        return False
    base = type(module)
    if getattr(base, "_roofkit_forward", None) is forward:
        return True
    key = (base, forward)
    if key not in _SUBCLASSES:
        _SUBCLASSES[key] = type(f"Roofkit{base.__name__}", (base,),
                                {"forward": forward, "_roofkit_forward": forward, "__module__": __name__})
    module.__class__ = _SUBCLASSES[key]
    _keep_output_capture(base, module.__class__)
    for k, v in attrs.items():
        setattr(module, k, v)
    return True


def _keep_output_capture(base: type, cls: type) -> None:
    """transformers records hidden states and attentions (``output_hidden_states=True``) for the
    classes its models register by name when they are built (a private registry, keyed by
    ``str(cls)`` in 5.x): a roofkit subclass gets its base's entry, or it would return None."""
    try:
        from transformers.utils import output_capturing
    except ImportError:
        return
    registry = getattr(output_capturing, "_CAN_RECORD_REGISTRY", None)
    if isinstance(registry, dict) and str(base) in registry and str(cls) not in registry:
        dict.__setitem__(registry, str(cls), dict.__getitem__(registry, str(base)))


def _count(summary: "Summary", kind: str, swapped: bool, module: torch.nn.Module) -> None:
    if swapped:
        summary.replaced[kind] = summary.replaced.get(kind, 0) + 1
    else:
        summary.left[f"{kind} ({type(module).__name__})"] = "the module has a forward of its own (hooks?)"


def _causal_only(signature, causal_mask_function, args, kwargs) -> bool:
    """Whether an ``sdpa_mask`` call asks for the plain causal mask of a batch without padding over
    as many keys as queries (or one query): the case ``is_causal`` covers. transformers skips that
    mask itself except while torch.compile traces (with torch < 2.14 it cannot tell compiling from
    exporting there); deciding from the arguments alone reads no tensor and holds for both."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return False
    a = {**bound.arguments, **bound.arguments.get("kwargs", {})}
    if a.get("attention_mask") is not None or a.get("local_size") is not None:
        return False
    if a.get("mask_function", causal_mask_function) is not causal_mask_function:
        return False
    if not a.get("allow_is_causal_skip", True):
        return False
    q = a.get("q_length")
    if q is None and isinstance(a.get("cache_position"), torch.Tensor):
        q = a["cache_position"].shape[0]
    kv = a.get("kv_length")
    return isinstance(q, int) and isinstance(kv, int) and (q == kv or q == 1)


def _is_segment_ids(mask) -> bool:
    """Whether an attention function's ``attention_mask`` is the (B, S) integer segment ids of
    ``_create_causal_mask`` (transformers' masks are boolean or float, 4-D)."""
    return (isinstance(mask, torch.Tensor) and mask.dim() == 2 and not mask.is_floating_point()
            and mask.dtype != torch.bool)


# transformers' create_causal_mask and find_packed_sequence_indices, once ``_packed_causal_mask`` found them
_MASKING: dict = {}


def _packed_causal_mask(original):
    """roofkit's ``create_causal_mask`` (``_create_causal_mask``) if ``original`` is transformers'
    ``masking_utils.create_causal_mask`` with the arguments it reads, else None."""
    try:
        from transformers import masking_utils
    except ImportError:
        return None
    find = getattr(masking_utils, "find_packed_sequence_indices", None)
    if original is not getattr(masking_utils, "create_causal_mask", None) or find is None:
        return None
    params = list(inspect.signature(original).parameters)[:5]
    if params[:3] != ["config", "inputs_embeds", "attention_mask"] or params[4:] != ["position_ids"]:
        return None  # (the fourth is the cache: past_key_values, or cache from transformers 5.2x on)
    _MASKING.update(create_causal_mask=original, find_packed_sequence_indices=find)
    return _create_causal_mask


_UNSET = object()


def _create_causal_mask(config, inputs_embeds, attention_mask, past_key_values=_UNSET, position_ids=None, **others):
    """transformers' ``create_causal_mask`` for a model on roofkit's attention: where it would make
    the causal mask of packed sequences (no padding mask, no cache, no other mask function,
    position ids given; transformers finds the sequences where the positions restart) this
    returns the sequences' ids, (B, S) integers, instead of a (B, 1, S, S) boolean mask, and the
    attention compares them inside its tiles. While torch.compile traces, transformers cannot look
    at the positions and always takes that path, so every compiled step given position ids gets
    here. Any other call is transformers'. (A module-level function, not a closure: torch.compile
    guards the globals of the forward it is bound into.)"""
    return _causal_mask(True, config, inputs_embeds, attention_mask, past_key_values, position_ids, others)


def _create_causal_mask_unpacked(config, inputs_embeds, attention_mask, past_key_values=_UNSET, position_ids=None,
                                 **others):
    """``_create_causal_mask`` for a forward called without position ids: the model made them
    itself, 0 .. S-1 on every row, so there are no packed sequences and the mask is plain causal
    (None: the attention's ``is_causal``), with no ids to make or compare, compiled or not."""
    return _causal_mask(False, config, inputs_embeds, attention_mask, past_key_values, position_ids, others)


def _causal_mask(packed: bool, config, inputs_embeds, attention_mask, past_key_values, position_ids, others):
    cache = others.pop("cache", None) if past_key_values is _UNSET else past_key_values
    if (getattr(config, "_attn_implementation", None) != ATTENTION or not getattr(config, "is_causal", True)
            or attention_mask is not None or cache is not None
            or others.get("allow_is_causal_skip", True) is not True
            or any(v is not None for k, v in others.items() if k not in ("layer_idx", "allow_is_causal_skip"))
            or not isinstance(position_ids, torch.Tensor) or position_ids.dim() != 2
            or not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3):
        # (the cache passed on positionally: its parameter is past_key_values or cache, by version)
        return _MASKING["create_causal_mask"](config, inputs_embeds, attention_mask, cache, position_ids=position_ids,
                                              **others)
    if not packed:
        return None
    if position_ids.shape[0] != inputs_embeds.shape[0]:
        position_ids = position_ids.expand(inputs_embeds.shape[0], -1)
    return _MASKING["find_packed_sequence_indices"](position_ids)  # (None: one sequence a row, plain causal)


_CHOOSERS: dict = {}


def _forward_by_positions(original, packed_forward, plain_forward):
    """The base model's forward: ``plain_forward`` (masks from ``_create_causal_mask_unpacked``)
    when the call gives no position ids, else ``packed_forward``. A decision on the arguments
    alone, which torch.compile traces (and guards) without reading a tensor."""
    if original in _CHOOSERS:
        return _CHOOSERS[original]
    params = list(inspect.signature(original).parameters.values())[1:]  # (without self)
    index = next((i for i, p in enumerate(params) if p.name == "position_ids"
                  and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)), None)

    @functools.wraps(plain_forward)
    def forward(self, *args, **kwargs):
        given = kwargs.get("position_ids") is not None or (
            index is not None and len(args) > index and args[index] is not None)
        return (packed_forward if given else plain_forward)(self, *args, **kwargs)

    _CHOOSERS[original] = forward
    return forward


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, causal_mask_function, sdpa_mask

    signature = inspect.signature(sdpa_mask)

    def mask(*args, **kwargs):
        if _causal_only(signature, causal_mask_function, args, kwargs):
            return None  # (attention: is_causal, or every key for one query)
        return sdpa_mask(*args, **kwargs)

    AttentionInterface.register(ATTENTION, _attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, mask)


def patch(model: torch.nn.Module, *, rms_norm: bool = True, rope: bool = True, mlp: bool = True,
          attention: bool = True, loss: bool = True, verbose: bool = False) -> torch.nn.Module:
    """Replace what roofkit supports in a transformers causal-LM model, in place; returns ``model``.

    Args:
        model: a transformers ``PreTrainedModel`` of a supported family (``FAMILIES``: llama,
            mistral, qwen2, qwen3, gemma), e.g. ``LlamaForCausalLM`` (the loss is replaced only on
            a ``...ForCausalLM``).
        rms_norm, rope, mlp, attention, loss: which parts to replace (see the module docstring).
        verbose: print what was replaced.
    Returns:
        ``model``, with ``model.roofkit_patch`` (a :class:`Summary`).
    Raises:
        ValueError: a model of another family (the message lists the supported ones), or not a
            transformers model.
        ImportError: transformers is not installed (``pip install roofkit[transformers]``).
    """
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    if family not in FAMILIES:
        raise ValueError(f"roofkit.patch: model_type {family!r} is not supported; supported families: "
                         f"{', '.join(FAMILIES)} (transformers causal-LM models)")
    mod = importlib.import_module(FAMILIES[family])
    prefix = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma": "Gemma"}[family]
    summary = Summary(family)
    count = summary.replaced

    norm_cls = getattr(mod, f"{prefix}RMSNorm")
    mlp_cls = getattr(mod, f"{prefix}MLP")
    lm_cls = getattr(mod, f"{prefix}ForCausalLM")
    glu = _GLU.get(getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None))
    for m in model.modules():
        if rms_norm and isinstance(m, norm_cls):
            _count(summary, "rms_norm", _swap(m, _gemma_rms_norm_forward if family == "gemma" else _rms_norm_forward), m)
        elif mlp and isinstance(m, mlp_cls):
            if glu is None:
                summary.left["mlp"] = f"activation {config.hidden_act!r} has no roofkit gated product"
                continue
            kind, approximate = glu
            _count(summary, kind, _swap(m, _swiglu_mlp_forward if kind == "swiglu" else _geglu_mlp_forward,
                                        **({} if kind == "swiglu" else {"_roofkit_approximate": approximate})), m)
    if rope:
        attn_cls = getattr(mod, f"{prefix}Attention")
        forward = _with_globals(attn_cls.forward, vars(mod), {"apply_rotary_pos_emb": _rope})
        if forward is None:
            summary.left["rope"] = (f"{attn_cls.__name__}.forward cannot be rebound (from another module, or a "
                                    "decorator that does not keep what it wraps)")
        for m in model.modules():
            if forward is not None and isinstance(m, attn_cls):
                _count(summary, "rope", _swap(m, forward), m)
    if attention:
        if getattr(config, "attention_dropout", 0.0):
            summary.left["attention"] = "attention_dropout > 0 (roofkit's attention has no dropout)"
        else:
            _register_attention()
            model.set_attn_implementation(ATTENTION)
            count["attention"] = ATTENTION
            base_cls = getattr(mod, f"{prefix}Model", None)
            original = vars(mod).get("create_causal_mask")
            packed = _packed_causal_mask(original) if callable(original) and base_cls is not None else None
            forward = (_with_globals(base_cls.forward, vars(mod), {"create_causal_mask": packed})
                       if packed is not None else None)
            plain = (_with_globals(base_cls.forward, vars(mod), {"create_causal_mask": _create_causal_mask_unpacked})
                     if forward is not None else None)
            if plain is not None:
                forward = _forward_by_positions(base_cls.forward, forward, plain)
            if forward is None:
                summary.left["packed sequences"] = (f"{prefix}Model.forward cannot be rebound: packed sequences get "
                                                    "transformers' boolean mask")
            else:
                for m in model.modules():
                    if isinstance(m, base_cls):
                        _swap(m, forward)
    if loss:
        if isinstance(model, lm_cls):
            inner = getattr(mod, f"{prefix}Model", None)
            names = (_cache_argument(lm_cls.forward), _cache_argument(inner.forward) if inner else "past_key_values")
            if _swap(model, _causal_lm_forward):
                model._roofkit_cache_names = names
                count["loss"] = "linear_cross_entropy"
            else:
                summary.left["loss"] = "the model has a forward of its own (hooks?)"
        else:
            summary.left["loss"] = f"not a {lm_cls.__name__}"
    model.roofkit_patch = summary
    if verbose:
        print(summary)
    return model
