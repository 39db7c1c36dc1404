"""Inside the step, in the dashboard: the Runs page's Step tab over the real run store (planted step rows: the
per-rank table with the slowest rank marked, the verdict, the empty state and its reason, the rank switch, and the
tab following a live run), the Launch page's step-timing box, and History's two step anatomies side by side."""

from __future__ import annotations

import html
import json
import shutil
import time
from collections.abc import Callable

import pytest
from PySide6.QtCore import QSettings
from support.probe_fixture import probe_cache  # noqa: F401 (a fixture)

from traindeck.backend.core import paths
from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.presets import load_preset
from traindeck.backend.runs import STEP_TIMING_ENV, run_step_anatomy
from traindeck.backend.runs.control.step_view import RECENT_STEPS
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.steps import PHASES, StepRecord, analyse
from traindeck.gui.context import AppContext
from traindeck.gui.pages.history.compare_panel import anatomy_rows
from traindeck.gui.pages.runs import RunsPage
from traindeck.gui.pages.runs import step_panel as step_module

GIB = 1 << 30


def add_run(name: str, state: str = "running", env: dict[str, str] | None = None) -> RunRecord:
    """A run as the store knows it (no processes): its directory, output.log and command.json, and its row."""
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"")
    atomic_write_text(run_dir.command, json.dumps({"argv": ["python", "train.py"], "env": env or {}}))
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name=name,
                       started_at=time.time())
    with RunStore() as store:
        store.add_run(record)
        if state != "running":
            store.finish_run(record.id, state)
        return store.get_run(record.id) or record


def steps(rank: int, count: int, backward: float, first: int = 1, communication: float = 20.0) -> list[StepRecord]:
    """`count` steps of one rank: forward 10 ms, `backward`, `communication`, optimizer 5 ms, other 2 ms."""
    out = []
    for step in range(first, first + count):
        phases = {"forward": 10.0, "backward": backward, "communication": communication, "optimizer": 5.0,
                  "swap": 0.0, "other": 2.0}
        out.append(StepRecord(rank=rank, step=step, t=1000.0 + step, step_ms=sum(phases.values()), phases_ms=phases,
                              gpu_allocated=2 * GIB, gpu_reserved=3 * GIB, gpu_peak_allocated=(4 + rank) * GIB,
                              gpu_peak_reserved=5 * GIB, host_rss=GIB, host_pinned=0))
    return out


def plant(record: RunRecord, *records: list[StepRecord]) -> None:
    with RunStore() as store:
        for batch in records:
            store.add_steps(record.id, batch)


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return lambda: make_runs_page((1280, 860))  # type: ignore[no-any-return]


def open_step_tab(qtbot, page: RunsPage, run_id: str) -> step_module.StepPanel:  # type: ignore[no-untyped-def]
    page.open_run(run_id)
    page.lower_tabs.setCurrentIndex(page.lower_tabs.step_tab)
    qtbot.waitUntil(lambda: page.step_panel.view is not None, timeout=10000)
    return page.step_panel


def table_cells(panel: step_module.StepPanel) -> list[list[str]]:
    table = panel.table
    return [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]


def test_the_step_tab_shows_each_ranks_median_step_and_marks_the_slowest(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("zero3")
    plant(record, steps(0, 12, backward=40.0), steps(1, 12, backward=90.0))  # rank 1 does more of its own work
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)
    assert page.lower_tabs.tabText(page.lower_tabs.step_tab) == "Step"
    assert panel.pages.currentIndex() == 1 and panel.isVisible()
    rows = table_cells(panel)
    header = [panel.table.horizontalHeaderItem(c).text() for c in range(panel.table.columnCount())]
    assert header == ["Rank", "Steps", *PHASES, "Step", "GPU peak", "Host peak"]
    assert [row[0] for row in rows] == ["0", "1 (slowest)"]
    assert rows[0][1] == "12" and rows[1][1] == "12"
    # Rank 1: backward 90 of 127 ms; its step, GPU and host peaks.
    assert rows[1][header.index("backward")] == "90.0 ms  71%"
    assert rows[0][header.index("backward")] == "40.0 ms  52%"
    assert rows[1][header.index("Step")] == "127.0 ms"
    assert rows[1][header.index("GPU peak")] == "5.0 GiB" and rows[1][header.index("Host peak")] == "1.0 GiB"
    assert panel.table.item(1, 0).font().bold() and not panel.table.item(0, 0).font().bold()
    expected = run_step_anatomy(record)
    assert expected.slowest_rank == 1 and expected.bound == "compute"
    assert panel.verdict.text() == expected.summary and "forward and backward" in panel.verdict.text()
    assert expected.advice and all(f"• {html.escape(advice)}" in panel.details.text() for advice in expected.advice)
    # The bars: one stacked bar per rank's median step (all ranks side by side), one colour per phase in the legend.
    box = panel.rank_box
    assert [box.itemText(i) for i in range(box.count())] == ["All ranks side by side", "rank 0", "rank 1 (slowest)"]
    assert panel.chosen_rank() is None
    assert [label.text for _sample, label in panel.legend.items] == list(PHASES)
    backward = panel._bars[PHASES.index("backward")].opts
    assert list(backward["x"]) == [0.0, 1.0] and list(backward["height"]) == [40.0, 90.0]
    assert list(backward["y0"]) == [10.0, 10.0]  # on top of forward
    assert len({bar.opts["brush"] for bar in panel._bars}) == len(PHASES)


