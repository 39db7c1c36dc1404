"""Monitor page, issue 26: the whole machine's process table (real processes, a real run marker: sorted, filtered,
the watched run's rows highlighted, snapshotted only while on screen), and "Watch run" following a run started
outside this window (a run the CLI or the queue started: only its record in the run store tells)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, Qt  # noqa: E402

from traindeck.gui.context import AppContext  # noqa: E402
from traindeck.gui.pages.monitor.processes_panel import COLUMNS  # noqa: E402

WAIT_MS = 15000
SCREENSHOTS = Path(os.environ.get("TRAINDECK_PROCTABLE_SHOTS", "/tmp/proctable"))
RUN, COMMAND = COLUMNS.index("Run"), COLUMNS.index("Command")


@pytest.fixture
def page(qtbot, traindeck_home: Path):
    from traindeck.gui.pages.monitor import MonitorPage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue("monitor/interval", 0.5)
    ctx = AppContext(settings=settings)
    page = MonitorPage(ctx)
    qtbot.addWidget(page)
    page.resize(1280, 760)
    yield page
    page.shutdown()
    ctx.tasks.wait(10000)


def _record(run_id: str, pid: int, home: Path, started: float, name: str = "train_tiny") -> None:
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    me = psutil.Process()  # its supervisor: this test process, alive (a run without one is lost)
    with RunStore() as store:  # as `traindeck run` and the queue's worker record a run they start
        store.add_run(RunRecord(id=run_id, run_dir=str(home), created_at=started, name=name, state="running",
                                started_at=started, launcher_pid=pid, supervisor_pid=me.pid,
                                supervisor_started=me.create_time()))


def _marked_child(run_id: str) -> subprocess.Popen:
    # Busy for a moment, then idle: a CPU figure to sort by, without holding one of the machine's two cores.
    code = "import sys, time\nend = time.time() + 1.5\nwhile time.time() < end: pass\nsys.stdin.read()"
    return subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, TRAINDECK_RUN_ID=run_id),
                            stdin=subprocess.PIPE)


def _column(page, column: int) -> list[str]:
    model = page.processes.model
    return [model.index(row, column).data() for row in range(model.rowCount())]


def test_the_process_table_lists_the_machine_sorted_filtered_and_the_watched_run_highlighted(page, qtbot,
                                                                                                 traindeck_home):
    child = _marked_child("20260101-120000-ab12")
    try:
        _record("20260101-120000-ab12", child.pid, traindeck_home, time.time())
        page.show()
        qtbot.waitExposed(page)
        page.page_shown()
        assert not page.bridge.machine_processes  # not snapshotted while the tab is not shown
        page.tabs.setCurrentWidget(page.processes)
        assert page.bridge.machine_processes
        qtbot.waitUntil(lambda: page.picker.watched is not None, timeout=WAIT_MS)  # it follows the running run
        shown = time.monotonic()
        qtbot.waitUntil(lambda: str(child.pid) in _column(page, 0), timeout=WAIT_MS)
        assert time.monotonic() - shown < 1.8  # the first snapshot in about one interval, not after 2 s
        qtbot.waitUntil(lambda: "processes" in page.processes.summary.text(), timeout=WAIT_MS)
        model = page.processes.model
        pids = [int(text) for text in _column(page, 0)]
        assert os.getpid() in pids and len(pids) > 5  # the whole machine, this test included
        row = pids.index(child.pid)
        assert model.index(row, RUN).data() == "train_tiny · ab12"  # the run, named as the picker names it
        assert model.index(row, 1).data() and "python" in model.index(row, COMMAND).data()
        assert model.index(row, 0).data(Qt.ItemDataRole.BackgroundRole) is not None  # highlighted
        assert model.index(row, 0).data(Qt.ItemDataRole.FontRole).bold()
        mine = pids.index(os.getpid())
        assert model.index(mine, 0).data(Qt.ItemDataRole.BackgroundRole) is None
        assert "1 of the watched run (highlighted)" in page.processes.summary.text()
        # The first snapshot already has CPU % (a reading is taken one interval before it): the busy child leads.
        cpu = [page.processes.table.rows[r].cpu_percent for r in range(model.rowCount())]
        assert sum(c is not None for c in cpu) > 5
        _screenshot(page, "processes.png")

        # Sorted by a click on a header: RSS, largest first, then smallest first.
        header = page.processes.view.horizontalHeader()
        # Unknown RSS (a zombie's, shown "-") last in either order.
        header.setSortIndicator(3, Qt.SortOrder.DescendingOrder)
        rss = [page.processes.table.rows[r].rss_bytes for r in range(model.rowCount())]
        known = [r for r in rss if r is not None]
        assert rss == sorted(known, reverse=True) + [None] * (len(rss) - len(known))
        header.setSortIndicator(3, Qt.SortOrder.AscendingOrder)
        rss = [page.processes.table.rows[r].rss_bytes for r in range(model.rowCount())]
        known = [r for r in rss if r is not None]
        assert rss == sorted(known) + [None] * (len(rss) - len(known))
        header.setSortIndicator(0, Qt.SortOrder.AscendingOrder)
        assert [int(t) for t in _column(page, 0)] == sorted(int(t) for t in _column(page, 0))

        # The selection stays on its process across snapshots and sorts.
        page.processes.view.selectRow([int(t) for t in _column(page, 0)].index(child.pid))
        header.setSortIndicator(2, Qt.SortOrder.DescendingOrder)
        selected = page.processes.view.selectionModel().selectedRows()
        assert len(selected) == 1 and selected[0].data() == str(child.pid)

        # Filtered by the box: the run's id (every word must match), a PID.
        page.processes.filter_edit.setText("ab12 PYTHON")
        assert _column(page, 0) == [str(child.pid)]
        page.processes.filter_edit.setText(str(os.getpid()))
        assert str(os.getpid()) in _column(page, 0)
        assert "of" in page.processes.summary.text().split("processes")[0]  # "n of N processes"
        page.processes.filter_edit.clear()
        assert len(_column(page, 0)) > 5
        _screenshot(page, "processes-sorted.png")

        # Snapshots stop off screen: another tab, the page hidden.
        page.tabs.setCurrentWidget(page.host_panel)
        assert not page.bridge.machine_processes
        page.tabs.setCurrentWidget(page.processes)
        assert page.bridge.machine_processes
        page.hide()
        assert not page.bridge.machine_processes
    finally:
        child.kill()
        child.wait()


def test_watch_run_follows_a_run_started_from_the_cli_or_the_queue(page, qtbot, traindeck_home):
    """Issue 26: "Watch run" followed only runs launched from this window. A run that starts anywhere else is only
    a new record in the run store: the picker, listing the store every few seconds, watches the newest one, also
    over a run it was watching."""
    first = subprocess.Popen(["sleep", "60"])
    second = subprocess.Popen(["sleep", "60"])
    try:
        _record("20260101-100000-aaaa", first.pid, traindeck_home, time.time() - 60, name="first")
        page.show()
        qtbot.waitExposed(page)
        page.page_shown()
        qtbot.waitUntil(lambda: page.picker.watched is not None, timeout=WAIT_MS)
        assert page.picker.watched.id == "20260101-100000-aaaa" and page.bridge.root_pid == first.pid
        _record("20260101-100100-bbbb", second.pid, traindeck_home, time.time(), name="second")  # the CLI's
        started = time.monotonic()
        qtbot.waitUntil(lambda: page.picker.watched.id == "20260101-100100-bbbb", timeout=WAIT_MS)
        assert time.monotonic() - started < 7  # the picker's own listing (every 3 s) found it, no Refresh pressed
        assert page.bridge.root_pid == second.pid
        assert page.picker.combo.currentData().id == "20260101-100100-bbbb"
        # A run the person picks holds while nothing new starts.
        index = next(i for i in range(page.picker.combo.count())
                     if page.picker.combo.itemData(i) is not None and page.picker.combo.itemData(i).id.endswith("aaaa"))
        page.picker.combo.setCurrentIndex(index)
        page.picker.combo.activated.emit(index)
        page.picker.refresh()
        page.ctx.tasks.wait(5000)
        qtbot.wait(200)
        assert page.picker.watched.id == "20260101-100000-aaaa"
    finally:
        for child in (first, second):
            child.kill()
            child.wait()


def _screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.grab().save(str(SCREENSHOTS / name))
