"""scatter_add / index_add harness declarations: float64 references, cost models, torch
baselines, inputs, cases, suites and the two OpSpecs (SCATTER_ADD_SPEC, INDEX_ADD_SPEC; SPECS in
that order)."""

from __future__ import annotations

import math

import torch

from ...harness import baselines
from ...harness.inputs import random_tensor, with_layout
from ...harness.spec import Cost, Inputs, OpSpec, case
from .._common import FLOAT_DTYPES
from .api import index_add, scatter_add


# ----------------------------------------------------------------------------- reference, cost


def scatter_add_reference(input, dim, index, src, *, deterministic=None):
    """torch.scatter_add in float64 (index made contiguous: torch's CPU scatter_add mishandles an
    expanded index narrower than input, found by a hostile review)."""
    return torch.scatter_add(input.to(torch.float64), dim, index.contiguous(), src.to(torch.float64))


def index_add_reference(input, dim, index, source, *, alpha=1, deterministic=None):
    """torch.index_add in float64."""
    return torch.index_add(input.to(torch.float64), dim, index, source.to(torch.float64), alpha=alpha)


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _index_space(case) -> tuple[int, ...]:
    """The shape of the index space of a case: index's shape (scatter_add) or source's (index_add)."""
    if "index_shape" in case.params:
        return tuple(case["index_shape"])
    shape = list(case["shape"])
    shape[case.get("dim", 0)] = case["L"]
    return tuple(shape)


def index_add_cost(case, dtype: torch.dtype) -> Cost:
    """Read input, source and index once, write the output once; one add per source element
    (two FLOP with an alpha other than 1)."""
    numel_in = math.prod(case["shape"])
    numel_src = math.prod(_index_space(case))
    idx_size = _size(getattr(torch, case.get("index_dtype", "int64")))
    flops = numel_src * (2 if case.get("alpha", 1) != 1 else 1)
    return Cost(flops=flops, bytes=(2 * numel_in + numel_src) * _size(dtype) + case["L"] * idx_size)


def scatter_add_cost(case, dtype: torch.dtype) -> Cost:
    """Read input once, the src elements under index once, the index's distinct elements once (an
    index expanded along the trailing dims holds one element per row), write the output once;
    one add per index element."""
    numel_in = math.prod(case["shape"])
    space = _index_space(case)
    numel_idx = math.prod(space)
    dim = case.get("dim", 0) % len(space)
    distinct = math.prod(space[: dim + 1]) if case.get("index_layout") == "expanded" else numel_idx
    idx_size = _size(getattr(torch, case.get("index_dtype", "int64")))
    return Cost(flops=numel_idx, bytes=(2 * numel_in + numel_idx) * _size(dtype) + distinct * idx_size)


# ----------------------------------------------------------------------------- spec


def _make_index(kind: str, shape, N: int, dtype: torch.dtype, generator, device) -> torch.Tensor:
    """Index values in [0, N) of ``shape``: uniform, same (one destination for all), sorted,
    skewed (power law: a few hot destinations, as token ids), unique (a permutation prefix),
    repeat (every destination equally often, shuffled: top-k routing)."""
    gdev = generator.device
    numel = math.prod(shape)
    if kind == "uniform":
        x = torch.randint(0, N, (numel,), generator=generator, device=gdev)
    elif kind == "same":
        x = torch.randint(0, N, (1,), generator=generator, device=gdev).expand(numel)
    elif kind == "sorted":
        x = torch.randint(0, N, (numel,), generator=generator, device=gdev).sort().values
    elif kind == "skewed":
        u = torch.rand(numel, generator=generator, device=gdev, dtype=torch.float64)
        hot = torch.randperm(N, generator=generator, device=gdev)
        x = hot[(u**4 * N).long().clamp_max(N - 1)]
    elif kind == "unique":
        x = torch.randperm(N, generator=generator, device=gdev)[:numel]
    elif kind == "repeat":
        x = torch.randperm(numel, generator=generator, device=gdev) % N
    else:
        raise ValueError(f"unknown index kind {kind!r}")
    return x.reshape(shape).to(device=device, dtype=dtype).contiguous()


