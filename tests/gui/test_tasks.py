"""ctx.tasks: work runs off the UI thread, results come back on it, and a closed page's results are dropped."""

from __future__ import annotations

import threading

from PySide6.QtWidgets import QLabel

from traindeck.gui.tasks import Tasks


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
