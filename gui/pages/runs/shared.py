"""What the Runs page's parts share (runs_page.py is made of runs_list.py, runs_charts.py and runs_stop.py): the
widgets and state each part reads, declared once; the watched run as callers know it. RunsPage builds and assigns
all of it; the store calls are source.py's."""

from __future__ import annotations

from traindeck.backend.runs import RunEvent, RunRecord, WatchedRun
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.pages.runs.stop_panel import StopPanel


class RunsPageShared(Page):
    # -- state (assigned in RunsPage.__init__) ---------------------------------------------------------------
    watched: WatchedRun
    source: RunsSource
    # -- widgets (built in RunsPage._build) -------------------------------------------------------------------
    stop_panel: StopPanel

    # -- what the page does that its parts call ------------------------------------------------------------------
    def _open(self, run_id: str, by_user: bool, poll: bool = True) -> None:
        raise NotImplementedError  # RunsPage

    def poll(self) -> None:
        raise NotImplementedError  # RunsPage

    # The watched run, as the page's callers and tests know it.
    @property
    def run_id(self) -> str | None:
        return self.watched.run_id

    @property
    def record(self) -> RunRecord | None:
        return self.watched.record

    @property
    def events(self) -> list[RunEvent]:
        return self.watched.events

    @property
    def stop_lines(self) -> list[str]:
        return self.watched.stop_lines

    @property
    def remaining(self) -> list[int] | None:
        return self.watched.remaining

    @property
    def _other_name(self) -> str | None:
        return self.watched.other
