"""A corrupt or emptied run store: named, moved aside (kept) and rebuilt from the run folders on open; a busy one is
left alone. Real files, real SQLite, real processes (the CLI, a writer holding the store)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.core.paths import run_store_path, runs_dir
from traindeck.backend.runs.record.folder_record import (
    EVENTS_FILE,
    EVENTS_LIMIT,
    append_event,
    read_end,
    read_events,
    write_end,
    write_identity,
)
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.record.store_rebuild import metrics_from_log
from traindeck.backend.runs.supervisor.liveness import reconcile

LOSSES = [1.0, 0.5, 0.25]


def make_run(name: str, *, state: str | None = "succeeded", log: str | None = None,
             store: RunStore | None = None) -> RunRecord:
    """A run folder as start_run and the supervisor leave it (command.json, run.json, output.log, end.json), and
    its row in `store` when given."""
    run_dir = create_run_dir()
    argv = [sys.executable, "train.py", "--lr", "0.1"]
    atomic_write_text(run_dir.command, json.dumps({"argv": argv, "command_line": " ".join(argv), "cwd": "/work",
                                                   "launcher": "python", "env": {}}, indent=2))
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name=name,
                       preset="tiny", script="train.py", argv=argv, cwd="/work")
    write_identity(run_dir.path, record.id, name=name, preset="tiny", script="train.py", created_at=record.created_at)
    text = log if log is not None else "".join(f"{{'loss': {v}, 'learning_rate': 0.001}}\n" for v in LOSSES)
    run_dir.output.write_text(text)
    if store is not None:
        store.add_run(record)
    if state is not None:
        diagnosis = None if state == "succeeded" else {"summary": f"it {state}", "kind": "python_error"}
        write_end(run_dir.path, record.id, state, exit_code=0 if state == "succeeded" else 1, ended_at=time.time(),
                  diagnosis=diagnosis, state_detail="" if state == "succeeded" else f"it {state}")
        if store is not None:
            store.finish_run(record.id, state, exit_code=0 if state == "succeeded" else 1, diagnosis=diagnosis)
    return record


def three_runs() -> list[RunRecord]:
    with RunStore() as store:
        runs = [make_run("first", store=store), make_run("second", state="failed", store=store),
                make_run("third", store=store)]
        store.add_metrics(runs[0].id, [("loss", i, time.time(), v, None) for i, v in enumerate(LOSSES)])
        store.add_event(runs[0].id, "started", "launcher started (pid 4321)", t=1000.5)
        store.add_event(runs[0].id, "finished", "succeeded: hf_abcdefghijklmnopqrstuvwxyz0123 was fine", t=1009.25)
    return runs


def kept_aside(kind: str) -> list[Path]:
    return sorted(run_store_path().parent.glob(f"{run_store_path().name}.{kind}-*"))


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def garbage_header(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.write(b"this is not sqlite at all")


def empty(path: Path) -> None:
    os.truncate(path, 0)


def traindeck(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.mark.parametrize("damage, kind, why", [(truncate, "corrupt", "was corrupt (database disk image is malformed)"),
                                               (garbage_header, "corrupt", "was corrupt (file is not a database)"),
                                               (empty, "emptied", "was empty (0 bytes) beside 3 run folders")])
def test_a_damaged_store_is_kept_aside_and_rebuilt_from_the_run_folders(damage, kind: str, why: str,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    runs = three_runs()
    path = run_store_path()
    assert path.parent / "runs" == runs_dir()  # the run folders are read beside the store
    damage(path)
    before = path.read_bytes()
    store = RunStore()
    said = capfd.readouterr().err
    [aside] = kept_aside(kind)
    assert aside.read_bytes() == before  # what the user had is kept, byte for byte
    assert store.rebuilt is not None and f"the run store {path} {why}: moved aside to {aside}" in store.rebuilt
    assert "rebuilt 3 runs from their folders (2 events, 18 metric points) in " in store.rebuilt
    assert "(events of 2 runs only in the store moved aside)" in store.rebuilt
    assert said.count("traindeck: the run store") == 1 and store.rebuilt in said
    got = {r.name: r for r in store.list_runs()}
    assert sorted(got) == ["first", "second", "third"]
    assert [got[r.name].id for r in runs] == [r.id for r in runs]
    assert got["first"].state == "succeeded" and got["first"].exit_code == 0 and got["first"].preset == "tiny"
    assert got["second"].state == "failed" and got["second"].diagnosis == {"summary": "it failed",
                                                                          "kind": "python_error"}
    assert got["second"].state_detail == "it failed" and got["second"].argv[1:] == ["train.py", "--lr", "0.1"]
    assert [v for _, _, v in store.metric_series(runs[0].id, "loss")] == LOSSES  # from output.log
    # The first run's story comes back from its folder, at its times (secrets still masked); the others had none.
    story = [(e.t, e.kind, e.text) for e in store.events(runs[0].id)]
    assert [(t, kind) for t, kind, _ in story[:2]] == [(1000.5, "started"), (1009.25, "finished")]
    assert story[0][2] == "launcher started (pid 4321)" and "hf_abcdefghijklmnop" not in story[1][2]
    assert story[2][1] == "rebuilt" and "2 earlier events taken back from its folder" in story[2][2]
    [other] = store.events(runs[1].id)
    assert other.kind == "rebuilt" and "its earlier events are only in the moved-aside store" in other.text
    store.close()
    again = RunStore()  # sound now: opened as it is
    assert again.rebuilt is None and len(kept_aside(kind)) == 1 and len(again.list_runs()) == 3


def test_runs_list_lists_the_rebuilt_runs_with_one_line_about_it() -> None:
    three_runs()
    garbage_header(run_store_path())
    result = traindeck("runs", "list")
    assert result.returncode == 0, result.stderr
    for name in ("first", "second", "third"):
        assert name in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"traindeck: the run store {run_store_path()} was corrupt"), lines
    assert "Traceback" not in result.stderr
    again = traindeck("runs", "list")
    assert again.returncode == 0 and again.stderr == "" and "second" in again.stdout


def test_an_emptied_store_without_run_folders_is_just_a_new_store(capfd: pytest.CaptureFixture[str]) -> None:
    path = run_store_path()
    path.parent.mkdir(parents=True)
    path.touch()
    create_run_dir()  # a run being created: no command.json yet
    with RunStore() as store:
        assert store.rebuilt is None and store.list_runs() == []
    assert kept_aside("emptied") == [] and capfd.readouterr().err == ""


def test_a_busy_store_is_never_rebuilt() -> None:
    three_runs()
    path = run_store_path()
    inode = path.stat().st_ino
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys, time
        db = sqlite3.connect({str(path)!r}, isolation_level=None)
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("BEGIN EXCLUSIVE")
        db.execute("INSERT INTO runs_meta(key, value) VALUES ('held', '1')")
        print("held", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            RunStore(busy_timeout_s=0.3)
        listed = traindeck("runs", "list")
        assert "corrupt" not in listed.stderr and "rebuilt" not in listed.stderr
    finally:
        holder.communicate("", timeout=30)
    assert path.stat().st_ino == inode and kept_aside("corrupt") == [] and kept_aside("emptied") == []
    with RunStore() as store:
        assert len(store.list_runs()) == 3


def test_two_processes_opening_a_corrupt_store_at_once_rebuild_it_once() -> None:
    three_runs()
    garbage_header(run_store_path())
    code = "from traindeck.backend.runs import RunStore; s = RunStore(); print(len(s.list_runs()))"
    openers = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in openers]
    assert [out for out, _ in results] == ["3\n", "3\n"]
    assert sum("moved aside" in err for _, err in results) == 1, results
    assert len(kept_aside("corrupt")) == 1


def test_a_run_without_an_end_or_a_supervisor_becomes_lost_and_one_with_end_json_gets_it() -> None:
    with RunStore() as store:
        ended = make_run("ended-late", state=None, store=store)
        lost = make_run("lost", state=None, store=store)
        store.update_run(ended.id, created_at=time.time() - 3600, supervisor_pid=2**22 + 7, supervisor_started=1.0)
        store.update_run(lost.id, created_at=time.time() - 3600, supervisor_pid=2**22 + 9, supervisor_started=1.0)
    # The supervisor finished the run, but its end never reached this store (the store was replaced meanwhile).
    write_end(ended.run_dir, ended.id, "failed", exit_code=3, ended_at=1234.5,
              diagnosis={"summary": "rank 0 raised ValueError", "kind": "python_error"}, state_detail="ValueError")
    with RunStore() as store:
        assert sorted(reconcile(store)) == sorted([ended.id, lost.id])
        late, gone = store.get_run(ended.id), store.get_run(lost.id)
        assert late is not None and (late.state, late.exit_code, late.ended_at) == ("failed", 3, 1234.5)
        assert late.state_detail == "ValueError"
        assert [e.text for e in store.events(ended.id)] == ["failed: rank 0 raised ValueError"]
        assert gone is not None and gone.state == "lost"


def test_a_rebuilt_run_with_no_end_is_marked_lost_unless_its_supervisor_lives(tmp_path: Path) -> None:
    with RunStore() as store:
        orphan = make_run("orphan", state=None, store=store)
        living = make_run("living", state=None, store=store)
    # A process standing for the living run's supervisor: its command line is the supervisor's.
    fake = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(120)",
                             "traindeck.backend.runs.supervisor.process", living.run_dir])
    try:
        garbage_header(run_store_path())
        with RunStore() as store:
            assert store.rebuilt is not None
            rebuilt = store.get_run(living.id)
            assert rebuilt is not None and rebuilt.supervisor_pid == fake.pid and rebuilt.state == "running"
            for run_id in (orphan.id, living.id):
                store.update_run(run_id, created_at=time.time() - 3600)  # past the start timeout
            assert reconcile(store) == [orphan.id]
            assert store.get_run(living.id).state == "running"  # type: ignore[union-attr]
    finally:
        fake.kill()
        fake.wait()


def test_runs_from_before_end_json_take_their_end_from_evidence_json() -> None:
    with RunStore() as store:
        old = make_run("old", state=None, store=store)
    (Path(old.run_dir) / "evidence.json").write_text(json.dumps({
        "evidence": {"launcher_returncode": -9},
        "diagnosis": {"summary": "The host ran out of memory.", "kind": "host_oom"}}))
    empty(run_store_path())
    with RunStore() as store:
        got = store.get_run(old.id)
    assert got is not None and (got.state, got.exit_code, got.state_detail) == ("failed", -9,
                                                                                 "The host ran out of memory.")
    assert got.name == "old" and read_end(old.run_dir) is None


def test_rebuilding_reads_only_the_newest_part_of_a_long_log(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("".join(f"step {i} loss={1 / (i + 1):.6f}\n" for i in range(5000)))
    rows, progress = metrics_from_log(log, 100.0, 200.0, max_bytes=1000)
    steps = [step for _, step, _, _, _ in rows]
    assert 0 < len(steps) < 100 and steps[-1] == 4999 and steps == sorted(steps)
    assert all(100.0 <= t <= 200.0 for _, _, t, _, _ in rows) and rows[-1][2] == 200.0
    assert progress is not None and progress["current"] == 4999
    all_rows, _ = metrics_from_log(log, 100.0, 200.0)
    assert len(all_rows) == 5000 and all_rows[0][1] == 0


def test_the_dashboard_screenshot_of_a_corrupt_store_shows_no_traceback(tmp_path: Path) -> None:
    three_runs()
    garbage_header(run_store_path())
    result = traindeck("gui", "--screenshot", str(tmp_path / "shots"), QT_QPA_PLATFORM="offscreen")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "was corrupt (file is not a database)" in result.stderr
    assert list((tmp_path / "shots").glob("*.png"))



def test_a_runs_events_file_is_bounded_skips_torn_lines_and_refuses_links(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    assert read_events(folder) is None
    assert append_event(folder, 1.5, "started", "launcher started")
    with open(folder / EVENTS_FILE, "a") as handle:
        handle.write('["not", "an event"]\n{"t": "late", "kind": "x", "text": "y"}\n{"t": 2.0, "kind": "sta')
    assert read_events(folder) == [(1.5, "started", "launcher started")]
    os.truncate(folder / EVENTS_FILE, EVENTS_LIMIT)
    assert not append_event(folder, 3.0, "stall", "no output")  # full: it grows no further
    assert (folder / EVENTS_FILE).stat().st_size == EVENTS_LIMIT and (folder / EVENTS_FILE).stat().st_mode & 0o77 == 0
    target = tmp_path / "elsewhere.txt"
    target.write_text("mine\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / EVENTS_FILE).symlink_to(target)
    with pytest.raises(OSError):
        append_event(linked, 1.0, "started", "x")
    assert target.read_text() == "mine\n" and read_events(linked) is None


def test_an_event_repeated_after_its_store_write_failed_is_kept_once_in_the_folder() -> None:
    with RunStore() as store:
        run = make_run("run", state=None, store=store)
    folder = Path(run.run_dir)
    broken = RunStore()
    broken._db.execute("DROP TABLE run_events")  # every event write of this connection now fails
    with pytest.raises(sqlite3.Error):
        broken.add_event(run.id, "stall", "no output for 2 min")
    broken.close()
    with RunStore() as store:  # opening creates the table again
        store.add_event(run.id, "stall", "no output for 2 min")  # the repeat (SafeStore's, once reopened)
        [stored] = store.events(run.id)
    kept = read_events(folder)
    assert kept is not None and [(t, kind) for t, kind, _ in kept] == [(stored.t, "stall")]


def test_once_the_time_for_reading_logs_is_spent_older_runs_are_rebuilt_without_their_metrics(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from traindeck.backend.runs.record import store_rebuild

    runs = three_runs()
    garbage_header(run_store_path())
    monkeypatch.setattr(store_rebuild, "REBUILD_LOGS_BUDGET_S", 0.0)  # spent before the first log
    with RunStore() as store:
        assert store.rebuilt is not None
        assert "rebuilt 3 runs from their folders (2 events, 0 metric points)" in store.rebuilt
        assert ("(metrics and step timings of 3 older runs not read from their folders: the 0 s for reading logs "
                "went to newer runs)") in store.rebuilt
        assert [r.state for r in store.list_runs()] == ["succeeded", "failed", "succeeded"]
        assert store.metric_series(runs[0].id, "loss") == []
        assert [e.kind for e in store.events(runs[0].id)] == ["started", "finished", "rebuilt"]