def test_evenly_matched_ranks_are_not_marked_slowest(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("balanced")
    plant(record, steps(0, 12, backward=40.0), steps(1, 12, backward=41.0))  # rank 1 slower by 1 ms in 78
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)
    assert [row[0] for row in table_cells(panel)] == ["0", "1"]
    assert not panel.table.item(1, 0).font().bold()
    box = panel.rank_box
    assert [box.itemText(i) for i in range(box.count())] == ["All ranks side by side", "rank 0", "rank 1"]
    assert "evenly matched" in panel.table.toolTip()
    assert "is the slowest" not in panel.verdict.text()


def test_hovering_a_bar_says_its_phases_and_total(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QPointF
    from PySide6.QtTest import QTest

    record = add_run("hover")
    plant(record, steps(0, 12, backward=40.0), steps(1, 12, backward=90.0))
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)
    assert panel.hover_at(1.0) == ("rank 1, its typical step: 127.0 ms\n  backward 90.0 ms\n  communication 20.0 ms\n"
                                   "  forward 10.0 ms\n  optimizer 5.0 ms\n  other 2.0 ms")
    assert panel.hover_at(0.5) == ""  # between the bars
    panel.rank_box.setCurrentIndex(panel.rank_box.findText("rank 0"))
    assert panel.hover_at(7.0).startswith("step 7 of rank 0: 77.0 ms\n  backward 40.0 ms")
    # The mouse over a bar: the readout follows it.
    view_box = panel.plot.getPlotItem().getViewBox()
    qtbot.waitUntil(lambda: view_box.sceneBoundingRect().width() > 0, timeout=5000)
    where = panel.plot.mapFromScene(view_box.mapViewToScene(QPointF(9.0, 30.0)))
    QTest.mouseMove(panel.plot.viewport(), where)
    qtbot.waitUntil(lambda: panel.hover_text.startswith("step 9 of rank 0"), timeout=5000)


def test_the_legend_wraps_instead_of_being_cut_in_a_narrow_plot(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("narrow")
    plant(record, steps(0, 12, backward=40.0))
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)

    def room() -> float:
        return panel.plot.width() - panel.plot.getPlotItem().getAxis("left").width()

    page.resize(1900, 860)
    qtbot.waitUntil(lambda: panel.legend.columnCount == len(PHASES), timeout=5000)  # wide: the phases in one row
    assert panel.legend.layout.preferredWidth() <= room()
    page.resize(700, 860)  # the window made narrow: the plot is too narrow for the six in a row
    qtbot.waitUntil(lambda: panel.legend.columnCount < len(PHASES), timeout=5000)
    assert panel.legend.layout.preferredWidth() <= room()
    assert [label.text for _sample, label in panel.legend.items] == list(PHASES)


