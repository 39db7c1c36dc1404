"""ctx.tasks: work runs off the UI thread, results come back on it, and a closed page's results are dropped."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent
from PySide6.QtWidgets import QLabel

from traindeck.gui.tasks import TaskError, Tasks


def test_result_arrives_on_the_ui_thread_and_errors_go_to_failed(qtbot):
    tasks = Tasks()
    seen: dict[str, object] = {}

    def work(x: int) -> tuple[int, str]:
        return x * 2, threading.current_thread().name

    tasks.run(work, 21, done=lambda r: seen.update(result=r, thread=threading.current_thread().name))
    tasks.run(lambda: 1 / 0, failed=lambda e: seen.update(error=e))
    qtbot.waitUntil(lambda: "result" in seen and "error" in seen, timeout=5000)
    value, worker_thread = seen["result"]  # type: ignore[misc]
    assert value == 42 and worker_thread != threading.main_thread().name
    assert seen["thread"] == threading.main_thread().name
    assert "division by zero" in str(seen["error"])


def test_a_result_for_a_deleted_widget_is_dropped(qtbot):
    tasks = Tasks()
    gate = threading.Event()
    label = QLabel()
    tasks.run(lambda: (gate.wait(5), "late")[1], done=label.setText)
    label.deleteLater()  # the page closes while the job runs
    qtbot.waitUntil(lambda: not __import__("shiboken6").isValid(label), timeout=5000)
    gate.set()
    assert tasks.wait(5000)
    qtbot.wait(100)  # the queued delivery runs here; calling the deleted label's slot would raise RuntimeError


def test_a_failure_keeps_the_exception_object_and_reads_as_its_text(qtbot):
    tasks = Tasks()
    seen: list[TaskError] = []

    def boom() -> None:
        raise FileNotFoundError(2, "No such file or directory", "/nope.yaml")

    tasks.run(boom, failed=seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert isinstance(seen[0].exception, FileNotFoundError) and seen[0].exception.filename == "/nope.yaml"
    assert seen[0] == "[Errno 2] No such file or directory: '/nope.yaml'"  # the text pages show, as before


def test_a_lane_delivers_only_the_newest_answer(qtbot):
    tasks = Tasks()
    lane = tasks.lane()
    slow, answers = threading.Event(), []
    lane.run(lambda: (slow.wait(5), "old")[1], done=answers.append)  # overtaken while it runs
    lane.run(lambda: "new", done=answers.append)
    qtbot.waitUntil(lambda: answers == ["new"], timeout=5000)
    slow.set()
    assert tasks.wait(5000)
    qtbot.wait(100)  # the old answer's delivery runs here and is dropped
    assert answers == ["new"]


def test_invalidate_drops_answers_and_failures_asked_before_it(qtbot):
    tasks = Tasks()
    lane = tasks.lane()
    gate, seen = threading.Event(), []
    lane.run(lambda: (gate.wait(5), 1 / 0), done=seen.append, failed=seen.append)
    ticket = lane.ticket
    lane.invalidate()  # the thing asked about changed
    assert not lane.current(ticket)
    gate.set()
    assert tasks.wait(5000)
    qtbot.wait(100)
    assert seen == []
    lane.run(lambda: 1 / 0, failed=seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert isinstance(seen[0].exception, ZeroDivisionError)


def test_a_lane_answer_for_a_deleted_widget_is_dropped(qtbot):
    tasks = Tasks()
    gate = threading.Event()
    label = QLabel()
    tasks.lane().run(lambda: (gate.wait(5), "late")[1], done=label.setText)
    label.deleteLater()
    qtbot.waitUntil(lambda: not __import__("shiboken6").isValid(label), timeout=5000)
    gate.set()
    assert tasks.wait(5000)
    qtbot.wait(100)  # calling the deleted label's slot would raise RuntimeError here


def test_a_failure_without_a_message_reads_as_one_line_and_its_traceback_goes_to_the_log(qtbot):
    from traindeck.gui.error_log import log_path

    tasks = Tasks()
    seen: list[TaskError] = []

    def broken() -> None:
        raise RuntimeError  # no message: its text used to be the traceback itself

    tasks.run(broken, failed=seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert "\n" not in seen[0] and "Traceback" not in seen[0]
    assert seen[0].startswith("an unexpected RuntimeError (details in ") and str(log_path()) in seen[0]
    logged = log_path().read_text()
    assert "Traceback (most recent call last)" in logged and "in broken" in logged
    assert oct(log_path().stat().st_mode & 0o777) == "0o600"


def test_an_error_in_a_slot_is_logged_and_shown_in_one_line(qtbot):
    import sys

    from PySide6.QtCore import QTimer

    from traindeck.gui.error_log import install, log_path

    shown: list[str] = []
    before = sys.excepthook
    install(shown.append)
    try:
        def slot() -> None:
            raise KeyError("learning_rate")

        # pytest-qt reports exceptions raised in Qt's event loop as test failures: this one is expected
        with qtbot.capture_exceptions() as raised:
            QTimer.singleShot(0, slot)
            qtbot.wait(100)
        for kind, value, tb in raised:  # what Qt hands to sys.excepthook outside pytest-qt
            install(shown.append)
            sys.excepthook(kind, value, tb)
    finally:
        sys.excepthook = before
    assert len(shown) == 1 and shown[0].startswith("Something went wrong: KeyError: 'learning_rate' (details in ")
    assert "\n" not in shown[0] and "in slot" in log_path().read_text()


def test_a_lambda_made_owned_is_dropped_with_its_widget_and_delivered_while_it_lives(qtbot):
    from traindeck.gui.tasks import owned

    tasks = Tasks()
    label, kept = QLabel(), QLabel()
    tasks.run(lambda: "kept", done=owned(kept, lambda text: kept.setText(f"{text} (request 7)")))
    qtbot.waitUntil(lambda: kept.text() == "kept (request 7)", timeout=5000)
    gate = threading.Event()
    tasks.run(lambda: (gate.wait(5), "late")[1], done=owned(label, lambda text: label.setText(text)))
    label.deleteLater()
    qtbot.waitUntil(lambda: not __import__("shiboken6").isValid(label), timeout=5000)
    gate.set()
    assert tasks.wait(5000)
    qtbot.wait(100)  # a bare lambda would call the deleted label here (RuntimeError in the event loop)


def test_a_closure_over_a_deleted_object_is_dropped_alone_or_in_a_lane(qtbot):
    """A page's nested `done` that uses `self` (no bound method to see): once `self` is deleted, the answer is
    dropped, straight or through a lane, instead of reaching the deleted object (RuntimeError in the event loop)."""
    from PySide6.QtCore import QObject, Signal

    class Lister(QObject):
        listed = Signal(object)

        def refresh(self, tasks: Tasks, gate: threading.Event, lane=None) -> None:  # type: ignore[no-untyped-def]
            def done(result: object) -> None:
                self.listed.emit(result)

            (lane or tasks).run(lambda: (gate.wait(5), "late")[1], done=done)

    tasks = Tasks()
    for through_lane in (False, True):
        gate = threading.Event()
        lister = Lister()
        lister.refresh(tasks, gate, tasks.lane() if through_lane else None)
        lister.deleteLater()
        qtbot.waitUntil(lambda obj=lister: not shiboken6.isValid(obj), timeout=5000)
        with qtbot.captureExceptions() as raised:
            gate.set()
            assert tasks.wait(5000)
            qtbot.wait(100)  # the queued delivery runs here
        assert raised == [], (through_lane, raised)
    seen: list[object] = []
    lister = Lister()
    lister.listed.connect(seen.append)
    open_gate = threading.Event()
    open_gate.set()
    lister.refresh(tasks, open_gate)  # alive: delivered
    qtbot.waitUntil(lambda: seen == ["late"], timeout=5000)


class _Token:
    """Stands for what a job refers to (its arguments, its callbacks' closures): weakly referenceable."""


def test_finished_jobs_leave_nothing_behind(qtbot):
    """A job quicker than pool.start() itself (a short store read) once kept its runnable's Python side, and with
    it everything the job referred to, alive for good: ~600 an hour for a window watching a run. 500 instant jobs
    with their callbacks, all answered: none of their arguments or callbacks may still be alive."""
    tasks = Tasks()
    alive: weakref.WeakSet[_Token] = weakref.WeakSet()
    answers: list[int] = []

    def deliver(token: _Token) -> Callable[[int], None]:
        return lambda value: answers.append(value) if token is not None else None  # the closure holds the token

    for i in range(500):
        argument, closure = _Token(), _Token()
        alive.update((argument, closure))
        tasks.run(lambda _token, i=i: i, argument, done=deliver(closure))
        del argument, closure
    qtbot.waitUntil(lambda: len(answers) == 500, timeout=20000)
    assert tasks.wait(5000)
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # the relays' deleteLater()
    qtbot.wait(50)
    gc.collect()
    assert len(alive) == 0, f"{len(alive)} of 1000 objects the jobs referred to are still alive"
    assert tasks.waiting == 0


def test_jobs_share_one_relay(qtbot):
    """A QObject and a connection per job cost ~300 bytes each that PySide6 never gave back (two jobs a second
    for a window watching a run): 50 jobs on their way are answered through the one relay the pool has."""
    from traindeck.gui.tasks import _Relay

    gc.collect()
    before = sum(isinstance(o, _Relay) for o in gc.get_objects())  # other tests' pools still alive in this worker
    tasks = Tasks()
    gate, answers = threading.Event(), []
    for i in range(50):
        tasks.run(lambda i=i: (gate.wait(5), i)[1], done=answers.append)
    gc.collect()
    relays = [o for o in gc.get_objects() if isinstance(o, _Relay) and shiboken6.isValid(o) and o.parent() is tasks]
    everywhere = sum(isinstance(o, _Relay) for o in gc.get_objects()) - before
    gate.set()
    qtbot.waitUntil(lambda: len(answers) == 50, timeout=10000)
    assert len(relays) == 1 and everywhere == 1, f"{everywhere} relays for 50 jobs"
    assert sorted(answers) == list(range(50)) and tasks.waiting == 0


GC_THREADS_SCRIPT = r"""
import gc, threading
from PySide6.QtCore import QTimer
from traindeck.gui.app import create_window

app, window = create_window(demo=False)
threads = []
gc.callbacks.append(lambda phase, info: phase == "start" and threads.append(threading.current_thread().name))

def churn():
    for _ in range(200000):  # cycles made off the UI thread, as a background read's rows and closures are
        a = []
        a.append(a)
    return True

window.ctx.tasks.run(churn, done=lambda _: QTimer.singleShot(2500, app.quit))
app.exec()
print("enabled", gc.isenabled())
print("threads", sorted(set(threads)), len(threads))
"""


def test_cyclic_garbage_is_collected_on_the_ui_thread_only(tmp_path):
    """Automatic collection would run on the pool thread that allocates, where freeing a closed page's widgets
    deadlocks Qt against the GIL; the dashboard collects from a UI-thread timer instead."""
    import subprocess
    import sys

    script = tmp_path / "gc_threads.py"
    script.write_text(GC_THREADS_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120).stdout
    assert "enabled False" in out, out
    names, count = out.split("threads ", 1)[1].rsplit(" ", 1)
    assert names.strip() == "['MainThread']" and int(count) >= 1, out
