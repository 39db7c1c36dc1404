"""The Queue page: the run store's queued runs in order with what they wait for; hold, move, remove, pause."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import TESTS

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.queue.entries import QueuedLaunch, QueueStore  # noqa: E402


@pytest.fixture
def page(qtbot):
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.queue import QueuePage

    page = QueuePage(AppContext())
    qtbot.addWidget(page)
    yield page
    page.shutdown()
    page.ctx.tasks.wait(10000)


def _names(page) -> list[tuple[str, str, str]]:
    from traindeck.gui.pages.queue import NAME, POS, WAITING

    return [(page.table.item(r, POS).text(), page.table.item(r, NAME).text(), page.table.item(r, WAITING).text())
            for r in range(page.table.rowCount())]


def test_lists_waiting_runs_in_order_and_acts_on_them(qtbot, page):
    with QueueStore() as queue:
        queue.update_settings(paused=True)  # nothing starts while the test looks
        ids = [queue.add(QueuedLaunch(script="t.py"), name=n).id for n in ("a", "b", "c")]
    page.page_shown()
    qtbot.waitUntil(lambda: page.table.rowCount() == 3, timeout=10000)
    assert _names(page) == [("1", "a", "the queue is paused"), ("2", "b", "the queue is paused"),
                            ("3", "c", "the queue is paused")]
    assert "paused" in page.summary.text() and page.buttons["pause"].text() == "&Resume queue"

    page.table.selectRow(2)
    qtbot.mouseClick(page.buttons["up"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: [n for _, n, _ in _names(page)] == ["a", "c", "b"], timeout=10000)
    page.table.selectRow(0)
    qtbot.mouseClick(page.buttons["hold"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.table.rowCount() == 3 and _names(page)[0][2] == "held", timeout=10000)
    page.table.selectRow(2)
    qtbot.mouseClick(page.buttons["remove"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.table.rowCount() == 2, timeout=10000)
    with QueueStore() as queue:
        assert [(e.name, e.held) for e in queue.waiting()] == [("a", True), ("c", False)]
        assert queue.runs.get_run(ids[1]) is None


def test_the_demo_window_reads_the_real_queue(qtbot):
    """`make demo` opens the window with demo=True and launches real runs: its Queue page said "Reading the
    queue..." forever (it skipped every read in demo mode), while a sweep queued from its Launch page waited."""
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.queue import QueuePage

    with QueueStore() as queue:
        queue.update_settings(paused=True)
        queue.add(QueuedLaunch(script="t.py"), name="from-the-demo")
    page = QueuePage(AppContext(demo=True))
    qtbot.addWidget(page)
    try:
        page.page_shown()
        qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=10000)
        assert page.table.item(0, 1).text() == "from-the-demo"
        assert "1 waiting" in page.summary.text()
        page._busy = False
        page.refresh()  # a read under way when the screenshots' made-up queue is shown does not replace it
        page.load_demo()
        page.refresh()
        page.ctx.tasks.wait(5000)
        qtbot.wait(100)
        assert page.table.rowCount() == 3
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_ids_are_shown_whole_and_rows_are_not_numbered_beside_pos(qtbot):
    """The walk-through's screenshot: row numbers 1, 2, 3 beside the Pos column, and ids cut to "20260101-09..."."""
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.queue import QueuePage

    page = QueuePage(AppContext(demo=True))
    qtbot.addWidget(page)
    page.resize(1100, 500)
    page.show()
    page.load_demo()
    qtbot.wait(50)
    try:
        assert page.table.verticalHeader().isHidden()
        from traindeck.gui.pages.queue import ID as id_column
        needed = page.table.fontMetrics().horizontalAdvance(page.table.item(0, id_column).text())
        assert page.table.columnWidth(id_column) >= needed
    finally:
        page.shutdown()


def test_an_empty_queue_says_how_runs_get_there(qtbot, page):
    page.page_shown()
    qtbot.waitUntil(lambda: "empty" in page.summary.text(), timeout=10000)
    assert "Launch page" in page.summary.text() and "queue add" in page.summary.text()


