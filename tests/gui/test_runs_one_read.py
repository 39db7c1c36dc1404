"""The Runs page shows one read of the open run everywhere: the run list's line and the header come from the same
poll, however the store changes between the list's reads and the page's polls (a real store, a recorded run, the
page offscreen). And the console's wrap choice is kept in the app's settings."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.gui.pages.runs import RunsPage


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return make_runs_page  # type: ignore[no-any-return]


def recorded_run(name: str, current: int) -> RunRecord:
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"step 1\n")
    now = time.time()
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=now, started_at=now, name=name,
                       progress=progress(current))
    with RunStore() as store:
        store.add_run(record)
    return record


def progress(current: int) -> dict[str, object]:
    return {"current": current, "total": 100, "rate": 2.0, "eta_s": (100 - current) / 2.0, "unit": "step"}


def set_progress(run_id: str, current: int) -> None:
    with RunStore() as store:
        store.update_run(run_id, progress=progress(current))


def header_percent(page: RunsPage) -> int:
    match = re.search(r"\((\d+)%\)", page.header.progress_label.text())
    assert match, page.header.progress_label.text()
    return int(match.group(1))


def list_percent(page: RunsPage, name: str) -> int:
    item = next(page.run_list.item(i) for i in range(page.run_list.count())
                if page.run_list.item(i).text().startswith(name + "\n"))
    match = re.search(r" (\d+)%", item.text())
    assert match, item.text()
    return int(match.group(1))


def settled(qtbot, page: RunsPage) -> None:  # type: ignore[no-untyped-def]
    """Wait until neither the page's poll nor the list's read is on its way (twice: an answer may ask again)."""
    for _ in range(2):
        qtbot.waitUntil(lambda: not page.watched.polling and not page.run_list._listing, timeout=10000)
        qtbot.wait(50)


def test_progress_written_between_reads_never_splits_header_and_list(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = recorded_run("one-read", 78)
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: "78 / 100" in page.header.progress_label.text(), timeout=10000)
    qtbot.waitUntil(lambda: page.run_list.has(record.id), timeout=10000)
    # From here the test says when reads happen: the page's own timers would race it.
    page.poller.stop()
    page.list_timer.stop()
    settled(qtbot, page)  # a read asked for before the timers stopped could otherwise land after the next write
    assert header_percent(page) == list_percent(page, "one-read") == 78

    for current in (85, 86, 93):
        set_progress(record.id, current)  # the run moves on after the page's last poll ...
        before = header_percent(page)
        page.run_list.refresh()  # ... and the list reads the store now
        qtbot.waitUntil(lambda c=current: any(r.id == record.id and r.progress and r.progress["current"] == c
                                              for r in page.run_list.records), timeout=10000)
        # The list's read has the new progress; the list shows the run as the header does (the last poll).
        assert list_percent(page, "one-read") == header_percent(page) == before
        page.poll()  # the next poll: both move together
        qtbot.waitUntil(lambda c=current: header_percent(page) == c, timeout=10000)
        assert list_percent(page, "one-read") == current
        page.run_list.refresh()  # a list read after the poll changes nothing either
        qtbot.waitUntil(lambda: not page.run_list._listing, timeout=10000)
        assert list_percent(page, "one-read") == header_percent(page) == current


def headings_above(page: RunsPage, name: str) -> str:
    """The group heading the run's line sits under."""
    heading = ""
    for i in range(page.run_list.count()):
        text = page.run_list.item(i).text()
        if "\n" not in text:
            heading = text
        elif text.startswith(name + "\n"):
            return heading
    raise AssertionError(f"{name} not listed")


def test_a_run_that_ends_moves_under_recent_with_the_poll_that_sees_it_end(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = recorded_run("ends", 50)
    page = make_page()
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.run_list.has(record.id) and "50 / 100" in page.header.progress_label.text(),
                    timeout=10000)
    page.poller.stop()
    page.list_timer.stop()  # no list read from here: the page's poll alone must move the run
    assert headings_above(page, "ends") == "RUNNING"
    with RunStore() as store:
        store.update_run(record.id, state="succeeded", exit_code=0, ended_at=time.time())
    page.poll()
    qtbot.waitUntil(lambda: page.record is not None and page.record.state == "succeeded", timeout=10000)
    assert headings_above(page, "ends") == "RECENT"
    assert "succeeded" in page.run_list.item(page.run_list.currentRow()).text()


def test_the_consoles_wrap_choice_is_kept_in_the_settings(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    page = make_page()
    assert not page.console.wrap and not page.console.wrap_button.isChecked()
    page.console.wrap_button.click()
    assert page.console.wrap
    again = make_page()  # the next window reads the same settings
    assert again.console.wrap and again.console.wrap_button.isChecked()
    again.console.wrap_button.click()
    assert not make_page().console.wrap
