"""A run store written by an earlier traindeck, whose queue table lacks a column added since, still works.

Found by walking through the dashboard with a store from a few hours older build: every queue read ended in
`IndexError: No item with that key` (the CLI's `queue list` crashed, the Launch page's sweep said "The run could
not be started" after queueing its runs, and the keeper could not start them).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.queue.entries import QueuedLaunch, QueueStore
from traindeck.backend.runs.record.run_store import RunStore

# queue_entries as the first queue build created it (before claimed_by).
OLD_QUEUE_TABLE = """CREATE TABLE queue_entries (
    run_id TEXT PRIMARY KEY, position REAL NOT NULL, held INTEGER NOT NULL DEFAULT 0,
    gpus TEXT NOT NULL DEFAULT '', request TEXT NOT NULL, queued_at REAL NOT NULL, assigned_gpus TEXT,
    seen_end INTEGER NOT NULL DEFAULT 0)"""


def make_old_store() -> None:
    RunStore().close()  # the runs tables as they are
    db = sqlite3.connect(str(run_store_path()))
    db.execute(OLD_QUEUE_TABLE)
    db.commit()
    db.close()


def test_an_older_queue_table_gets_the_new_column_and_queued_runs_read_back():
    make_old_store()
    with QueueStore() as queue:
        record = queue.add(QueuedLaunch(script="train.py"), name="old-store", held=True)
        entries = queue.entries()
    assert [e.run_id for e in entries] == [record.id]
    assert entries[0].claimed_by is None
    columns = {row[1] for row in sqlite3.connect(str(run_store_path())).execute("PRAGMA table_info(queue_entries)")}
    assert "claimed_by" in columns


def test_queue_list_on_an_older_store_prints_the_queue_not_an_internal_error(tmp_path):
    make_old_store()
    script = tmp_path / "train.py"
    script.write_text("print('never started: held')\n")
    added = cli("queue", "add", "--hold", "--launcher", "python", "--name", "waits", str(script))
    assert added.returncode == 0, added.stderr
    listed = cli("queue", "list")
    assert listed.returncode == 0, listed.stderr
    assert "internal error" not in listed.stderr
    assert "waits" in listed.stdout


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=60)


def test_a_launch_queued_before_entries_existed_reads_back_as_a_script_and_starts_as_one(tmp_path):
    """A request stored without `entry` (queued by an older traindeck) is a script file; the keeper builds the
    request for it as one, and a module's request says it is a module."""
    from traindeck.backend.queue.starting import request_for

    old = '{"script": "train.py", "script_args": ["--lr", "1"], "cwd": "", "env": {}}'
    launch = QueuedLaunch.from_json(old)
    assert launch.entry == "script" and request_for(launch, None).entry == "script"
    module = QueuedLaunch.from_json(QueuedLaunch(script="pkg.train", entry="module").to_json())
    assert module.entry == "module" and request_for(module, None).entry == "module"