def test_long_names_fit_up_to_a_limit_and_the_last_column_takes_the_room_left(qtbot):
    """Names were cut in a narrow column; a very long one must not push the reason for waiting off the page."""
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.queue import NAME, NAME_MAX_CHARS, QueuePage

    page = QueuePage(AppContext(demo=True))
    qtbot.addWidget(page)
    page.resize(1100, 500)
    page.show()
    page.load_demo()
    fitting = "sweep-lr=3e-05,warmup=0.1,bs=64,seed=7"  # 38 characters: shown whole
    endless = "x" * 300
    rows = [dict(page.rows[1], id="r1", name=fitting), dict(page.rows[1], id="r2", name="short", position=2)]
    page.show_state({"paused": False, "pause_reason": "", "keeper_running": True, "runs": rows})
    qtbot.wait(50)
    try:
        header = page.table.horizontalHeader()
        assert header.stretchLastSection()
        metrics = page.table.fontMetrics()
        assert page.table.columnWidth(NAME) >= metrics.horizontalAdvance(fitting)
        rows.append(dict(page.rows[1], id="r3", name=endless, position=3))
        page.show_state({"paused": False, "pause_reason": "", "keeper_running": True, "runs": rows})
        qtbot.wait(50)
        assert page.table.columnWidth(NAME) <= metrics.horizontalAdvance("x" * (NAME_MAX_CHARS + 4))
        assert page.table.item(2, NAME).toolTip() == endless  # the whole name, on hover
    finally:
        page.shutdown()


@pytest.mark.launch
def test_a_running_queued_run_fills_every_column(qtbot, page):
    """A queued run that started showed a blank row: no position, nothing waited for, no GPUs."""
    from traindeck.gui.pages.queue import COLUMNS, GPUS, POS, STATE, WAITING

    job = TESTS / "fixtures" / "scripts" / "queue_job.py"

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True,
                              timeout=120, cwd=job.parent, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("queue", "--max-running", "1")
    run_id = cli("queue", "add", "--launcher", "python", "--name", "runs-a-while", job.name, "--steps", "600",
                 "--step-time", "0.2").split()[-1]
    try:
        page.page_shown()
        qtbot.waitUntil(lambda: any(r["id"] == run_id and r["state"] == "running" for r in page.rows),
                        timeout=90000)
        row = next(i for i, r in enumerate(page.rows) if r["id"] == run_id)
        cells = [page.table.item(row, c).text() for c in range(len(COLUMNS))]
        assert all(cell.strip() for cell in cells), dict(zip(COLUMNS, cells, strict=True))
        assert cells[STATE] == "running" and cells[POS] == "–" and cells[GPUS] == "–"
        assert cells[WAITING].startswith("nothing: running since ")
    finally:
        cli("queue", "pause")
        subprocess.run([sys.executable, "-m", "traindeck", "stop", run_id, "--grace", "1"], capture_output=True,
                       timeout=120, stdin=subprocess.DEVNULL)


def test_each_row_says_what_it_runs_a_script_a_module_or_a_command(qtbot, page):
    from traindeck.gui.pages.queue import NAME, RUNS

    with QueueStore() as queue:
        queue.update_settings(paused=True)
        for name, launch in (("s", QueuedLaunch(script="train.py", script_args=["--lr", "1e-5"])),
                             ("m", QueuedLaunch(script="axolotl.cli.train", script_args=["x.yaml"], entry="module")),
                             ("c", QueuedLaunch(script="llamafactory-cli", script_args=["train", "my config.yaml"],
                                                entry="command"))):
            queue.add(launch, name=name)
    page.page_shown()
    qtbot.waitUntil(lambda: page.table.rowCount() == 3, timeout=10000)
    cells = [(page.table.item(r, NAME).text(), page.table.item(r, RUNS).text()) for r in range(3)]
    assert cells == [("s", "train.py --lr 1e-5"), ("m", "-m axolotl.cli.train x.yaml"),
                     ("c", "llamafactory-cli train 'my config.yaml'")]
    assert page.table.item(1, RUNS).toolTip().startswith("a module, run as python -m")
