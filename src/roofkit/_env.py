"""Environment switches read before any kernel is defined (no torch / triton import here).

``roofkit.cli`` decides whether to switch Triton's interpreter on before ``roofkit.ops`` (whose
import defines every kernel) is loaded: importing the ops first would define them for a GPU.
"""

from __future__ import annotations

import os


def interpreter_active() -> bool:
    """True when Triton runs kernels through its CPU interpreter: TRITON_INTERPRET read as Triton
    reads a boolean variable ("1", "true" or "on", any case; anything else is off)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on")