def _index_add_inputs(case, dtype, generator, device) -> Inputs:
    shape, dim, L = tuple(case["shape"]), case.get("dim", 0), case["L"]
    d = dim % max(len(shape), 1)
    N = shape[d] if shape else 1
    dist = case.get("dist", "normal")
    x = random_tensor(shape, dtype, generator, device, dist, layout=case.get("layout", "contiguous"))
    src = random_tensor(_index_space(case), dtype, generator, device, dist,
                        layout=case.get("source_layout", "contiguous"))
    idx_dtype = getattr(torch, case.get("index_dtype", "int64"))
    idx = _make_index(case.get("index", "uniform"), (L,), max(N, 1), idx_dtype, generator, device)
    kwargs = {"alpha": case.get("alpha", 1)}
    if "deterministic" in case.params:
        kwargs["deterministic"] = case["deterministic"]
    return Inputs((x, dim, idx, src), kwargs)


def _scatter_add_inputs(case, dtype, generator, device) -> Inputs:
    shape, dim = tuple(case["shape"]), case.get("dim", 0)
    space = tuple(case["index_shape"])
    d = dim % len(space)
    dist = case.get("dist", "normal")
    x = random_tensor(shape, dtype, generator, device, dist, layout=case.get("layout", "contiguous"))
    src = random_tensor(tuple(case.get("src_shape", space)), dtype, generator, device, dist,
                        layout=case.get("src_layout", "contiguous"))
    idx_dtype = getattr(torch, case.get("index_dtype", "int64"))
    kind = case.get("index", "uniform")
    if case.get("index_layout") == "expanded":
        rows = space[: d + 1] + (1,) * (len(space) - d - 1)
        idx = _make_index(kind, rows, max(shape[d], 1), idx_dtype, generator, device).expand(space)
    else:
        idx = with_layout(_make_index(kind, space, max(shape[d], 1), idx_dtype, generator, device),
                          case.get("index_layout", "contiguous"))
    kwargs = {"deterministic": case["deterministic"]} if "deterministic" in case.params else {}
    return Inputs((x, dim, idx, src), kwargs)


def _multiplicity(case) -> int:
    """Expected largest number of contributions to one destination (reduction-aware atol)."""
    space = _index_space(case)
    dim = case.get("dim", 0) % len(space)
    L, N = space[dim], max(case["shape"][dim], 1)
    if case.get("index", "uniform") == "same":
        return L
    if case.get("index") == "skewed":
        return max(1, L // 8)
    return max(1, 4 * math.ceil(L / N))


def _torch_scatter_add(input, dim, index, src, *, deterministic=None):
    return torch.scatter_add(input, dim, index, src)


def _torch_index_add(input, dim, index, source, *, alpha=1, deterministic=None):
    return torch.index_add(input, dim, index, source, alpha=alpha)


def _torch_deterministic(fn):
    """``fn`` run with torch's deterministic algorithms on (sort-based index_add on CUDA; torch
    raises where it has none), without the NaN fill of fresh allocations that mode adds."""

    def factory():
        import torch.utils.deterministic as det

        def run(*args, **kwargs):
            before, fill = torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory
            torch.use_deterministic_algorithms(True)
            det.fill_uninitialized_memory = False
            try:
                return fn(*args, **kwargs)
            finally:
                torch.use_deterministic_algorithms(before)
                det.fill_uninitialized_memory = fill

        return run

    return factory


def _baseline_providers(torch_fn) -> dict:
    """Both ops' baselines, each running ``torch_fn``: torch eager and compiled, torch with its
    deterministic algorithms, FlagGems."""
    return {
        **baselines.eager_and_compiled(torch_fn),
        "torch.deterministic": _torch_deterministic(torch_fn),
        "flaggems": baselines.flaggems(torch_fn),
    }


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)
_MI = 1 << 20

