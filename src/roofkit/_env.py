"""Environment switches read before any kernel is defined (no torch / triton import here).

``roofkit.cli`` decides whether to switch Triton's interpreter on before ``roofkit.ops`` (whose
import defines every kernel) is loaded: importing the ops first would define them for a GPU.
"""

from __future__ import annotations

import os


# The values Triton's getenv_bool reads as on (any case, no surrounding spaces; checked against
# triton._C.libtriton.getenv_bool of Triton 3.6).
TRUTHY = ("1", "true", "on", "yes", "y")


def interpreter_active() -> bool:
    """True when Triton runs kernels through its CPU interpreter: TRITON_INTERPRET read as Triton
    reads a boolean variable ("1", "true", "on", "yes" or "y", any case, nothing around them;
    anything else is off)."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in TRUTHY
