"""Files the worker keeps for later runs (caches): written whole or not at all."""

from __future__ import annotations

import os


def write_atomically(path: str, data: bytes) -> bool:
    """Writes `data` to `path` through a temporary file and a rename, so a reader sees the old file
    or the whole new one; False when it could not (a cache then just misses)."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
        return True
    except OSError:
        try:
            os.remove(temporary)
        except OSError:
            pass
        return False


def private_dir(path: str) -> str | None:
    """`path` as a directory (made with its parents when missing) only for this user, or None when
    it cannot be made (the cache it is for is then not kept)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path