INDEX_ADD_CASES = [
    case("tiny_1d_L5_into_3", ["quick"], shape=(3,), L=5),
    case("rows_dim0_7x5_L9", ["quick"], shape=(7, 5), L=9),
    case("dim1_3x6x5_L8", shape=(3, 6, 5), dim=1, L=8),
    case("dim_last_4x7_L10", shape=(4, 7), dim=-1, L=10),
    case("same_destination_6x3_L300", shape=(6, 3), L=300, index="same"),
    case("int32_index_9x4_L12", shape=(9, 4), L=12, index_dtype="int32"),
    case("alpha_minus_half_6x4_L10", shape=(6, 4), L=10, alpha=-0.5),
    case("unique_16x3_L16", shape=(16, 3), L=16, index="unique"),
    case("skewed_40x8_L200", shape=(40, 8), L=200, index="skewed"),
    case("transposed_8x6_L9", shape=(8, 6), L=9, layout="transposed", source_layout="transposed"),
    case("strided_source_6x8_L7", shape=(6, 8), L=7, source_layout="strided", grad=False),
    case("wide_rows_5x700_L9", shape=(5, 700), L=9, dtypes=_F32),
    case("large_magnitude_9x5_L20", shape=(9, 5), L=20, dist="large"),
    case("nan_9x5_L20", shape=(9, 5), L=20, dist="nan", grad=False),
    case("deterministic_rows_9x5_L20", ["quick"], shape=(9, 5), L=20, deterministic=True),
    case("deterministic_dim1_3x6x5_L8", shape=(3, 6, 5), dim=1, L=8, deterministic=True),
    case("deterministic_1d_L300_into_7", shape=(7,), L=300, deterministic=True),
    case("deterministic_same_alpha_6x3_L50", shape=(6, 3), L=50, index="same", alpha=2.0, deterministic=True),
    case("deterministic_int32_offset_8x6_L9", shape=(8, 6), L=9, index_dtype="int32", layout="offset",
         deterministic=True),
    case("empty_index_4x3_L0", ["quick"], shape=(4, 3), L=0),
    case("empty_input_0x3_L0", shape=(0, 3), L=0),
    case("empty_rows_5x0_L4", shape=(5, 0), L=4),
    # On the GPU: the acceptance shapes and the llama3-8b embedding backward.
    case("gpu_rows_1Mix64_L1Mi", ["gpu"], shape=(_MI, 64), L=_MI, dtypes=_F32, grad=False),
    case("gpu_rows_1Mix64_L1Mi_deterministic", ["gpu"], shape=(_MI, 64), L=_MI, dtypes=_F32, deterministic=True,
         grad=False),
    case("gpu_1d_L64Mi_into_1Mi", ["gpu"], shape=(_MI,), L=64 * _MI, dtypes=_F32, grad=False),
    case("gpu_1d_L4Mi_into_1Mi_deterministic", ["gpu"], shape=(_MI,), L=4 * _MI, dtypes=_F32, deterministic=True,
         grad=False),
    case("gpu_same_destination_1d_L4Mi_ties", ["gpu"], shape=(1000,), L=4 * _MI, index="same", dist="ties",
         dtypes=_F32),
    case("gpu_same_destination_rows_L65536_ties", ["gpu"], shape=(4096, 64), L=65536, index="same", dist="ties",
         dtypes=_F32),
    case("gpu_duplicates_65536x128_L262144", ["gpu"], shape=(65536, 128), L=262144),
    case("gpu_duplicates_65536x128_L262144_deterministic", ["gpu"], shape=(65536, 128), L=262144, deterministic=True),
    case("gpu_embedding_bwd_16384x4096_L8192", ["gpu"], shape=(16384, 4096), L=8192, index="skewed", dtypes=_BF16),
    case("gpu_dim1_64x1000x96_L3000", ["gpu"], shape=(64, 1000, 96), dim=1, L=3000, alpha=0.5),
    case("gpu_int32_1d_L1Mi_into_4097", ["gpu"], shape=(4097,), L=_MI, index_dtype="int32", dtypes=_F32, grad=False),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(2**21 + 1, 1024), L=4096, dtypes=_BF16, grad=False),
]

INDEX_ADD_SUITES = {
    # llama3-8b: the embedding backward, 8192 token gradients of width 4096 added into the
    # 128256 x 4096 embedding gradient (token ids skewed like real text).
    "llama3-8b": [
        case("embedding_bwd_128256x4096_8192tok", shape=(128256, 4096), L=8192, index="skewed", dtypes=_BF16),
        case("embedding_bwd_128256x4096_8192tok_deterministic", shape=(128256, 4096), L=8192, index="skewed",
             dtypes=_BF16, deterministic=True),
    ],
    # Acceptance: 64Mi fp32 source elements into 1Mi destination rows. Two readings, both measured:
    # rows of 64 (input 1Mi x 64, source 1Mi x 64, 1Mi indices) and the 1-D form (input 1Mi,
    # source and index 64Mi). Bytes: input + output + source + index (index_add_cost).
    "acceptance": [
        case("rows_1Mix64_L1Mi", shape=(_MI, 64), L=_MI, dtypes=_F32),
        case("rows_1Mix64_L1Mi_deterministic", shape=(_MI, 64), L=_MI, dtypes=_F32, deterministic=True),
        case("1d_L64Mi_into_1Mi", shape=(_MI,), L=64 * _MI, dtypes=_F32),
        case("1d_L64Mi_into_1Mi_deterministic", shape=(_MI,), L=64 * _MI, dtypes=_F32, deterministic=True),
    ],
    # host: one decoding step's mixture-of-experts combine (8 tokens, top-2: 16 expert rows of 4096
    # added back into their tokens), where the host's cost per call is the time.
    "host": [
        case("moe_combine_8x4096_top2", shape=(8, 4096), L=16, index="repeat", dtypes=_BF16),
        case("moe_combine_8x4096_top2_fwd_bwd", shape=(8, 4096), L=16, index="repeat", dtypes=_BF16, mode="fwd_bwd"),
    ],
}