def test_alt_b_takes_the_focus_to_the_bars_of_box_and_the_arrows_choose_the_rank(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """The Step tab's "Bars of" box has a key as its neighbours do (Alt+S the tab, Alt+M the charts' smoothing):
    Alt+B from anywhere on the page opens the tab with the focus in the box; Down then shows rank 0's steps."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    record = add_run("keys")
    plant(record, steps(0, 12, backward=40.0), steps(1, 12, backward=90.0))
    page = make_page()
    open_step_tab(qtbot, page, record.id)
    page.lower_tabs.setCurrentWidget(page.charts)
    page.run_list.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is page.run_list, timeout=5000)
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_B, Qt.KeyboardModifier.AltModifier)
    panel = page.step_panel
    assert page.lower_tabs.currentWidget() is panel
    qtbot.waitUntil(lambda: QApplication.focusWidget() is panel.rank_box, timeout=5000)
    assert panel.chosen_rank() is None
    QTest.keyClick(panel.rank_box, Qt.Key.Key_Down)
    assert panel.chosen_rank() == 0
    assert "Alt+B" in panel.rank_box.toolTip()


def test_the_rank_box_shows_one_ranks_latest_steps(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("two ranks")
    many = RECENT_STEPS + 15
    plant(record, steps(0, many, backward=40.0), steps(1, many, backward=90.0))
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)
    panel.rank_box.setCurrentIndex(panel.rank_box.findText("rank 0"))
    assert panel.chosen_rank() == 0
    bars = panel._bars[PHASES.index("backward")].opts
    assert list(bars["x"]) == [float(s) for s in range(16, many + 1)]  # the latest RECENT_STEPS steps
    assert set(bars["height"]) == {40.0}
    assert page.step_panel.plot.getPlotItem().getAxis("bottom").labelText == "step of rank 0"
    panel.rank_box.setCurrentIndex(panel.rank_box.findText("rank 1 (slowest)"))
    assert set(panel._bars[PHASES.index("backward")].opts["height"]) == {90.0}
    panel.rank_box.setCurrentIndex(0)
    assert len(panel._bars[0].opts["x"]) == 2


def test_a_run_timed_off_says_so_instead_of_a_table(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("untimed", state="succeeded", env={STEP_TIMING_ENV: "0"})
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)
    assert panel.pages.currentIndex() == 0 and panel.empty.isVisible()
    assert panel.empty.text() == "No step timed: step timing was off for this run (--no-step-timing)."
    assert panel.table.rowCount() == 0


def test_the_tab_follows_a_live_run_from_no_step_to_its_steps(qtbot, make_page, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(step_module, "STEP_MS", 0)
    record = add_run("live")
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)
    assert panel.empty.text() == ("No step timed: waiting for the first optimizer step to end.\n"
                                  f"Read again every {step_module.STEP_MS // 1000} s while the run goes.")
    plant(record, steps(0, 3, backward=40.0))
    qtbot.waitUntil(lambda: panel.table.rowCount() == 1, timeout=20000)  # read again with the page's own polls
    assert table_cells(panel)[0][:2] == ["0", "3"]
    assert panel.freshness.text().startswith("live: read ")  # the figures move: said beside the rank box
    assert panel.rank_box.count() == 1 and panel.chosen_rank() == 0  # one rank: its steps, no side by side
    plant(record, steps(0, 2, backward=40.0, first=4))
    qtbot.waitUntil(lambda: table_cells(panel)[0][1] == "5", timeout=20000)
    assert list(panel._bars[0].opts["x"]) == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_run_that_ended_behind_another_tab_shows_its_last_steps_when_the_tab_is_back(qtbot, make_page, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(step_module, "STEP_MS", 600_000)  # no read for time's sake: only the one owed at the end
    record = add_run("ends unseen")
    plant(record, steps(0, 3, backward=40.0))
    page = make_page()
    panel = open_step_tab(qtbot, page, record.id)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 1, timeout=10000)
    page.lower_tabs.setCurrentIndex(0)
    plant(record, steps(0, 4, backward=40.0, first=4))
    with RunStore() as store:
        store.finish_run(record.id, "succeeded")
    page.poll()
    qtbot.waitUntil(lambda: page.record is not None and page.record.finished, timeout=10000)
    qtbot.waitUntil(lambda: page.ctx.tasks.waiting == 0, timeout=10000)  # every answer delivered
    assert table_cells(panel)[0][1] == "3"  # hidden: not read
    page.lower_tabs.setCurrentIndex(page.lower_tabs.step_tab)
    qtbot.waitUntil(lambda: table_cells(panel)[0][1] == "7", timeout=10000)


def test_the_tab_is_read_only_while_it_is_shown(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("unseen", state="succeeded")
    plant(record, steps(0, 5, backward=40.0))
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.record is not None and page.record.id == record.id, timeout=10000)
    qtbot.waitUntil(lambda: page.ctx.tasks.waiting == 0, timeout=10000)  # every answer delivered
    assert page.step_panel.view is None  # the Charts tab is the one shown: nothing read for the Step tab
    page.lower_tabs.setCurrentIndex(page.lower_tabs.step_tab)
    qtbot.waitUntil(lambda: page.step_panel.table.rowCount() == 1, timeout=10000)


# ------------------------------------------------------------------------------------------------ Launch
@pytest.fixture
def make_launch_page(qtbot, traindeck_home, probe_cache):  # type: ignore[no-untyped-def]  # noqa: F811
    from traindeck.gui.pages.launch import LaunchPage

    shutil.copytree(probe_cache, traindeck_home / "cache" / "probes")
    contexts = []

    def make():  # type: ignore[no-untyped-def]
        settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
        ctx = AppContext(settings=settings)
        ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
        contexts.append(ctx)
        page = LaunchPage(ctx)
        qtbot.addWidget(page)
        return page

    yield make
    for ctx in contexts:
        ctx.tasks.wait(30000)


def test_the_launch_box_turns_step_timing_off_for_the_run_and_is_remembered(qtbot, make_launch_page, tmp_path):  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    page = make_launch_page()
    box = page.alert_settings.step_timing
    assert box.isChecked() and "forward, backward, communication, optimizer" in box.text() and box.toolTip()
    page.script_box.script.setText(str(script))
    assert STEP_TIMING_ENV not in page.request().env  # on: the run times its steps (the hook's default)
    box.setChecked(False)
    assert page.request().env[STEP_TIMING_ENV] == "0"
    page._save_timer.timeout.emit()  # what the page does a moment after a change
    again = make_launch_page()
    assert not again.alert_settings.step_timing.isChecked()
    assert again.request().env[STEP_TIMING_ENV] == "0"
    again.alert_settings.step_timing.setChecked(True)
    assert STEP_TIMING_ENV not in again.request().env


# ------------------------------------------------------------------------------------------------ History
def test_history_compares_two_runs_step_anatomies(qtbot) -> None:  # type: ignore[no-untyped-def]
    from traindeck.gui.pages.history import HistoryPage

    zero2, zero3 = add_run("zero2", state="succeeded"), add_run("zero3", state="succeeded")
    plant(zero2, steps(0, 10, backward=40.0, communication=10.0), steps(1, 10, backward=45.0, communication=10.0))
    plant(zero3, steps(0, 10, backward=40.0, communication=200.0), steps(1, 10, backward=40.0, communication=210.0))
    page = HistoryPage(AppContext())
    qtbot.addWidget(page)
    try:
        panel = page.compare_panel
        panel.compare(zero2.id, zero3.id)
        qtbot.waitUntil(lambda: panel.step_anatomies is not None, timeout=10000)
        a, b = panel.step_anatomies
        assert (a.bound, b.bound) == ("compute", "communication")
        assert panel.tabs.tabText(4) == "&Step anatomy"  # Alt+S, as the Runs page's Step tab
        table = panel.steps_table
        rows = {table.item(r, 0).text().strip(): [table.item(r, c).text() for c in (1, 2, 3)]
                for r in range(table.rowCount())}
        # Rank 1's 5 ms more of backward is a hair: neither run has a rank the others wait for.
        assert rows["Rank"][:2] == ["rank 1 of 2 (ranks evenly matched)", "rank 0 of 2 (ranks evenly matched)"]
        assert table.horizontalHeaderItem(0).text() == "Typical step of one rank"
        assert rows["communication"] == ["10.0 ms", "200.0 ms", "+190.0 ms (20.00x)"]
        assert rows["backward"] == ["45.0 ms", "40.0 ms", "-5.0 ms (0.89x)"]
        assert rows["optimizer"] == ["5.0 ms", "5.0 ms", "same"]
        assert rows["swap"] == ["0.0 ms", "0.0 ms", "same"]
        assert rows["Bound by"] == ["compute", "communication", "differs"]
        # A close second is said in the row too: 55 ms of compute against 60 of communication.
        close = anatomy_rows(a, analyse(steps(0, 10, backward=45.0, communication=60.0)))
        assert close[-1] == ("Bound by", "compute", "communication (compute close behind)", "differs")
        verdicts = panel.steps_verdicts.text()
        assert f"<b>A</b>: {html.escape(a.summary)}<br><b>B</b>: {html.escape(b.summary)}" == verdicts
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_alt_s_opens_historys_step_anatomy_tab(qtbot) -> None:  # type: ignore[no-untyped-def]
    """History's comparison: Alt+S (its underlined S) opens the Step anatomy tab from anywhere on the page, as Alt+S
    opens the Runs page's Step tab; F1's list says so."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from traindeck.gui.main_window import SHORTCUTS
    from traindeck.gui.pages.history import HistoryPage

    a, b = add_run("a", state="succeeded"), add_run("b", state="succeeded")
    plant(a, steps(0, 10, backward=40.0))
    plant(b, steps(0, 10, backward=50.0))
    page = HistoryPage(AppContext())
    qtbot.addWidget(page)
    try:
        page.show()
        qtbot.waitExposed(page)
        panel = page.compare_panel
        panel.compare(a.id, b.id)
        qtbot.waitUntil(lambda: panel.step_anatomies is not None, timeout=10000)
        assert panel.tabs.currentIndex() != 4
        page.run_table.table.setFocus()
        qtbot.waitUntil(lambda: QApplication.focusWidget() is page.run_table.table, timeout=5000)
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_S, Qt.KeyboardModifier.AltModifier)
        assert panel.tabs.currentIndex() == 4 and panel.tabs.currentWidget().isVisible()
        assert ("Alt+S", "History: the comparison's Step anatomy tab") in SHORTCUTS
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_history_says_a_phase_that_all_but_vanished_in_milliseconds() -> None:
    """50.5 ms of data loading in A, 0.2 ms in B: the change reads "-50.3 ms (0.004x)", not "0.00x (lower)"."""
    from traindeck.backend.steps import analyse
    from traindeck.gui.pages.history.compare_panel import anatomy_rows

    def run(other: float) -> list[StepRecord]:
        return [StepRecord(rank=0, step=n, t=float(n), step_ms=20.0 + other,
                           phases_ms={"forward": 5.0, "backward": 15.0, "other": other}) for n in range(1, 11)]

    rows = {row[0].strip(): row[1:] for row in anatomy_rows(analyse(run(50.5)), analyse(run(0.2)))}
    assert rows["other"] == ("50.5 ms", "0.2 ms", "-50.3 ms (0.004x)")
    assert rows["Step"] == ("70.5 ms", "20.2 ms", "-50.3 ms (0.29x)")
    assert rows["Rank"][:2] == ("rank 0 of 1", "rank 0 of 1")


