"""The Runs page over the real run store: the list (running first), opening runs, progress, metrics, diagnosis and
stall warning; and, with real runs of resources/demo/train_tiny.py, live output, reattaching from a new page, Stop
and Force stop (checked by counting the run's processes left)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, Qt

from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor.liveness import run_processes
from traindeck.gui.pages.runs import RunsPage

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "resources" / "demo" / "train_tiny.py"


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return make_runs_page  # type: ignore[no-any-return]


def add_run(name: str, state: str = "running", log: bytes = b"", created: float | None = None,
            **fields: object) -> RunRecord:
    """A run as the store knows it (no processes): its directory with an output.log, and its row."""
    run_dir = create_run_dir()
    run_dir.output.write_bytes(log)
    queued = state == "queued"  # as the queue adds one: not started
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=created or time.time(), name=name,
                       started_at=None if queued else created or time.time(),
                       **({"state": "queued"} if queued else {}), **fields)  # type: ignore[arg-type]
    with RunStore() as store:
        store.add_run(record)
        if state not in ("running", "queued"):
            store.finish_run(record.id, state)
        return store.get_run(record.id) or record


def list_texts(page: RunsPage) -> list[str]:
    return [page.run_list.item(i).text().split("\n")[0] for i in range(page.run_list.count())]


def test_a_stopped_runs_traceback_is_called_the_expected_shape_of_a_stop(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    from traindeck.gui.pages.runs import STOPPED_TRACEBACK_NOTE

    record = add_run("stopped", log=b"step 1\nTraceback (most recent call last):\nKeyboardInterrupt\n")
    with RunStore() as store:
        store.finish_run(record.id, "stopped", exit_code=130, diagnosis={"summary": "Stopped on request."})
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.diagnosis_panel.isVisible(), timeout=10000)
    assert STOPPED_TRACEBACK_NOTE in page.diagnosis_panel.evidence.text()
    assert "expected, not a failure" in STOPPED_TRACEBACK_NOTE


def settled_minimum_width(page: RunsPage) -> int:
    """The page's minimum width once Qt has laid it out: a button just shown reaches the page's size hint only when
    the layout requests it posted have been handled (read before, the hint is stale: CI measured 804 px for the
    short name's header and 863 for the same header a moment later)."""
    widths = [-1]
    while True:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        widths.append(page.minimumSizeHint().width())
        if widths[-1] == widths[-2] or len(widths) > 10:
            return widths[-1]


def test_a_long_run_name_is_cut_and_never_widens_the_window(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """Seen in the walk-through: a 90-character name made the window 1715 px wide on a 1600 px screen, with Stop
    off its edge (and the width saved for the next start)."""
    short = add_run("tiny", state="running")
    page = make_page()
    page.open_run(short.id)
    qtbot.waitUntil(lambda: page.header.name_label.full_text() == "tiny" and page.stop_panel.stop_button.isVisible(), timeout=10000)
    narrow = settled_minimum_width(page)
    name = "sweep-" + "-".join(f"lr={v}" for v in ("1e-5", "3e-5", "1e-4")) + "-zero3-offload-nvme-" + "x" * 41
    assert len(name) >= 90
    record = add_run(name, state="running")
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.header.name_label.full_text() == name and page.stop_panel.stop_button.isVisible(), timeout=10000)
    assert settled_minimum_width(page) <= narrow + 10
    page.resize(1000, 700)
    page.show()
    qtbot.waitExposed(page)
    shown = page.header.name_label.text()
    assert shown != name and "…" in shown and shown.startswith("sweep-") and shown.endswith("x")
    assert name in page.header.name_label.toolTip() and record.id in page.header.name_label.toolTip()
    assert page.stop_panel.stop_button.geometry().right() <= page.width()


def test_failed_run_shows_its_diagnosis_prominently(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("llama", log=b"step 1\n[rank1]: torch.OutOfMemoryError: CUDA out of memory.\n")
    diagnosis = {"summary": "Rank 1 ran out of GPU memory (CUDA out of memory).", "kind": "cuda_oom", "rank": 1,
                 "evidence": ["[rank1]: torch.OutOfMemoryError: CUDA out of memory.",
                              "rank 1 (pid 4242) exited with code 1 at 12:00:03, before the other ranks"],
                 "advice": "Lower the micro-batch size."}
    with RunStore() as store:
        store.finish_run(record.id, "failed", exit_code=1, diagnosis=diagnosis, state_detail=diagnosis["summary"])
    page = make_page()
    page.ctx.open_run.emit(record.id)
    qtbot.waitUntil(lambda: page.diagnosis_panel.isVisible(), timeout=10000)
    assert page.diagnosis_panel.summary.text() == "Failed: Rank 1 ran out of GPU memory (CUDA out of memory)."
    assert page.diagnosis_panel.evidence.text().splitlines() == [f"• {e}" for e in diagnosis["evidence"]]
    assert page.diagnosis_panel.advice.text() == "What to do: Lower the micro-batch size."
    assert page.state_text() == "failed"
    assert not page.stop_panel.stop_button.isVisible() and not page.stop_panel.force_button.isVisible()
    qtbot.waitUntil(lambda: page.console.ended, timeout=10000)
    assert page.console.shown_lines() == ["step 1", "[1] torch.OutOfMemoryError: CUDA out of memory."]


def test_the_diagnosis_panel_lists_follow_ons_and_which_memory_ran_out(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("cascade")
    diagnosis = {"summary": "Rank 1 ran out of host memory: the CPU allocator refused an allocation.",
                 "kind": "cpu_alloc", "rank": 1, "memory": "host", "advice": "Lower the batch size.",
                 "evidence": ["[rank1]: RuntimeError: DefaultCPUAllocator: can't allocate memory"],
                 "follow_ons": ["rank 0: RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:1234"]}
    with RunStore() as store:
        store.finish_run(record.id, "failed", exit_code=1, diagnosis=diagnosis, state_detail=diagnosis["summary"])
    page = make_page()
    page.ctx.open_run.emit(record.id)
    qtbot.waitUntil(lambda: page.diagnosis_panel.isVisible(), timeout=10000)
    assert page.diagnosis_panel.evidence.text().splitlines() == [
        "Out of: host RAM", "• [rank1]: RuntimeError: DefaultCPUAllocator: can't allocate memory",
        "Then (consequences, not the cause):", "• rank 0: RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:1234"]


def test_stall_warning_shows_while_the_supervisor_says_stalled(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("slow", state_detail="stalled: no output or progress for 12 min; a step usually takes 1.5 s",
                     progress={"current": 78, "total": 100, "rate": 8.86, "eta_s": 200, "unit": "step"})
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.header.stall_panel.isVisible(), timeout=10000)
    assert "no output or progress for 12 min" in page.header.stall_label.text()
    # The last rate and ETA do not stand frozen as if they held: the progress line and the list say stalled.
    assert page.header.progress_label.text() == "78 / 100 steps (78%) · stalled: no time left can be told"
    assert list_texts(page)[1] == "slow"
    assert page.run_list.item(1).text().splitlines()[1].startswith("stalled · 78% · since ")
    with RunStore() as store:
        store.update_run(record.id, state_detail="")  # the supervisor saw output again
    qtbot.waitUntil(lambda: not page.header.stall_panel.isVisible(), timeout=10000)
    assert page.header.progress_label.text() == "78 / 100 steps (78%) · 8.86 steps/s · 3:20 left"


def test_page_opens_the_newest_running_run_and_lists_running_runs_first(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    add_run("older running", created=now - 20)
    newer = add_run("newer running", created=now - 10)
    done = add_run("finished", state="succeeded", created=now - 5)
    add_run("waiting", state="queued", created=now - 3)  # in the queue: its own group, no duration ticking
    page = make_page()
    qtbot.waitUntil(lambda: page.run_id == newer.id, timeout=10000)  # reattached without being asked
    qtbot.waitUntil(lambda: page.run_list.count() == 7, timeout=10000)
    assert list_texts(page) == ["RUNNING", "newer running", "older running", "QUEUED", "waiting", "RECENT",
                                "finished"]
    assert page.run_list.item(4).text().splitlines()[1].startswith("queued at ")
    assert page.run_list.currentItem().text().startswith("newer running")
    page.run_list.setCurrentRow(6)  # the user picks the finished one
    qtbot.waitUntil(lambda: page.record is not None and page.record.id == done.id, timeout=10000)
    assert page.state_text() == "succeeded"


def test_progress_metrics_and_charts_of_an_open_run(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("charts", progress={"current": 120, "total": 400, "rate": 8.0, "eta_s": 35.0, "unit": "it"})
    with RunStore() as store:
        store.add_metrics(record.id, [(name, step, 1000.0 + step, value, None)
                                      for step in range(10, 130, 10)
                                      for name, value in (("loss", 3.0 - step / 100), ("learning_rate", 1e-4),
                                                          ("epoch", step / 400))])
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") == 12, timeout=10000)
    assert page.header.progress_label.text() == "120 / 400 it (30%) · 8 it/s · 0:35 left"
    assert page.header.progress_bar.value() == 300
    assert page.charts.other_box.currentText() == "learning_rate"
    qtbot.waitUntil(lambda: page.charts.other_chart.point_count("learning_rate") == 12, timeout=10000)
    with RunStore() as store:  # more points arrive: only the new ones are appended
        store.add_metrics(record.id, [("loss", 130, 1130.0, 1.7, None)])
        store.update_run(record.id, progress={"current": 130, "total": 400, "rate": 8.0, "eta_s": 34.0, "unit": "it"})
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") == 13, timeout=10000)
    assert page.charts.loss_chart.last("loss") == pytest.approx(1.7)
    qtbot.waitUntil(lambda: page.header.progress_bar.value() == 325, timeout=10000)
    # Issue 12: the list said 32% while the header said 38%. The list's line comes from the record the header
    # shows, at the header's cadence (the list itself refreshes more slowly).
    item = next(page.run_list.item(i) for i in range(page.run_list.count())
                if page.run_list.item(i).text().startswith("charts"))
    assert "(32%)" in page.header.progress_label.text() and "32%" in item.text(), (page.header.progress_label.text(), item.text())
    page.charts.other_box.setCurrentText("epoch")
    qtbot.waitUntil(lambda: page.charts.other_chart.point_count("epoch") == 12, timeout=10000)
    assert page.charts.other_chart.title == "epoch"


def test_demo_run_looks_real_and_stays_out_of_the_users_store(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    page = make_page()
    page.load_demo()
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") > 10, timeout=10000)
    qtbot.waitUntil(lambda: page.console.rank_box.count() == 3, timeout=10000)  # All ranks, Rank 0, Rank 1
    assert page.state_text() == "running"
    assert "1,240 / 2,000" in page.header.progress_label.text() and "left" in page.header.progress_label.text()
    # The tqdm bar keeps one line while it is in sight (the Trainer's dicts come in between its redraws): a line at
    # most every BAR_REACH lines, the newest drawing in the last one, within BAR_REACH lines of the end.
    from traindeck.backend.runs.control.console_feed import BAR_REACH

    shown = page.console.shown_lines()
    at = [i for i, line in enumerate(shown) if line.startswith("[0] train:")]
    assert at and shown[at[-1]].startswith("[0] train:  62%") and len(shown) - 1 - at[-1] <= BAR_REACH
    assert all(b - a > BAR_REACH for a, b in zip(at, at[1:], strict=False)), at
    qtbot.waitUntil(lambda: list_texts(page)[:2] == ["RUNNING", "gpt2-finetune"], timeout=10000)
    with RunStore() as store:
        assert store.list_runs() == []


def test_open_run_from_another_page_reaches_a_runs_page_not_built_yet(qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from traindeck.gui.app import create_window

    monkeypatch.setenv("TRAINDECK_NO_CLOSE_PROMPT", "1")
    newer_running = add_run("running now")
    old = add_run("from history", state="failed", created=time.time() - 3600)
    _app, window = create_window()
    qtbot.addWidget(window)
    window.show()
    assert "runs" not in window.pages  # pages are built on first show
    window.ctx.open_run.emit(old.id)  # what History's "Open" does
    page = window.pages["runs"]
    qtbot.waitUntil(lambda: page.record is not None and page.record.id == old.id, timeout=10000)
    assert window.stack.currentWidget() is page
    # The page's first look at the runs (which reattaches to a running one when nothing was asked for) comes back
    # meanwhile: it must not take over.
    qtbot.waitUntil(lambda: page.run_list.count() == 4, timeout=10000)  # RUNNING, running now, RECENT, history
    assert page.run_id == old.id and page.record.id == old.id and newer_running.id != old.id
    window.close()


# ---- real runs ------------------------------------------------------------------------------------------------
def launch_demo(*args: str) -> RunRecord:
    """train_tiny.py the way the Launch page starts it: LaunchRequest -> build_plan -> start_run (python launcher)."""
    from traindeck.backend.launch.builders import LaunchRequest, build_plan
    from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run

    run_dir = new_run_dir()
    request = LaunchRequest(script=str(DEMO), script_args=list(args), launcher="python", cwd=run_dir.path)
    plan = build_plan(request, run_dir.path)
    assert plan.ok, plan.errors
    return start_run(plan, run_dir, name="tiny")


def current_step(page: RunsPage) -> int:
    return int(((page.record.progress if page.record else None) or {}).get("current") or 0)


def make_sure_it_ends(run_id: str) -> None:
    with RunStore() as store:
        record = store.get_run(run_id)
        if record is not None and not record.finished:
            stop_run(store, run_id, grace_s=1.0)


@pytest.mark.launch
@pytest.mark.slow
def test_real_run_streams_into_the_page_a_new_page_reattaches_and_stop_stops_it(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = launch_demo("--steps", "5000", "--step-time", "0.02", "--log-every", "25")
    try:
        first = make_page()
        first.ctx.run_started.emit(record.id)  # what the Launch page says after starting it
        qtbot.waitUntil(lambda: "train_tiny: mode=python" in first.console.text(), timeout=90000)
        qtbot.waitUntil(lambda: current_step(first) >= 50, timeout=60000)
        step = current_step(first)
        qtbot.waitUntil(lambda: current_step(first) > step, timeout=30000)  # progress keeps coming
        # (drawn on the page's next clock tick, within a second of the read)
        qtbot.waitUntil(lambda: "/ 5,000 steps" in first.header.progress_label.text()
                        and "steps/s" in first.header.progress_label.text(), timeout=5000)
        qtbot.waitUntil(lambda: "'loss'" in first.console.text(), timeout=30000)
        lines = first.console.shown_lines()
        bar_lines = [line for line in lines if "/5000 [" in line]
        # tqdm redraws the bar every 0.2 s, but the console shows one bar line between two loss lines at most.
        assert bar_lines and len(bar_lines) <= sum("'loss'" in line for line in lines) + 1
        assert first.stop_panel.stop_button.isVisible() and first.stop_panel.stop_button.isEnabled()
        first.shutdown()  # the window closes; the run goes on

        second = make_page()  # the window is opened again: it finds the run and follows it
        qtbot.waitUntil(lambda: second.run_id == record.id, timeout=10000)
        qtbot.waitUntil(lambda: "train_tiny: mode=python" in second.console.text(), timeout=10000)  # from the start
        step = current_step(second)
        qtbot.waitUntil(lambda: current_step(second) > step, timeout=30000)
        qtbot.waitUntil(lambda: second.console.shown_lines()[-1:] != [lines[-1]], timeout=30000)  # output too

        second.confirm_stop = False
        qtbot.mouseClick(second.stop_panel.stop_button, Qt.MouseButton.LeftButton)
        assert not second.stop_panel.stop_button.isEnabled() and second.stop_panel.story.isVisible()
        qtbot.waitUntil(lambda: second.record is not None and second.record.state == "stopped", timeout=60000)
        qtbot.waitUntil(lambda: second.remaining is not None, timeout=30000)
        story = second.stop_panel.story_label.text()
        assert "stop requested" in story and "sent SIGINT" in story and "asked the run to stop" not in story
        assert story.splitlines()[-1] == "confirmed: no process of the run remains"
        assert second.remaining == []
        with RunStore() as store:
            done = store.get_run(record.id)
        assert done is not None and run_processes(record.id, done) == []
        assert done.diagnosis is not None and done.diagnosis["kind"] == "stopped"
        assert second.stop_panel.story_title.text() == "Stopped" and "Stopped on request gracefully (SIGINT)" in story
        assert not second.stop_panel.stop_button.isVisible()
        qtbot.waitUntil(lambda: second.console.ended, timeout=10000)
    finally:
        make_sure_it_ends(record.id)


@pytest.mark.launch
@pytest.mark.slow
def test_force_stop_kills_a_run_at_once(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = launch_demo("--steps", "5000", "--step-time", "0.02")
    try:
        page = make_page()
        page.open_run(record.id)
        qtbot.waitUntil(lambda: current_step(page) >= 5, timeout=90000)
        page.confirm_stop = False
        qtbot.mouseClick(page.stop_panel.force_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: page.record is not None and page.record.state == "stopped", timeout=30000)
        qtbot.waitUntil(lambda: page.remaining is not None, timeout=30000)
        assert "force stop" in page.stop_panel.story_label.text() and "SIGKILL" in page.stop_panel.story_label.text()
        assert page.remaining == []
        assert page.record.state_detail == "stopped forcefully (SIGKILL)"
    finally:
        make_sure_it_ends(record.id)


def test_off_screen_the_page_reads_but_draws_nothing_and_catches_up_on_return(qtbot, make_page, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from traindeck.gui.pages.runs import HIDDEN_POLL_MS, POLL_MAX_MS
    from traindeck.gui.pages.runs import charts_panel as runs_charts

    record = add_run("hidden", log=b"line 1\n")
    with RunStore() as store:
        store.add_metrics(record.id, [("loss", step, 1000.0 + step, 1.0 / step, None) for step in range(1, 11)])
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") == 10 and "line 1" in page.console.shown_lines(),
                    timeout=10000)
    for leave, back in ((page.hide, page.show),
                        (lambda: (page.showMinimized(), page.window_minimised(True)),
                         lambda: (page.showNormal(), page.window_minimised(False)))):
        leave()
        qtbot.waitUntil(lambda: not page.on_screen(), timeout=5000)
        assert page.console.paused and page.poll_timer.interval() == HIDDEN_POLL_MS
        drawn = page.charts.loss_chart.point_count("loss")
        lines = len(page.console.shown_lines())
        with record.log_path.open("ab") as log:
            log.write(b"".join(f"more {drawn} {i}\n".encode() for i in range(5)))
        with RunStore() as store:
            store.add_metrics(record.id, [("loss", step, 1000.0 + step, 1.0 / step, None)
                                          for step in range(drawn + 1, drawn + 11)])
        page.poll()  # a poll off screen reads the news into the page's series, and draws none of it
        qtbot.waitUntil(lambda d=drawn: page.watched.series["loss"].count == d + 10, timeout=10000)
        qtbot.wait(1500)
        assert page.charts.loss_chart.point_count("loss") == drawn
        assert len(page.console.shown_lines()) == lines
        # Written after the last poll off screen: read by the poll on return, and drawn as it arrives, without
        # waiting for the charts' pace (made a minute here, so only a catch-up draw can pass).
        with RunStore() as store:
            store.add_metrics(record.id, [("loss", step, 1000.0 + step, 1.0 / step, None)
                                          for step in range(drawn + 11, drawn + 16)])
        with monkeypatch.context() as patch:  # (not monkeypatch.undo(): that would undo TRAINDECK_HOME too)
            patch.setattr(runs_charts, "CHART_MS", 60_000)
            back()
            qtbot.waitUntil(lambda d=drawn: page.charts.loss_chart.point_count("loss") == d + 15, timeout=10000)
        qtbot.waitUntil(lambda d=drawn: f"more {d} 4" in page.console.shown_lines(), timeout=10000)
        assert not page.console.paused and page.poll_timer.interval() <= POLL_MAX_MS  # live pace again


def test_polling_backs_off_while_nothing_changes(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    from traindeck.gui.pages.runs import POLL_MAX_MS, POLL_MS

    record = add_run("quiet", log=b"waiting\n")
    with RunStore() as store:
        store.add_metrics(record.id, [("loss", 1, 1000.0, 2.0, None)])
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.poll_timer.interval() == POLL_MAX_MS, timeout=20000)
    with RunStore() as store:
        store.add_metrics(record.id, [("loss", 2, 1001.0, 1.5, None)])
    qtbot.waitUntil(lambda: page.poll_timer.interval() == POLL_MS, timeout=10000)
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") == 2, timeout=10000)


def test_a_zoom_into_the_reduced_history_reads_that_range_again_at_full_resolution(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    from traindeck.backend.runs.record.series import DEFAULT_RECENT

    record = add_run("long", log=b"training\n")
    total = 3 * DEFAULT_RECENT  # the oldest two thirds are held as min/max buckets only
    with RunStore() as store:
        store.add_metrics(record.id, [("loss", step, 1000.0 + step, 1.0 + (step % 7) / 10, None)
                                      for step in range(1, total + 1)])
    page = make_page()
    page.open_run(record.id)
    chart = page.charts.loss_chart
    qtbot.waitUntil(lambda: chart.point_count("loss") > 0, timeout=20000)

    def shown_between(low: float, high: float) -> int:
        xs, _ys = chart.data("loss")
        return int(((xs >= low) & (xs <= high)).sum())

    assert chart.point_count("loss") < total  # bounded: the old part folded
    assert shown_between(100, 300) < 201
    chart.plot_item.getViewBox().setXRange(100, 300, padding=0)
    chart._range_changed_by_user()  # what a wheel zoom or a drag calls
    qtbot.waitUntil(lambda: shown_between(100, 300) == 201, timeout=20000)  # every step of the range
    chart.follow()  # "A": back to the newest data, and to the bounded history
    qtbot.waitUntil(lambda: shown_between(100, 300) < 201, timeout=20000)


def test_a_multi_node_runs_nodes_are_side_by_side_in_their_tab(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """The Nodes tab shows each node of a multi-node run (the files the node watch keeps: nodes.json from the
    launch, nodes_state.json from the agents) and is absent for a one-machine run."""
    import json

    one = add_run("one-machine", state="succeeded")
    many = add_run("two-nodes", state="failed")
    Path(many.run_dir, "nodes.json").write_text(json.dumps({"hosts": [
        {"host": "127.0.0.2", "slots": 1, "ranks": [0]}, {"host": "127.0.0.3", "slots": 1, "ranks": [1]}]}))
    Path(many.run_dir, "nodes_state.json").write_text(json.dumps({"nodes": [
        {"host": "127.0.0.2", "peaks": {"ranks_rss_bytes": 2**30, "ram_used_bytes": 3 * 2**30,
                                       "ram_total_bytes": 8 * 2**30, "cpu_percent": 97.0}},
        {"host": "127.0.0.3", "peaks": {}, "reachable": False, "unreachable": "ssh exit 255",
         "ended": {"1": 1.0}}]}))
    page = make_page()
    page.open_run(many.id)
    qtbot.waitUntil(lambda: page.nodes_table.rowCount() == 2, timeout=10000)
    assert page.lower_tabs.isTabVisible(page.lower_tabs.nodes_tab) and page.lower_tabs.tabText(page.lower_tabs.nodes_tab) == "Nodes (2)"
    cells = [[page.nodes_table.item(r, c).text() for c in range(page.nodes_table.columnCount())] for r in range(2)]
    assert cells[0] == ["127.0.0.2", "0", "1.00 GiB", "3.00 GiB of 8.00 GiB", "97 %", "-", "answering"]
    assert cells[1][0] == "127.0.0.3" and cells[1][-1] == "unreachable: ssh exit 255; ended ranks 1"
    page.open_run(one.id)
    qtbot.waitUntil(lambda: page.run_id == one.id and page.record is not None, timeout=10000)
    page.ctx.tasks.wait(5000)
    qtbot.wait(200)
    assert not page.lower_tabs.isTabVisible(page.lower_tabs.nodes_tab) and page.nodes_table.rowCount() == 0