SCATTER_ADD_CASES = [
    case("tiny_1d_5_into_3", ["quick"], shape=(3,), index_shape=(5,)),
    case("dim0_6x4_from_9x4", ["quick"], shape=(6, 4), index_shape=(9, 4)),
    case("dim1_5x6_from_5x11", shape=(5, 6), dim=1, index_shape=(5, 11)),
    case("dim1_3d_3x5x4_from_3x8x4", shape=(3, 5, 4), dim=1, index_shape=(3, 8, 4)),
    case("index_smaller_than_src_4x6", shape=(4, 6), index_shape=(3, 4), src_shape=(5, 6), grad=False),
    case("index_smaller_than_input_3d", shape=(4, 6, 5), dim=1, index_shape=(3, 7, 2), src_shape=(3, 9, 4), grad=False),
    case("expanded_rows_7x5_from_12x5", ["quick"], shape=(7, 5), index_shape=(12, 5), index_layout="expanded"),
    case("expanded_dim1_3x6x5_from_3x9x5", shape=(3, 6, 5), dim=1, index_shape=(3, 9, 5), index_layout="expanded"),
    case("same_destination_4x3_from_200x3", shape=(4, 3), index_shape=(200, 3), index="same"),
    case("int32_index_6x4_from_9x4", shape=(6, 4), index_shape=(9, 4), index_dtype="int32"),
    case("transposed_index_8x6_from_10x6", shape=(8, 6), index_shape=(10, 6), index_layout="transposed",
         layout="transposed", src_layout="transposed"),
    case("large_magnitude_7x5_from_20x5", shape=(7, 5), index_shape=(20, 5), dist="large"),
    case("pos_inf_7x5_from_20x5", shape=(7, 5), index_shape=(20, 5), dist="pos_inf", grad=False),
    case("deterministic_dim0_6x4_from_9x4", ["quick"], shape=(6, 4), index_shape=(9, 4), deterministic=True),
    case("deterministic_expanded_dim1_3x6x5", shape=(3, 6, 5), dim=1, index_shape=(3, 9, 5), index_layout="expanded",
         deterministic=True),
    case("deterministic_batched_rows_3x6x5", shape=(3, 6, 5), dim=1, index_shape=(3, 9, 1), src_shape=(3, 9, 1),
         deterministic=True),
    case("deterministic_smaller_3d", shape=(4, 6, 5), dim=1, index_shape=(3, 7, 2), src_shape=(3, 9, 4),
         deterministic=True, grad=False),
    case("deterministic_same_4x3_from_60x3", shape=(4, 3), index_shape=(60, 3), index="same", deterministic=True),
    case("empty_index_4x3_from_0x3", ["quick"], shape=(4, 3), index_shape=(0, 3)),
    case("empty_input_0x3", shape=(0, 3), index_shape=(0, 3)),
    # On the GPU: the acceptance shapes.
    case("gpu_expanded_rows_1Mix64", ["gpu"], shape=(_MI, 64), index_shape=(_MI, 64), index_layout="expanded",
         dtypes=_F32, grad=False),
    case("gpu_expanded_rows_1Mix64_deterministic", ["gpu"], shape=(_MI, 64), index_shape=(_MI, 64),
         index_layout="expanded", dtypes=_F32, deterministic=True, grad=False),
    case("gpu_1d_64Mi_into_1Mi", ["gpu"], shape=(_MI,), index_shape=(64 * _MI,), dtypes=_F32, grad=False),
    case("gpu_same_destination_1d_4Mi_ties", ["gpu"], shape=(1000,), index_shape=(4 * _MI,), index="same",
         dist="ties", dtypes=_F32),
    case("gpu_same_destination_rows_65536x64_ties", ["gpu"], shape=(4096, 64), index_shape=(65536, 64), index="same",
         index_layout="expanded", dist="ties", dtypes=_F32),
    case("gpu_same_destination_deterministic", ["gpu"], shape=(4096, 64), index_shape=(65536, 64), index="same",
         index_layout="expanded", deterministic=True),
    case("gpu_materialized_3d_dim1_32x500x64", ["gpu"], shape=(32, 500, 64), dim=1, index_shape=(32, 700, 64)),
    case("gpu_materialized_3d_deterministic", ["gpu"], shape=(32, 500, 64), dim=1, index_shape=(32, 700, 64),
         deterministic=True),
    case("gpu_moe_combine_8192x4096_top2", ["gpu"], shape=(8192, 4096), index_shape=(16384, 4096), index="repeat",
         index_layout="expanded", dtypes=_BF16),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(2**21 + 1, 1024), index_shape=(4096, 1024),
         index_layout="expanded", dtypes=_BF16, grad=False),
]

