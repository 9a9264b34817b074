"""scatter_add and index_add, out of place: every contribution to a duplicated destination counts.

    scatter_add: out = input;  out[p with coordinate dim replaced by index[p]] += src[p]
                 for every position p of index's shape
    index_add:   out = input;  out[..., index[l], ...] += alpha * source[..., l, ...]

Program mapping. Every call is brought to one canonical form: the *index space* (index's shape
for scatter_add, source's shape for index_add) viewed as (outer, L, W) around ``dim`` and the
output as (outer, N, W), each with its own strides (views; a copy only where a layout cannot be
viewed that way). When the index does not vary along W (index_add, or scatter_add with an index
expanded along the trailing dims, as ``idx[:, None].expand_as(src)`` gives) it is read once per
row (``ROW_INDEX``), else once per element.

- Atomic path (default): the output starts as a copy of input; one program per tile of
  BLOCK_L index rows x BLOCK_I columns of one outer slice loads its indices and source tile and
  adds them with relaxed atomics (lowered to scalar ``red``; measured four-wide vector
  reductions: no gain).
  Indices outside [0, N) are skipped and counted in a device flag. Row-index calls at least
  ``PRECHECK_MIN_WIDTH`` wide count them first in ``_index_range_kernel`` (count copied to pinned
  host memory; the host waits on an event while the device copies input into the output, then
  enqueues the adds or raises IndexError); the others raise after the launch. One
  synchronization per call either way. 16-bit destinations with L >= N add into a float32 copy.
- Deterministic path (``deterministic=True``): a stable sort of the destination keys
  (torch.sort; an out-of-range index value gets a key past every destination, so it is never
  summed), segment bounds per destination (torch.searchsorted), then one program per tile of
  BLOCK_D destination rows x BLOCK_I columns sums each destination's contributions in sorted
  (= original) order in float32 and writes every destination once (rows without contributions
  copy input). A hot destination's segment longer than the piece length (``_piece_length``:
  from L, the shapes only) is cut into pieces that other programs sum first
  (``_scatter_add_piece_kernel``; piece slots sized from the shapes too); its own program adds
  their partial sums in piece order. The host reads whether an index was out of range and the
  longest segment (one synchronization; the pieces run only when it exceeds the piece length).
  No atomics anywhere: bitwise reproducible run to run, and for destinations of at most
  SPLIT_MIN contributions the bits are those of a sequential float32 sum in index order,
  whatever the tile sizes.
- CUDA-graph capture (``_capturing``): nothing is read back on the host, so the index range is
  not checked: the atomic kernel skips out-of-range values (its flag is read by no one), the
  deterministic path keys them past every destination and runs the pieces whenever L exceeds the
  piece length (the same pieces as an eager call: the same bits). Nothing outside input, src and
  the output is ever read or written.
- Backward: grad_input = grad; grad_src = alpha * grad gathered at index (a Triton gather with the
  atomic path's tiling; 0 for an out-of-range index value). No host synchronization.
Source: the scatter/segment-reduction formulation of torch.Tensor.scatter_add_ / index_add_
(semantics) and of segmented reductions over sorted keys (Blelloch, "Prefix sums and their
applications", 1990).

Package layout: ``_kernels.py`` (the @triton.jit kernels), ``_launch.py`` (the launch settings
ATOMIC_TILE / SORTED_TILE / UNROLL / SPLIT_MIN / ..., tile configs, the canonical form and the host
launchers of both paths and of the backward gather), ``api.py`` (argument checks, custom ops,
autograd, the public functions scatter_add and index_add), ``spec.py`` (references, costs, torch
baselines, inputs, cases, suites, specs). Launch settings and kernels are read at call time from
``_launch.py``, so patch them there, not on this package (which deliberately does not re-export
them).
"""

from .api import index_add, scatter_add
from .spec import (
    INDEX_ADD_SPEC,
    SCATTER_ADD_SPEC,
    SPECS,
    index_add_cost,
    index_add_reference,
    scatter_add_cost,
    scatter_add_reference,
)

__all__ = ["scatter_add", "index_add", "scatter_add_reference", "index_add_reference",
           "scatter_add_cost", "index_add_cost", "SCATTER_ADD_SPEC", "INDEX_ADD_SPEC", "SPECS"]
