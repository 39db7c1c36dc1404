"""A run's output log as the tests grow it: `append` writes bytes at its end as a rank's output reaches it (the
empty log itself is tests/conftest.py's `log` fixture)."""

from __future__ import annotations

from pathlib import Path


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)