SCATTER_ADD_SUITES = {
    # llama3-8b: a mixture-of-experts combine at llama3-8b's width (8192 tokens, top-2 routing:
    # 16384 expert-output rows of 4096 added back into their tokens), and the embedding backward
    # written as a scatter_add (index expanded along the hidden dimension).
    "llama3-8b": [
        case("moe_combine_8192x4096_top2", shape=(8192, 4096), index_shape=(16384, 4096), index="repeat",
             index_layout="expanded", dtypes=_BF16),
        case("moe_combine_8192x4096_top2_deterministic", shape=(8192, 4096), index_shape=(16384, 4096),
             index="repeat", index_layout="expanded", dtypes=_BF16, deterministic=True),
        case("embedding_bwd_128256x4096_8192tok", shape=(128256, 4096), index_shape=(8192, 4096), index="skewed",
             index_layout="expanded", dtypes=_BF16),
    ],
    # Acceptance: 64Mi fp32 into 1Mi rows (expanded row index, and the 1-D form with a 64Mi index),
    # and every index on the same destination.
    "acceptance": [
        case("expanded_rows_1Mix64", shape=(_MI, 64), index_shape=(_MI, 64), index_layout="expanded", dtypes=_F32),
        case("expanded_rows_1Mix64_deterministic", shape=(_MI, 64), index_shape=(_MI, 64), index_layout="expanded",
             dtypes=_F32, deterministic=True),
        case("1d_64Mi_into_1Mi", shape=(_MI,), index_shape=(64 * _MI,), dtypes=_F32),
        case("same_destination_rows_65536x64", shape=(4096, 64), index_shape=(65536, 64), index="same",
             index_layout="expanded", dist="ties", dtypes=_F32),
        case("same_destination_rows_65536x64_deterministic", shape=(4096, 64), index_shape=(65536, 64), index="same",
             index_layout="expanded", dist="ties", dtypes=_F32, deterministic=True),
    ],
    # host: one decoding step's mixture-of-experts combine (8 tokens, top-2), where the host's cost
    # per call is the time.
    "host": [
        case("moe_combine_8x4096_top2", shape=(8, 4096), index_shape=(16, 4096), index="repeat",
             index_layout="expanded", dtypes=_BF16),
        case("moe_combine_8x4096_top2_fwd_bwd", shape=(8, 4096), index_shape=(16, 4096), index="repeat",
             index_layout="expanded", dtypes=_BF16, mode="fwd_bwd"),
    ],
}

SCATTER_ADD_SPEC = OpSpec(
    name="scatter_add",
    impl=scatter_add,
    reference=scatter_add_reference,
    torch_impl=_torch_scatter_add,
    make_inputs=_scatter_add_inputs,
    cost=scatter_add_cost,
    reduction_length=_multiplicity,
    dtypes=FLOAT_DTYPES,
    cases=SCATTER_ADD_CASES,
    suites=SCATTER_ADD_SUITES,
    baselines=_baseline_providers(_torch_scatter_add),
    grad_args=(0, 3),
    # The default (atomic) path of both ops is not bitwise reproducible; deterministic=True cases
    # are checked for bitwise reproducibility by tests/ops/test_scatter.py.
    deterministic=False,
    marker="scatter",
)

INDEX_ADD_SPEC = SCATTER_ADD_SPEC.sibling(
    name="index_add",
    impl=index_add,
    reference=index_add_reference,
    torch_impl=_torch_index_add,
    make_inputs=_index_add_inputs,
    cost=index_add_cost,
    cases=INDEX_ADD_CASES,
    suites=INDEX_ADD_SUITES,
    baselines=_baseline_providers(_torch_index_add),
)

SPECS = (SCATTER_ADD_SPEC, INDEX_ADD_SPEC)
