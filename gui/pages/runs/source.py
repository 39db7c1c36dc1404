"""Where the Runs page reads runs from: this machine's run store, the demo's store of its own, or another machine's
runs over SSH; and the calls to it on the thread pool, each with a store connection opened and used on worker
threads only. The page and its panels share one: the panels that read the store are given it when built."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traindeck.backend.remote import RemoteRuns, in_source
from traindeck.backend.runs import RunStore
from traindeck.gui.context import AppContext


class RunsSource:
    """One source of runs at a time (the page switches it); calls to it run on the thread pool."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.store_path: Path | None = None  # None: the user's run store; the demo uses a store of its own
        self.remote: RemoteRuns | None = None  # another machine's runs instead (gui/remote_connect.py)
        self.mark_lost = True  # list runs whose supervisor is gone as lost (not the demo's: they have none)
        self.closing = False  # the window is closing: answers still on their way are dropped
        self._stores: dict[Path | None, RunStore] = {}  # by path; opened and used on worker threads only
        self._lock = threading.Lock()

    def call(self, fn: Callable[..., Any], *args: Any, done: Callable[[Any], None] | None = None,
             failed: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        """fn(store, *args) on a worker thread, with this source's store connection (opened there on first use)."""
        self.ctx.tasks.run(self.in_store, self.where(), fn, *args, done=done,
                           failed=failed or self.report_failure, **kwargs)

    def where(self) -> Path | RemoteRuns | None:
        return self.remote if self.remote is not None else self.store_path

    def in_store(self, path: Path | RemoteRuns | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, RemoteRuns):  # the remote machine's counterpart of the same call, over SSH
            return in_source(path, fn, *args, **kwargs)
        # The lock is never taken on the UI thread: opening a store may wait for SQLite's write lock.
        with self._lock:
            store = self._stores.get(path)
            if store is None:
                store = self._stores[path] = RunStore(path)
        return fn(store, *args, **kwargs)

    def close_stores(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()

    def report_failure(self, text: str) -> None:
        if not self.closing:
            self.ctx.status.emit(f"Runs: {text.splitlines()[0] if text else 'failed'}")


def create_demo_store(folder: Path) -> tuple[Path, str]:
    """A run in progress and a few finished ones, in a store of their own under `folder`: the store's path and the
    running run's id."""
    from traindeck.backend.runs import create_demo_runs, create_failed_demo, create_running_demo

    store_path = folder / "runs.sqlite3"
    create_demo_runs(store_path, folder / "runs")
    create_failed_demo(store_path, folder / "runs")
    return store_path, create_running_demo(store_path, folder / "runs")
