"""The on-disk JSON caches (tuned launch configurations, measured device ceilings): read with a
check of their shape, written so that no reader or concurrent writer ever sees a broken file.

A cache may only cost time, never an op: a file that cannot be parsed (truncated, corrupt, a
half-written copy from some other tool), that parses to the wrong structure, or that was written
by other versions is ignored with one warning per file and process (``CacheWarning``, naming the
file), and rewritten. Writes go to a temporary file in the same directory, then ``os.replace``:
readers see the old file or the new one, whole. Writers also hold an ``fcntl.flock`` on
``<file>.lock`` while they re-read the file and merge their change into what is there now, so two
processes writing at once do not lose each other's entries. A directory that cannot be written
(read-only, no space, another user's) costs re-measuring or re-tuning in the next process only.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Callable

try:
    import fcntl
except ImportError:  # not POSIX: atomic replacement still keeps every file whole
    fcntl = None

# clean(data) -> (the usable part of data, what was wrong with it or None)
Clean = Callable[[Any], tuple]


class CacheWarning(UserWarning):
    """A roofkit cache file was ignored (and will be rewritten)."""


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def warn_once(path: Path, problem: str) -> None:
    """One warning per cache file and process."""
    with _WARNED_LOCK:
        if str(path) in _WARNED:
            return
        _WARNED.add(str(path))
    warnings.warn(f"roofkit: ignoring cache file {path}: {problem}; it will be rewritten",
                  CacheWarning, stacklevel=3)


def read(path: Path, clean: Clean) -> tuple[Any, str | None]:
    """(usable content of ``path`` or None, what was wrong with the file or None). A missing file
    is not a problem; unreadable, unparsable or wrongly shaped content is (``clean`` judges the
    shape and keeps what it can use)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:  # permissions, a directory in its place, bytes that are not UTF-8
        return None, f"unreadable ({type(exc).__name__}: {exc})"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"not valid JSON, truncated or corrupt ({exc})"
    return clean(data)


@contextlib.contextmanager
def _locked(path: Path):
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write(path: Path, data: Any, indent: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=indent, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from its other users
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def update(path: Path, change: Callable[[Any], Any], clean: Clean, *, indent: int = 1) -> Any:
    """Under ``path``'s lock: re-read it (what ``clean`` rejects is dropped), write
    ``change(current content or None)`` atomically and return it; None when the directory cannot
    be written (the caller keeps its result in memory)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            current, _ = read(path, clean)
            new = change(current)
            _write(path, new, indent)
            return new
    except OSError:
        return None
