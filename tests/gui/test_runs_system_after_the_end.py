"""The System view by step after the run's end: its shutdown (ranks exiting, files flushed after the last step) is
placed at no step, neither when the run is opened ended nor when the view watched it end; the note says so."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.monitor.demo import demo_samples
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.snapshots import ResourceSample
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.gui.pages.runs import RunsPage

WAIT_MS = 20000
LAST_STEP = 59


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return lambda: make_runs_page((1500, 950))  # type: ignore[no-any-return]


def add_run(state: str) -> tuple[RunRecord, list[ResourceSample]]:
    """A run logging a loss every 2 s from 10 s in up to LAST_STEP, with samples recorded 60 s past its last step."""
    samples = demo_samples(seconds=190, end=time.time() - 5)
    first = samples[0].t
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"")
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name="ends",
                       state=state, started_at=first)
    with RunStore() as store:
        store.add_run(record)
        store.add_metrics(record.id, [("loss", step, first + 10 + 2 * step, 3.0 - 0.01 * step, None)
                                      for step in range(LAST_STEP + 1)])
    writer = ResourceWriter(run_store_path(), record.id, interval_s=1.0, started_at=first)
    for sample in samples:
        writer.write(sample, commit=False)
    writer.commit()
    writer.close()
    return record, samples


def open_by_step(qtbot, page: RunsPage, record: RunRecord) -> None:  # type: ignore[no-untyped-def]
    page.charts.set_x_mode("step")
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.record is not None, timeout=WAIT_MS)
    page.charts.system_button.click()


def placed_steps(page: RunsPage) -> np.ndarray:
    x, _y = page.charts.system.charts["cpu"].data("host")
    return np.asarray(x)


def test_an_ended_runs_samples_after_its_last_step_are_at_no_step(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record, samples = add_run("succeeded")
    page = make_page()
    open_by_step(qtbot, page, record)
    qtbot.waitUntil(lambda: len(placed_steps(page)) > 0, timeout=WAIT_MS)
    x = placed_steps(page)
    last_t = samples[0].t + 10 + 2 * LAST_STEP
    assert x.max() <= LAST_STEP  # no step the run never ran
    assert len(x) == sum(1 for s in samples if samples[0].t + 10 <= s.t <= last_t)
    assert "after its last logged step" in page.charts.system.note.text()


def test_a_run_seen_ending_takes_back_the_steps_it_was_guessed_at(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record, _samples = add_run("running")
    page = make_page()
    open_by_step(qtbot, page, record)
    # Live: a sample after the newest logged step sits at the step the run is guessed to be at by now.
    qtbot.waitUntil(lambda: len(placed_steps(page)) > 0 and placed_steps(page).max() > LAST_STEP, timeout=WAIT_MS)
    assert "after its last" not in page.charts.system.note.text()
    with RunStore() as store:
        store.update_run(record.id, state="succeeded", exit_code=0, ended_at=time.time())
    qtbot.waitUntil(lambda: page.record is not None and page.record.finished, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: len(placed_steps(page)) > 0 and placed_steps(page).max() <= LAST_STEP, timeout=WAIT_MS)
    assert "after its last logged step" in page.charts.system.note.text()
