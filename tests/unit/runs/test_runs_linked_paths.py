"""traindeck's own folders and logs beside a run are never reached through a symbolic link: a linked `runs` folder
keeps its target's mode, a linked sidecar or notify log keeps its target's content and mode."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from support.planted import TEXT, precious_file

from traindeck.backend.core.fileio import SymlinkRefused
from traindeck.backend.core.paths import runs_dir
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.supervisor import alerts
from traindeck.backend.runs.supervisor.beside import start_beside


def test_a_linked_runs_folder_is_used_and_its_target_keeps_its_mode(tmp_path: Path) -> None:
    """A runs folder moved to a bigger disk with a link is the user's arrangement: runs go there, and the folder
    it points at is never chmod'ed."""
    target = tmp_path / "big-disk-runs"
    target.mkdir()
    target.chmod(0o755)
    runs_dir().parent.mkdir(parents=True, exist_ok=True)
    runs_dir().symlink_to(target)
    run_dir = create_run_dir()
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert [p.name for p in target.iterdir()] == [run_dir.path.name]
    assert stat.S_IMODE(run_dir.path.stat().st_mode) == 0o700


def test_a_dangling_link_where_the_runs_folder_goes_is_refused(tmp_path: Path) -> None:
    runs_dir().parent.mkdir(parents=True, exist_ok=True)
    runs_dir().symlink_to(tmp_path / "gone")
    with pytest.raises(SymlinkRefused, match=re.escape(f"refusing to write through a symbolic link: {runs_dir()}")):
        create_run_dir()
    assert not (tmp_path / "gone").exists()


def test_run_directories_are_private(tmp_path: Path) -> None:
    run_dir = create_run_dir()
    assert stat.S_IMODE(run_dir.path.stat().st_mode) == 0o700
    assert stat.S_IMODE(runs_dir().stat().st_mode) == 0o700


def test_a_linked_sidecar_log_keeps_the_sidecar_from_starting(tmp_path: Path) -> None:
    target = precious_file(tmp_path)
    run_dir = create_run_dir()
    (run_dir.path / "sidecar.log").symlink_to(target)
    assert start_beside("traindeck.backend.runs.supervisor.sidecar", run_dir.path, tmp_path / "runs.sqlite3",
                        "sidecar.log") is None
    assert target.read_text() == TEXT and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_linked_notify_log_is_not_written_through(tmp_path: Path) -> None:
    target = precious_file(tmp_path)
    alerts.log_path().parent.mkdir(parents=True, exist_ok=True)
    alerts.log_path().symlink_to(target)
    alerts._log("an alert was sent")
    assert target.read_text() == TEXT and stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.parametrize("name", ["runs.sqlite3", "runs.sqlite3-wal", "runs.sqlite3-shm"])
def test_a_link_planted_at_the_run_store_or_beside_it_is_refused(tmp_path: Path, name: str) -> None:
    """SQLite opens the store and creates its -wal and -shm files by name, following links: a link planted at any
    of them is refused before SQLite is asked, and the file it points at keeps its content and mode."""
    import subprocess
    import sys

    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.monitor.sample_store import ResourceWriter
    from traindeck.backend.runs.record.run_store import RunStore

    target = precious_file(tmp_path)
    store = run_store_path()
    store.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{store.parent}/{name}").symlink_to(target)
    with pytest.raises(SymlinkRefused, match=name):
        RunStore(store)
    with pytest.raises(SymlinkRefused, match=name):
        ResourceWriter(store, "run-x", interval_s=1.0, started_at=0.0)
    listing = subprocess.run([sys.executable, "-m", "traindeck", "runs", "list"], capture_output=True, text=True,
                             timeout=60)
    assert listing.returncode != 0 and "Traceback" not in listing.stderr
    assert f"refusing to write through a symbolic link: {store.parent}/{name}" in listing.stderr
    assert target.read_text() == TEXT and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_the_demo_runs_never_write_through_a_link_planted_at_their_logs(tmp_path: Path) -> None:
    """`make demo` writes its made-up runs' logs into the data folder: a link planted at one is replaced, and the
    file it pointed at keeps its content and mode."""
    from support.planted import assert_untouched

    from traindeck.backend.runs.demo.history import create_demo_runs
    from traindeck.backend.runs.demo.live import create_failed_demo, create_running_demo

    now = 1_800_000_000.0
    scratch = tmp_path / "scratch"
    ids = [create_running_demo(scratch / "s.sqlite3", scratch / "runs", now),
           create_failed_demo(scratch / "s.sqlite3", scratch / "runs", now)]
    target = precious_file(tmp_path)
    root = tmp_path / "runs"
    for run_id in [*ids, "demo-20260105-0000"]:
        (root / run_id).mkdir(parents=True)
        (root / run_id / "output.log").symlink_to(target)
    create_running_demo(tmp_path / "store.sqlite3", root, now)
    create_failed_demo(tmp_path / "store.sqlite3", root, now)
    create_demo_runs(tmp_path / "store.sqlite3", root)
    assert_untouched(target)
    assert not any((root / run_id / "output.log").is_symlink() for run_id in [*ids, "demo-20260105-0000"])
