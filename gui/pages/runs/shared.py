"""What the Runs page's parts share (runs_page.py is made of runs_list.py, runs_charts.py and runs_stop.py): the
widgets and state each part reads, declared once; the watched run as callers know it; the store calls on the thread
pool. RunsPage builds and assigns all of it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
)

from traindeck.backend.remote import RemoteRuns, in_source
from traindeck.backend.runs import BoundedSeries, RunEvent, RunRecord, RunStore, WatchedRun
from traindeck.gui.pages.base import Page
from traindeck.gui.widgets.charts import TimeSeriesChart


class RunsPageShared(Page):
    # -- state (assigned in RunsPage.__init__) ---------------------------------------------------------------
    watched: WatchedRun
    records: list[RunRecord]
    confirm_stop: bool
    companion: bool  # the open run's script has traindeck's companion (runs_leftovers.py)
    _store_path: Path | None
    remote: RemoteRuns | None  # another machine's runs instead (use_source; gui/remote_connect.py)
    _stores: dict[Path | None, RunStore]
    _store_lock: threading.Lock
    _closing: bool
    _listed: list[tuple[str, str, str, str, bool]]
    _listing: bool
    _mark_lost: bool
    _opened_by_user: bool
    _undrawn: set[str]
    _drawn: set[str]
    _drawn_extent: dict[str, tuple[float, float, float]]
    _detail: dict[str, tuple[float, float, BoundedSeries]]
    _drawn_at: float
    _metric_labels: dict[str, QLabel]
    last_stacks: Any
    stacks_box: QMessageBox | None
    # -- widgets (built in RunsPage._build) -------------------------------------------------------------------
    run_list: QListWidget
    stop_button: QPushButton
    stacks_button: QPushButton
    stop_panel: QFrame
    stop_title: QLabel
    stop_label: QLabel
    diagnosis_panel: QFrame
    diagnosis_summary: QLabel
    diagnosis_evidence: QLabel
    diagnosis_advice: QLabel
    loss_chart: TimeSeriesChart
    other_chart: TimeSeriesChart
    other_box: QComboBox
    metrics_grid: QGridLayout
    _other_layout: QVBoxLayout
    _charts_layout: QHBoxLayout

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

    # ================================================================================================ store calls
    def _call(self, fn: Callable[..., Any], *args: Any, done: Callable[[Any], None] | None = None,
              failed: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        """fn(store, *args) on a worker thread, with the page's store connection (opened there on first use)."""
        self.ctx.tasks.run(self._in_store, self._where(), fn, *args, done=done,
                           failed=failed or self._report_failure, **kwargs)

    def _where(self) -> Path | RemoteRuns | None:
        return self.remote if self.remote is not None else self._store_path

    def _in_store(self, path: Path | RemoteRuns | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, RemoteRuns):  # the remote machine's counterpart of the same call, over SSH
            return in_source(path, fn, *args, **kwargs)
        # The lock is never taken on the UI thread: opening a store may wait for SQLite's write lock.
        with self._store_lock:
            store = self._stores.get(path)
            if store is None:
                store = self._stores[path] = RunStore(path)
        return fn(store, *args, **kwargs)

    def _close_stores(self) -> None:
        with self._store_lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()

    def _report_failure(self, text: str) -> None:
        if not self._closing:
            self.ctx.status.emit(f"Runs: {text.splitlines()[0] if text else 'failed'}")