def test_history_calls_a_rank_the_slowest_only_where_the_step_tab_marks_it() -> None:
    """One rule for "slowest" (StepAnatomy.straggler): run A's rank 1 does 40% more work of its own and is the
    slowest, as the Step tab marks it; run B's ranks differ by a hair, so its rank is shown without the claim."""
    from traindeck.backend.steps import analyse
    from traindeck.gui.pages.history.compare_panel import anatomy_rows

    lagging = analyse(steps(0, 10, backward=40.0) + steps(1, 10, backward=63.0))
    even = analyse(steps(0, 10, backward=41.0) + steps(1, 10, backward=40.0))
    assert (lagging.straggler, even.straggler, even.slowest_rank) == (1, None, 0)
    rows = {row[0].strip(): row[1:] for row in anatomy_rows(lagging, even)}
    assert rows["Rank"][:2] == ("rank 1 of 2, the slowest", "rank 0 of 2 (ranks evenly matched)")
    assert rows["backward"][:2] == ("63.0 ms", "41.0 ms")


def test_a_multi_node_runs_table_says_each_ranks_machine() -> None:
    from traindeck.backend.steps import RunFacts, analyse

    records = [StepRecord(rank=rank, step=n, t=1.0 + n, step_ms=100.0,
                          phases_ms={"forward": 10.0, "communication": 5.0 if rank == 1 else 85.0,
                                     "other": 85.0 if rank == 1 else 5.0})
               for rank in (0, 1) for n in range(1, 12)]
    anatomy = analyse(records, facts=RunFacts(rank_hosts={0: "node-a", 1: "node-b"}))
    assert [row.cells[0] for row in step_module.rank_rows(anatomy)] == ["0 (node-a)", "1 (node-b) (slowest)"]


def test_history_sets_the_ranks_host_memory_side_by_side() -> None:
    """ZeRO-3 with parameter offload holds the parameters in host RAM: on a CPU-only or offloaded run the host peak
    is the memory figure that moved, where the GPU row has nothing."""
    from traindeck.backend.steps import analyse
    from traindeck.gui.pages.history.compare_panel import anatomy_rows

    def run(rss_mib: int) -> list[StepRecord]:
        return [StepRecord(rank=0, step=n, t=float(n), step_ms=20.0, phases_ms={"backward": 20.0},
                           host_rss=rss_mib << 20) for n in range(1, 11)]

    rows = {row[0].strip(): row[1:] for row in anatomy_rows(analyse(run(400)), analyse(run(900)))}
    assert rows["GPU peak (allocated)"] == ("-", "-", "")
    assert rows["Host peak (RSS)"] == ("400 MiB", "900 MiB", "2.25x (higher)")
