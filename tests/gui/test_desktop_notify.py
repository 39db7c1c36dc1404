"""Desktop notifications, for real: a private session bus (dbus-daemon), a small freedesktop notification server on
it (tests/fixtures/notify_server.py, QtDBus), real runs through the real supervisor, and the dashboard's notifier.
Each run's end must arrive as exactly one Notify with the run's name and event as summary and the diagnosis' first
line as body; nothing when notifications are off; a click (ActionInvoked) opens the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from support.runhelp import python_job, wait_finished  # noqa: E402

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402
from traindeck.backend.runs.supervisor import alerts  # noqa: E402

SERVER = Path(__file__).resolve().parent.parent / "fixtures" / "notify_server.py"


class Bus:
    def __init__(self, address: str, calls: Path, server: subprocess.Popen[str]) -> None:
        self.address, self.calls_file, self.server = address, calls, server

    def calls(self) -> list[dict[str, object]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines() if line.strip()]

    def click(self, notification_id: int) -> None:
        assert self.server.stdin is not None
        self.server.stdin.write(f"invoke {notification_id} default\n")
        self.server.stdin.flush()


@pytest.fixture
def session_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A private session bus with a notification server on it, named by DBUS_SESSION_BUS_ADDRESS for this test."""
    daemon_path = shutil.which("dbus-daemon")
    if daemon_path is None or shutil.which("gdbus") is None:
        pytest.skip("dbus-daemon or gdbus is not installed (apt-get install dbus libglib2.0-bin): no session bus "
                    "to test desktop notifications on")
    daemon = subprocess.Popen([daemon_path, "--session", "--nofork", "--print-address=1"], stdout=subprocess.PIPE,
                              text=True)
    server = None
    try:
        assert daemon.stdout is not None
        address = daemon.stdout.readline().strip()
        assert address, "dbus-daemon printed no address"
        calls = tmp_path / "notify-calls.jsonl"
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address, QT_QPA_PLATFORM="offscreen")
        server = subprocess.Popen([sys.executable, str(SERVER), str(calls)], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready", "the notification server did not start"
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
        yield Bus(address, calls, server)
    finally:
        for proc in (server, daemon):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture
def notifier(qtbot):  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QWidget

    from traindeck.gui.context import AppContext
    from traindeck.gui.desktop_notify import DesktopNotifier

    RunStore().close()  # the store exists: the first read sets the mark at its newest event
    ctx = AppContext()
    window = QWidget()
    qtbot.addWidget(window)
    made = DesktopNotifier(ctx, window, poll_ms=150)
    made.start()
    qtbot.waitUntil(lambda: made._mark is not None, timeout=10000)
    yield made
    made.stop()
    ctx.tasks.wait(10000)


def _wait_calls(qtbot, bus: Bus, count: int, timeout: int = 30000) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(lambda: len(bus.calls()) >= count, timeout=timeout)
    return bus.calls()


@pytest.mark.launch
def test_a_failed_and_a_succeeded_run_each_arrive_once_as_a_notify(qtbot, session_bus, notifier):
    shown: list[object] = []
    notifier.shown.connect(lambda alert, delivery: shown.append((alert, delivery)))
    failed = python_job("--steps", "2", "--end", "exit:3", name="nightly-lr=3e-5")
    record = wait_finished(failed.id)
    assert record.state == "failed"
    calls = _wait_calls(qtbot, session_bus, 1)
    assert calls[0]["summary"] == "nightly-lr=3e-5 failed"
    assert calls[0]["app"] == "traindeck"
    with RunStore() as store:
        finished = [e.text for e in store.events(failed.id) if e.kind == "finished"]
    assert len(finished) == 1 and finished[0].startswith("failed: ")
    first_line = alerts.first_line(finished[0].removeprefix("failed: "))  # the diagnosis' summary, first line
    assert first_line and calls[0]["body"] == first_line
    assert calls[0]["actions"] == ["default", "Open the run"]  # the server says it supports actions

    ok = python_job("--steps", "2", name="nightly-ok")
    assert wait_finished(ok.id).state == "succeeded"
    calls = _wait_calls(qtbot, session_bus, 2)
    assert calls[1]["summary"] == "nightly-ok succeeded"
    # Polling goes on: still one Notify per event, however often the store is read (and re-read from the mark).
    time.sleep(1.0)
    qtbot.wait(500)
    assert [c["summary"] for c in session_bus.calls()] == ["nightly-lr=3e-5 failed", "nightly-ok succeeded"]
    assert [d.how for _a, d in shown] == ["dbus", "dbus"]


@pytest.mark.launch
def test_clicking_the_notification_opens_the_run(qtbot, session_bus, notifier):
    opened: list[str] = []
    notifier.ctx.open_run.connect(opened.append)
    run = python_job("--steps", "1", name="click-me")
    wait_finished(run.id)
    calls = _wait_calls(qtbot, session_bus, 1)
    session_bus.click(int(calls[0]["id"]))  # type: ignore[call-overload]
    qtbot.waitUntil(lambda: opened == [run.id], timeout=10000)


@pytest.mark.launch
def test_no_notification_when_turned_off(qtbot, session_bus, notifier):
    alerts.save_desktop_notifications(False)
    assert alerts.desktop_notifications() is False
    run = python_job("--steps", "1", name="quiet")
    wait_finished(run.id)
    with RunStore() as store:
        qtbot.waitUntil(lambda: notifier._mark is not None and notifier._mark >= store.events_mark(), timeout=10000)
    qtbot.wait(500)
    assert session_bus.calls() == []
    alerts.save_command(["true"])  # saving the command keeps the desktop setting
    assert alerts.desktop_notifications() is False


def test_a_click_that_arrives_before_gdbus_answers_still_opens_the_run(qtbot):
    """The server shows (and the user can click) the notification before gdbus's answer, carrying its id, has come
    back through the worker: that click must not be lost (CI lost it once under load)."""
    from PySide6.QtWidgets import QWidget

    from traindeck.backend.runs.control.alert_feed import Alert
    from traindeck.gui.context import AppContext
    from traindeck.gui.desktop_notify import Delivery, DesktopNotifier

    window = QWidget()
    qtbot.addWidget(window)
    made = DesktopNotifier(AppContext(), window)
    opened: list[str] = []
    made.ctx.open_run.connect(opened.append)
    for other in range(100):  # other apps' clicks, many: kept bounded, and they open nothing
        made._action_invoked(1000 + other, "default")
    assert len(made._early_clicks) <= 64 and opened == []
    made._action_invoked(7, "default")
    assert opened == []
    made._delivered(Alert(1, "run-7", "seven", "failed", "boom"), Delivery("dbus", 7))
    assert opened == ["run-7"]
    made._action_invoked(7, "default")  # a second click, once known, opens it again
    assert opened == ["run-7", "run-7"]


def test_the_alert_reader_keeps_its_store_open_and_follows_a_new_store_file(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader polls every 2 s for days: one connection, not one per poll; but a store file replaced (a new
    TRAINDECK_HOME, the file moved away and recreated) is read afresh, not through the old file's connection."""
    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.runs.record.run_store import RunRecord
    from traindeck.gui.desktop_notify import _AlertReader

    monkeypatch.setenv("TRAINDECK_HOME", str(tmp_path / "home"))
    reader = _AlertReader()
    assert reader(None) == (0, [], False)  # no store yet: nothing opened
    assert reader._store is None

    def failed_run(run_id: str) -> None:
        with RunStore() as store:
            store.add_run(RunRecord(id=run_id, run_dir=str(tmp_path / run_id), created_at=time.time(), name=run_id))
            store.add_event(run_id, "finished", "failed: CUDA out of memory")

    with RunStore():
        pass
    mark, _alerts, _ = reader(None)
    opened = reader._store
    failed_run("first")
    mark, found, _ = reader(mark)
    assert [(a.run_id, a.event) for a in found] == [("first", "failed")]
    assert reader(mark)[1] == [] and reader._store is opened  # the same connection, poll after poll

    path = run_store_path()
    path.rename(path.with_suffix(".old"))  # (its -wal and -shm files stay: a new file gets new ones)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    failed_run("second")
    _mark, found, _ = reader(0)
    assert reader._store is not opened
    assert [(a.run_id, a.event) for a in found] == [("second", "failed")]
    reader.close()
    assert reader._store is None
