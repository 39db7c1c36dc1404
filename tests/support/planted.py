"""A file of the user's that a planted symbolic link points at: it must come out of a test unchanged."""

from __future__ import annotations

import stat
from pathlib import Path

TEXT = "the user's own file\n"


def precious_file(tmp_path: Path) -> Path:
    """The user's file, outside any folder traindeck writes to, with known content and mode 0644."""
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    target.write_text(TEXT)
    target.chmod(0o644)
    return target


def assert_untouched(target: Path) -> None:
    assert target.read_text() == TEXT
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
