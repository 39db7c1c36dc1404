"""traindeck's own files and folders: created private, never through a symbolic link (the link's target keeps its
content and its mode), refused with one line that names the path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from traindeck.backend.core.fileio import (
    SymlinkRefused,
    create_private_file,
    ensure_private_dir,
    open_private,
    open_private_append,
    read_json_file,
)


def _outside(tmp_path: Path, text: str = "the user's file\n", mode: int = 0o644) -> Path:
    target = tmp_path / "outside" / "precious.txt"
    target.parent.mkdir()
    target.write_text(text)
    target.chmod(mode)
    return target


def test_append_creates_a_private_file_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    for line in (b"one\n", b"two\n"):
        fd = open_private_append(path)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_append_makes_an_existing_file_private(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("kept\n")
    path.chmod(0o644)
    os.close(open_private_append(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "kept\n"


def test_append_refuses_a_symlink_and_leaves_its_target_alone(tmp_path: Path) -> None:
    target = _outside(tmp_path)
    link = tmp_path / "x.log"
    link.symlink_to(target)
    with pytest.raises(SymlinkRefused) as caught:
        open_private_append(link)
    assert str(caught.value) == f"refusing to write through a symbolic link: {link}"
    assert isinstance(caught.value, OSError)
    assert target.read_text() == "the user's file\n" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_append_refuses_a_dangling_symlink_and_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "nowhere.txt"
    link = tmp_path / "x.log"
    link.symlink_to(target)
    with pytest.raises(SymlinkRefused):
        open_private_append(link)
    assert not target.exists()


def test_write_without_append_starts_at_zero_and_refuses_links(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    fd = open_private(path, append=False)
    try:
        assert os.get_blocking(fd)  # blocking again after the open
        os.write(fd, b"abc")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"abc"
    target = _outside(tmp_path)
    (tmp_path / "linked.log").symlink_to(target)
    with pytest.raises(SymlinkRefused):
        open_private(tmp_path / "linked.log", append=False)
    assert target.read_text() == "the user's file\n"


def test_open_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "x.log"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        open_private_append(fifo)  # without a reader: refused at once (ENXIO), no wait for one
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(OSError, match="not a regular file"):
            open_private_append(fifo)
    finally:
        os.close(reader)


def test_create_private_file_is_new_and_private(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    create_private_file(path)
    assert path.read_bytes() == b"" and stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        create_private_file(path)


def test_create_private_file_refuses_a_symlink(tmp_path: Path) -> None:
    target = _outside(tmp_path)
    link = tmp_path / "output.log"
    link.symlink_to(target)
    with pytest.raises(SymlinkRefused, match="refusing to write through a symbolic link"):
        create_private_file(link)
    assert target.read_text() == "the user's file\n" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_private_dir_is_created_0700_with_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b"
    assert ensure_private_dir(path) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    path.chmod(0o755)
    ensure_private_dir(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_private_dir_uses_a_linked_folder_and_leaves_its_mode_alone(tmp_path: Path) -> None:
    """A data folder the user moved with a link is used as it is; the folder it points at is never chmod'ed."""
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    link = tmp_path / "runs"
    link.symlink_to(target)
    assert ensure_private_dir(link) == link
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_private_dir_refuses_a_link_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    link = tmp_path / "runs"
    link.symlink_to(target)
    with pytest.raises(SymlinkRefused) as caught:
        ensure_private_dir(link)
    assert str(caught.value) == f"refusing to write through a symbolic link: {link}"
    assert target.read_text() == "mine"


def test_private_dir_refuses_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(SymlinkRefused):
        ensure_private_dir(link)
    assert not (tmp_path / "nowhere").exists()


def test_a_small_json_file_is_read_and_anything_else_is_none(tmp_path: Path) -> None:
    good = tmp_path / "command.json"
    good.write_text('{"argv": ["python", "train.py"]}', encoding="utf-8")
    assert read_json_file(good) == {"argv": ["python", "train.py"]}
    (tmp_path / "link.json").symlink_to(good)
    assert read_json_file(tmp_path / "link.json") is None  # a link in a run folder is not one of ours
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 600 + "0]", encoding="utf-8")
    assert read_json_file(big, limit=1000) is None and read_json_file(big) is not None
    (tmp_path / "torn.json").write_text('{"argv": [', encoding="utf-8")
    assert read_json_file(tmp_path / "torn.json") is None
    assert read_json_file(tmp_path / "missing.json") is None
