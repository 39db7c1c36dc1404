"""File > Connect to machine...: the dashboard watching another machine's runs over SSH.

The connection is a backend Session (one ssh ControlMaster in a private temp directory); every call over it runs
on the thread pool (ctx.tasks), never on the UI thread. Once connected, the Runs page reads the remote source
(backend/remote/runs.py) instead of the local run store: its list, a run's followed log, stop; the Queue page reads
and acts on the machine's queue. The window title names the machine; the status bar shows the machine's resources;
File > Launch on the machine... starts a run there. The other pages (Monitor, History, Launch, Configure,
Estimate) keep showing this machine.

While connected, the line above every page (the window's machine_line) says which machine that page shows, and
what of the other one is not shown there (charts are not read over SSH); on this machine alone it is hidden.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QWidget,
)

from traindeck.backend.remote import RemoteRuns, Session, Target
from traindeck.gui.context import AppContext
from traindeck.gui.tasks import TaskError

RECENT_KEY = "remote/recent_hosts"
TRAINDECK_KEY = "remote/traindeck"
MAX_RECENT = 8
RESOURCES_MS = 5000
TITLE = "traindeck"


def machine_line_text(page: str, host: str, here: str) -> str:
    """What the line above a page says while connected to `host`: which machine the page shows (`here`: this
    machine's name), and what of `host` it does not show."""
    if page == "runs":
        return (f"Showing {host} (over SSH): its runs, their logs and latest metrics. Metric and resource charts "
                f"are not shown for another machine's runs (connected to {host}).")
    if page == "queue":
        return f"Showing {host}'s queue (over SSH)."
    if page == "monitor":
        return (f"Showing this machine ({here}), not {host}: resource charts are not shown for another machine's "
                f"runs (connected to {host}); {host}'s CPU, memory and GPUs are in the status bar.")
    if page == "launch":
        return (f"Showing this machine ({here}): a launch here starts on {here}; "
                f"File > Launch on the machine… starts a run on {host}.")
    return f"Showing this machine ({here}), not {host}: {host}'s runs are on the Runs page, its queue on the Queue page."


def open_remote(host: str, traindeck: str | None) -> RemoteRuns:
    """Connect (on a worker thread): the persistent connection, checked to reach a traindeck there."""
    session = Session(Target.make(host, traindeck or None))
    session.open()
    return RemoteRuns(session)


def resources_text(sample: dict[str, Any]) -> str:
    """One status-bar line of a `monitor --json` sample: CPU, memory, each GPU's use and memory."""
    host = sample.get("host") or {}
    parts = []
    if host.get("cpu_percent") is not None:
        parts.append(f"CPU {host['cpu_percent']:.0f}%")
    if host.get("ram_used_bytes") is not None and host.get("ram_total_bytes"):
        parts.append(f"RAM {host['ram_used_bytes'] / 2**30:.1f}/{host['ram_total_bytes'] / 2**30:.1f} GiB")
    for gpu in sample.get("gpus") or []:
        used, total = gpu.get("memory_used_bytes"), gpu.get("memory_total_bytes")
        memory = f" {used / 2**30:.1f}/{total / 2**30:.1f} GiB" if used is not None and total else ""
        util = f" {gpu['utilization_percent']:.0f}%" if gpu.get("utilization_percent") is not None else ""
        parts.append(f"GPU{gpu.get('index', '')}{util}{memory}")
    if not sample.get("gpus") and sample.get("gpu_error"):
        parts.append("no GPU")
    return ", ".join(parts) or "no figures"


class ConnectDialog(QDialog):
    def __init__(self, recent: list[str], traindeck: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Connect to machine")
        self.host_box = QComboBox()
        self.host_box.setEditable(True)
        self.host_box.addItems(recent)
        self.host_box.setToolTip("USER@MACHINE or a Host of your ssh config; key-based login (no password prompt)")
        line = self.host_box.lineEdit()
        if line is not None:  # an empty box said nothing of what goes in it
            line.setPlaceholderText("me@gpu-box, or a Host of your ssh config")
        self.host_box.setMinimumContentsLength(28)
        self.traindeck_field = QLineEdit(traindeck)
        self.traindeck_field.setPlaceholderText("traindeck (on the machine's PATH)")
        self.traindeck_field.setToolTip("The traindeck command on that machine, when it is not on its PATH for "
                                        "ssh, e.g. /home/me/venv/bin/traindeck")
        form = QFormLayout(self)
        form.addRow("Machine", self.host_box)
        form.addRow("traindeck there", self.traindeck_field)
        form.addRow(QLabel("Over SSH only: nothing is opened on the machine beyond its SSH server."))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)


class RemoteConnector(QObject):
    """The window's remote connection: at most one machine at a time."""

    def __init__(self, window: QMainWindow, ctx: AppContext, page: Callable[[str], Any]):
        super().__init__(window)
        self.window, self.ctx = window, ctx
        self._page = page  # the window's page by key (built on demand)
        self.here = socket.gethostname() or "this machine"
        # The line above every page (the window's; a plain label when the window has none, as in a bare test).
        line = getattr(window, "machine_line", None)
        self.machine_line: QLabel = line if isinstance(line, QLabel) else QLabel()
        self.machine_line.setStyleSheet("QLabel { padding: 4px 6px; font-weight: 600; "
                                        "background: palette(alternate-base); border-bottom: 1px solid palette(mid); }")
        nav = getattr(window, "nav", None)
        if nav is not None:  # the page shown changed: the line says what that one shows
            nav.currentRowChanged.connect(lambda _row: self._show_machine_line())
        self.remote: RemoteRuns | None = None
        self.connecting: str | None = None
        self.last_error = ""
        self.resources = ""
        self._resources_busy = False
        self.resources_label = QLabel()
        window.statusBar().addPermanentWidget(self.resources_label)
        self.timer = QTimer(self)
        self.timer.setInterval(RESOURCES_MS)
        self.timer.timeout.connect(self._ask_resources)

    # ---- menu ---------------------------------------------------------------------------------------------------
    def add_actions(self, menu: QMenu) -> None:
        self.connect_action = QAction("Connect to &machine…", self.window)
        self.connect_action.triggered.connect(self.ask_and_connect)
        self.launch_action = QAction("&Launch on the machine…", self.window)
        self.launch_action.triggered.connect(self.ask_and_launch)
        self.back_action = QAction("&Back to this machine", self.window)
        self.back_action.triggered.connect(self.back_to_local)
        for action in (self.connect_action, self.launch_action, self.back_action):
            menu.addAction(action)
        menu.addSeparator()
        self._update_actions()

    def _update_actions(self) -> None:
        if hasattr(self, "back_action"):
            self.back_action.setEnabled(self.remote is not None)
            self.launch_action.setEnabled(self.remote is not None)

    def recent_hosts(self) -> list[str]:
        value = self.ctx.settings.value(RECENT_KEY, [])
        hosts = [value] if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else []
        return [str(h) for h in hosts if h]

    def ask_and_connect(self) -> None:
        dialog = ConnectDialog(self.recent_hosts(), str(self.ctx.settings.value(TRAINDECK_KEY, "") or ""),
                               self.window)
        if dialog.exec() == QDialog.DialogCode.Accepted and dialog.host_box.currentText().strip():
            self.connect_to(dialog.host_box.currentText().strip(), dialog.traindeck_field.text().strip())

    # ---- connecting -------------------------------------------------------------------------------------------------
    def connect_to(self, host: str, traindeck: str = "") -> None:
        if self.connecting:
            return
        self.connecting = host
        self.last_error = ""
        self.ctx.status.emit(f"Connecting to {host}…")
        self.ctx.tasks.run(open_remote, host, traindeck or None,
                           done=lambda remote: self._connected(host, traindeck, remote),
                           failed=self._failed)

    def _connected(self, host: str, traindeck: str, remote: RemoteRuns) -> None:
        self.connecting = None
        old, self.remote = self.remote, remote
        if old is not None:
            self.ctx.tasks.run(old.close)
        recent = [host] + [h for h in self.recent_hosts() if h != host]
        self.ctx.settings.setValue(RECENT_KEY, recent[:MAX_RECENT])
        self.ctx.settings.setValue(TRAINDECK_KEY, traindeck)
        self.window.setWindowTitle(f"{TITLE} — {host}")
        self._page("runs").use_source(remote)
        self._page("queue").use_remote(remote)
        self.ctx.navigate.emit("runs")
        self._show_machine_line()
        self.ctx.status.emit(f"Connected to {host} ({remote.session.remote_version})")
        self._update_actions()
        self.timer.start()
        self._ask_resources()

    def _failed(self, error: TaskError) -> None:
        self.connecting = None
        self.last_error = str(error)
        self.ctx.status.emit(f"Not connected: {error}")
        box = QMessageBox(QMessageBox.Icon.Warning, "Connect to machine", str(error), parent=self.window)
        box.setModal(False)
        box.show()

    def back_to_local(self) -> None:
        remote, self.remote = self.remote, None
        self.timer.stop()
        self.resources_label.clear()
        self.window.setWindowTitle(TITLE)
        self._page("runs").use_source(None)
        self._page("queue").use_remote(None)
        self._show_machine_line()
        if remote is not None:
            self.ctx.tasks.run(remote.close)
        self._update_actions()

    def current_page(self) -> str:
        """The key of the page the window shows ("" when it cannot say)."""
        stack = getattr(self.window, "stack", None)
        page = stack.currentWidget() if stack is not None else None
        return str(getattr(page, "key", "") or "")

    def _show_machine_line(self) -> None:
        remote = self.remote
        if remote is None:  # this machine alone: nothing to tell apart
            self.machine_line.clear()
            self.machine_line.hide()
            return
        self.machine_line.setText(machine_line_text(self.current_page(), remote.host, self.here))
        self.machine_line.show()

    def shutdown(self) -> None:
        """The window closes: end the connection (the remote runs go on)."""
        self.timer.stop()
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.close()

    # ---- resources and launch -----------------------------------------------------------------------------------------
    def _ask_resources(self) -> None:
        remote = self.remote
        if remote is None or self._resources_busy:
            return
        self._resources_busy = True
        self.ctx.tasks.run(remote.resources, done=lambda s: self._resources_arrived(remote, s),
                           failed=lambda e: self._resources_arrived(remote, None, str(e)))

    def _resources_arrived(self, remote: RemoteRuns, sample: dict[str, Any] | None, error: str = "") -> None:
        self._resources_busy = False
        if remote is not self.remote:
            return
        self.resources = f"{remote.host}: " + (resources_text(sample) if sample is not None else
                                                f"resources not read ({error.splitlines()[0] if error else '?'})")
        self.resources_label.setText(self.resources)

    def ask_and_launch(self) -> None:
        from PySide6.QtWidgets import QInputDialog

        remote = self.remote
        if remote is None:
            return
        text, ok = QInputDialog.getText(self.window, f"Launch on {remote.host}",
                                        "Script on the machine, and its arguments (as `traindeck run` takes them):")
        if ok and text.strip():
            self.launch(text)

    def launch(self, command_line: str) -> None:
        import shlex

        remote = self.remote
        if remote is None:
            return
        try:
            args = shlex.split(command_line)
        except ValueError as exc:
            self.ctx.status.emit(f"Launch: {exc}")
            return
        self.ctx.tasks.run(remote.launch, args, done=lambda run_id: self._launched(remote, run_id),
                           failed=lambda e: self.ctx.status.emit(f"Launch on {remote.host} failed: {e}"))

    def _launched(self, remote: RemoteRuns, run_id: str) -> None:
        if remote is self.remote:
            self.ctx.status.emit(f"Started run {run_id} on {remote.host}")
            self.ctx.open_run.emit(run_id)
