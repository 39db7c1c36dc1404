"""The Launch page's "Several machines" box: a DeepSpeed hostfile edited as a table of hosts and slots, the
nodes' SSH port, and Check hosts, the pre-flight checks of every host shown one row per check.

The page launches with the saved file as `--hostfile` (and `--ssh-port`), exactly as `traindeck run --hostfile`
does: the launcher reads the file from disk, so edits must be saved before a launch. Opening a file keeps what the
table does not show (comments, blank lines, a host's own trailing comment) when it is saved again
(backend.nodes.hostfile.edited_hostfile_text, written atomically). The checks are backend.nodes.launching's
preflight_checks, the ones a launch runs itself, on the page's task pool.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.nodes import HostRow, row_problems
from traindeck.gui.tasks import owned
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.message_list import MessageList, tone
from traindeck.gui.widgets.path_field import PathField

if TYPE_CHECKING:
    from traindeck.backend.launch import LaunchRequest, TrainingEnvironment
    from traindeck.backend.nodes import Check
    from traindeck.gui.tasks import Tasks

_S = "launch/"  # the Launch page's QSettings group
# preflight.Check.name -> what it checks, in the words of someone setting up machines
CHECK_NAMES = {"pdsh": "pdsh installed", "ssh": "SSH without a password", "python": "Training interpreter",
               "versions": "torch and DeepSpeed", "script": "Training script", "cwd": "Working directory",
               "port": "Rendezvous port", "network": "Network for NCCL"}


class HostfileEditor(QWidget):
    """`make_request()` gives the launch as it would be now (interpreter, script, environment) for the checks;
    `context()` anything whose change makes a check's answer stale (the page's choice)."""

    changed = Signal()
    toggled = Signal(bool)

    def __init__(self, tasks: Tasks, settings: QSettings,
                 make_request: Callable[[], tuple[LaunchRequest, TrainingEnvironment | None]],
                 context: Callable[[], object]) -> None:
        super().__init__()
        self.tasks, self.settings, self.make_request, self.context = tasks, settings, make_request, context
        # A tick box above a frame rather than a checkable group box: unticked, that box still draws an empty frame.
        self.enable = QCheckBox("Several machines (DeepSpeed hostfile)")
        self.enable.toggled.connect(self.toggled)
        self.enable.setToolTip("Run on every host of a hostfile through DeepSpeed's pdsh runner (passwordless SSH to "
                               "each host, the same interpreter path and versions there), as traindeck run --hostfile "
                               "does")
        self._original = ""  # the file's text as read or last saved ("" for a new file): what the save keeps
        self._loaded_path = ""  # the file the table holds ("" when none was opened or saved)
        self._saved_rows: list[HostRow] = []
        self._file_notes: list[tuple[str, str]] = []
        self.checks: list[Check] = []
        self._checked_key: object = None
        self.checking = False
        self._build()
        self.toggled.connect(self._toggled)
        self._toggled(False)

    # ============================================================================================ building
    def _build(self) -> None:
        self.body = QGroupBox()  # hidden while unticked: one line on the page, not an empty table
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(2)
        outer.addWidget(self.enable)
        outer.addWidget(self.body)
        layout = QVBoxLayout(self.body)

        top = QHBoxLayout()
        self.path = PathField("file", caption="Open a DeepSpeed hostfile", placeholder="hostfile (HOST slots=N lines)")
        self.path.setToolTip("The hostfile the launcher reads: open one to edit it, or type where a new one goes")
        self.path.picked.connect(self.open_file)
        self.path.line.editingFinished.connect(lambda: self.open_file(self.path.text()))
        self.path.textChanged.connect(lambda _t: self._edited())
        self.save_button = QPushButton("Save")
        self.save_button.setToolTip("Write the table into the hostfile (comments and other lines in it are kept)")
        self.save_button.clicked.connect(lambda: self.save())
        top.addWidget(QLabel("Hostfile"))
        top.addWidget(self.path, 1)
        top.addWidget(self.save_button)
        layout.addLayout(top)

        self.table = QTableWidget(0, 3)
        self.table.setObjectName("hostsTable")
        self.table.setHorizontalHeaderLabels(["Host (name or address)", "Slots", ""])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 12)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.table.setMaximumWidth(560)  # host names are short: a full-width table would be mostly empty
        about = QLabel("Slots: the processes (ranks) on a host, usually its GPUs. Ranks are numbered host by host "
                       "in this order, and the first host is the rendezvous (master_addr).\n\nEvery host needs SSH "
                       "without a password prompt, this interpreter at the same path, the same torch and "
                       "DeepSpeed, and the script at the same path. Secret variables are not sent to the other "
                       "hosts: set them there.")
        about.setWordWrap(True)
        about.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        set_muted(about)
        beside = QHBoxLayout()
        beside.addWidget(self.table, 3)
        beside.addWidget(about, 2)
        layout.addLayout(beside)

        row = QHBoxLayout()
        self.add_button = QPushButton("Add host")
        self.add_button.clicked.connect(lambda: self.add_host("", 1, focus=True))
        self.ssh_port = QSpinBox()
        self.ssh_port.setRange(0, 65535)
        self.ssh_port.setSpecialValueText("ssh's own")
        self.ssh_port.setToolTip("The hosts' SSH port (traindeck run --ssh-port); \"ssh's own\": 22, or what "
                                 "~/.ssh/config and PDSH_SSH_ARGS_APPEND say")
        self.ssh_port.valueChanged.connect(lambda _v: self._edited())
        self.check_button = QPushButton("Check hosts")
        self.check_button.setToolTip("Every host, over SSH: reachable without a password, the same interpreter and "
                                     "torch/DeepSpeed versions, the script and working directory there, the network "
                                     "NCCL would use (saves the hostfile first: the checks read it, as the launch "
                                     "does)")
        self.check_button.clicked.connect(self.check)
        self.check_status = QLabel()
        self.check_status.setWordWrap(True)
        for widget in (self.add_button, QLabel("SSH port"), self.ssh_port):
            row.addWidget(widget)
        row.addSpacing(16)
        row.addWidget(self.check_button)
        row.addWidget(self.check_status, 1)
        layout.addLayout(row)

        self.problems = MessageList()
        layout.addWidget(self.problems)
        self.results = QTableWidget(0, 4)
        self.results.setObjectName("hostChecks")
        self.results.setHorizontalHeaderLabels(["Host", "Check", "Result", "What was found"])
        self.results.verticalHeader().setVisible(False)
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.setWordWrap(False)
        self.results.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.results.verticalHeader().setDefaultSectionSize(self.results.fontMetrics().height() + 6)
        self.results.setAlternatingRowColors(True)
        self.results.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.results.horizontalHeader()
        for column in range(3):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.results.hide()
        layout.addWidget(self.results)

    def _toggled(self, on: bool) -> None:
        self.body.setVisible(on)
        self._edited()

    # ============================================================================================ the table
    def add_host(self, name: str, slots: int, *, origin: int | None = None, focus: bool = False,
                 emit: bool = True) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        name_edit = QLineEdit(name)
        name_edit.setPlaceholderText("node1 or 10.0.0.2")
        name_edit.setFrame(False)
        name_edit.setProperty("origin", origin)  # the file line it came from: the save rewrites that line
        name_edit.textChanged.connect(lambda _t: self._edited())
        slots_spin = QSpinBox()
        slots_spin.setRange(1, 1024)
        slots_spin.setValue(max(1, slots))
        slots_spin.setFrame(False)
        slots_spin.valueChanged.connect(lambda _v: self._edited())
        remove = QToolButton()
        remove.setText("✕")
        remove.setToolTip("Remove this host")
        remove.clicked.connect(lambda _=False, e=name_edit: self._remove(e))
        self.table.setCellWidget(row, 0, name_edit)
        self.table.setCellWidget(row, 1, slots_spin)
        self.table.setCellWidget(row, 2, remove)
        self._fit_table()
        if focus:
            name_edit.setFocus()
        if emit:
            self._edited()

    def _remove(self, name_edit: QLineEdit) -> None:
        for row in range(self.table.rowCount()):
            if self.table.cellWidget(row, 0) is name_edit:
                self.table.removeRow(row)
                break
        self._fit_table()
        self._edited()

    def _fit_table(self) -> None:
        """As tall as its rows (up to 8; then it scrolls): a short list leaves no empty block on the page."""
        rows = min(max(self.table.rowCount(), 1), 8)
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height()
                                  + rows * self.table.verticalHeader().defaultSectionSize() + 4)

    def rows(self) -> list[HostRow]:
        out = []
        for row in range(self.table.rowCount()):
            name, slots = self.table.cellWidget(row, 0), self.table.cellWidget(row, 1)
            assert isinstance(name, QLineEdit) and isinstance(slots, QSpinBox)
            origin = name.property("origin")
            out.append(HostRow(name.text().strip(), slots.value(), origin if isinstance(origin, int) else None))
        return out

    def set_rows(self, rows: list[HostRow]) -> None:
        self.table.setRowCount(0)
        for row in rows:
            self.add_host(row.name, row.slots, origin=row.origin, emit=False)
        self._fit_table()
        self._edited()

    # ============================================================================================ the file
    def open_file(self, path: str) -> None:
        """Read `path` into the table (on the task pool); a path that does not exist yet is a new hostfile."""
        path = str(Path(path).expanduser()) if path else ""
        if not path or path == self._loaded_path:
            return
        from traindeck.backend.nodes import read_hostfile_text

        if not Path(path).exists():
            self._original, self._loaded_path = "", path
            self._file_notes = [("note", "A new hostfile: Save writes it")]
            self._saved_rows = []
            self._edited()
            return
        self.tasks.run(read_hostfile_text, Path(path), done=owned(self, lambda text: self._opened(path, text)),
                       failed=owned(self, lambda error: self._open_failed(path, error)))

    def _opened(self, path: str, text: str) -> None:
        from traindeck.backend.nodes import HostfileError, host_rows, parse_hostfile_text

        self._original, self._loaded_path = text, path
        self._file_notes = []
        try:
            parse_hostfile_text(text, path)
        except HostfileError as exc:  # the rows still open: the person fixes them here and saves
            self._file_notes = [("warning", f"{p} (fix it in the table and save)") for p in exc.problems]
        rows = host_rows(text)
        self._saved_rows = rows if not self._file_notes else []  # before the table says it changed
        self.set_rows(rows)

    def _open_failed(self, path: str, error: str) -> None:
        self._loaded_path = ""
        self._file_notes = [("error", error.splitlines()[0] if error else f"{path}: cannot be read")]
        self._edited()

    def save(self, then: Callable[[], None] | None = None) -> None:
        """Write the table into the hostfile (asks where when no path is set); `then` runs once it is written."""
        if not self.path.text():
            chosen, _ = QFileDialog.getSaveFileName(self, "Save the hostfile", str(Path.home() / "hostfile"))
            if not chosen:
                return
            self.path.line.blockSignals(True)
            self.path.setText(chosen)
            self.path.line.blockSignals(False)
        path = str(Path(self.path.text()).expanduser())
        original = self._original if path == self._loaded_path else self._text_of(path)
        if original is None:
            return
        from traindeck.backend.nodes import save_edited_hostfile

        rows = self.rows()
        self.save_button.setEnabled(False)
        self.tasks.run(save_edited_hostfile, Path(path), original, rows,
                       done=owned(self, lambda text: self._saved(path, text, rows, then)), failed=self._save_failed)

    def _text_of(self, path: str) -> str | None:
        """What a save over another existing file keeps of it (None: it cannot be read, said beside the table)."""
        from traindeck.backend.nodes import HostfileError, read_hostfile_text

        if not Path(path).exists():
            return ""
        try:
            return read_hostfile_text(Path(path))
        except HostfileError as exc:
            self._file_notes = [("error", exc.problems[0])]
            self._edited()
            return None

    def _saved(self, path: str, text: str, rows: list[HostRow], then: Callable[[], None] | None) -> None:
        from traindeck.backend.nodes import host_rows

        self.save_button.setEnabled(True)
        self._original, self._loaded_path = text, path
        self._file_notes = [("ok", f"Saved {path}")]
        # The rows now point at the lines they were written to: a second save rewrites those, not new ones.
        written = host_rows(text)
        if len(written) == len(rows) == self.table.rowCount():
            for row, line in enumerate(written):
                self.table.cellWidget(row, 0).setProperty("origin", line.origin)
        self._saved_rows = self.rows()
        self._edited()
        if then is not None:
            then()

    def _save_failed(self, error: str) -> None:
        self.save_button.setEnabled(True)
        self._file_notes = [("error", line) for line in (error.splitlines() or ["the hostfile could not be saved"])]
        self._edited()

    # ============================================================================================ state
    def isChecked(self) -> bool:  # noqa: N802  (as the tick box it stands for)
        return self.enable.isChecked()

    def setChecked(self, on: bool) -> None:  # noqa: N802
        self.enable.setChecked(on)

    @property
    def active(self) -> bool:
        """The launch goes to the hosts: the box is shown (a deepspeed launch) and ticked."""
        return self.isChecked() and not self.isHidden()

    @property
    def dirty(self) -> bool:
        path = str(Path(self.path.text()).expanduser()) if self.path.text() else ""
        return path != self._loaded_path or [(r.name, r.slots) for r in self.rows()] != [
            (r.name, r.slots) for r in self._saved_rows]

    def hostfile(self) -> Path | None:
        return Path(self.path.text()).expanduser() if self.active and self.path.text() else None

    def port(self) -> int | None:
        return self.ssh_port.value() or None if self.active else None

    def launch_problems(self) -> list[str]:
        """Why a launch cannot go to the hosts as they are (empty when the box is off)."""
        if not self.active:
            return []
        problems = [f"Several machines: {p}" for p in row_problems(self.rows())]
        if not self.path.text():
            problems.append("Several machines: save the hostfile (the launcher reads it from a file)")
        elif not problems and self.dirty:
            problems.append("Several machines: save the hostfile (the launcher reads the saved file)")
        # Refused, not asked: a launch runs these same checks and refuses too (backend/runs/control/new_run.py), so a
        # "launch anyway" could only end in the same refusal, after minutes of ssh timeouts on a host that is down.
        bad = [c for c in self.checks if not c.ok] if self._checks_fresh() else []
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            problems.append(f"Several machines: {bad[0].host}: {CHECK_NAMES.get(bad[0].name, bad[0].name)}: "
                            f"{bad[0].detail}{more}; fix it and check the hosts again")
        return problems

    def _key(self) -> object:
        return (tuple((r.name, r.slots) for r in self.rows()), self.ssh_port.value(), self.path.text(),
                self.context())

    def _checks_fresh(self) -> bool:
        return bool(self.checks) and self._checked_key == self._key()

    def _edited(self) -> None:
        notes = list(self._file_notes)
        if self.isChecked():
            notes += [("error", p) for p in row_problems(self.rows()) if self.table.rowCount()]
        self.problems.set_items(notes)
        self.check_button.setEnabled(not self.checking and self.table.rowCount() > 0)
        if self.checks and not self.checking:
            self._show_check_status()
        self.changed.emit()

    # ============================================================================================ checks
    def check(self) -> None:
        """Save (the checks read the file, as the launch does), then run every check on the task pool."""
        if self.checking or row_problems(self.rows()):
            return
        if self.dirty or not self.path.text():
            self.save(then=self._start_check)
            return
        self._start_check()

    def _start_check(self) -> None:
        request, environment = self.make_request()
        if request.hostfile is None:
            return
        self.checking = True
        self._checked_key = self._key()
        self.check_button.setEnabled(False)
        self.check_status.setText(f"Checking {len(self.rows())} host(s) over SSH…")
        self.tasks.run(check_launch_hosts, request, environment, done=self._checked, failed=self._check_failed)

    def _checked(self, checks: list[Check]) -> None:
        self.checking = False
        self.checks = list(checks)
        self._show_results()
        self._edited()

    def _check_failed(self, error: str) -> None:
        self.checking = False
        self.checks = []
        self.results.hide()
        self.check_status.setText("")
        self._file_notes = [("error", f"The hosts could not be checked: {error.splitlines()[0] if error else '?'}")]
        self._edited()

    def _show_results(self) -> None:
        self.results.setRowCount(len(self.checks))
        for r, check in enumerate(self.checks):
            cells = [check.host, CHECK_NAMES.get(check.name, check.name), "✔ ok" if check.ok else "✖ failed",
                     check.detail]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if c == 2:
                    item.setForeground(QBrush(QColor(tone("ok" if check.ok else "error", self))))
                self.results.setItem(r, c, item)
        rows = min(len(self.checks), 12)
        self.results.setFixedHeight(self.results.horizontalHeader().sizeHint().height()
                                    + sum(self.results.rowHeight(r) for r in range(rows)) + 4)
        self.results.setVisible(bool(self.checks))

    def _show_check_status(self) -> None:
        bad = sum(not c.ok for c in self.checks)
        hosts = len({c.host for c in self.checks if not c.host.startswith("(")})
        text = (f"{bad} of {len(self.checks)} checks failed" if bad else
                f"All {len(self.checks)} checks passed on {hosts} host(s)")
        if not self._checks_fresh():
            text += " (before the last change: check again)"
        self.check_status.setText(text)

    # ============================================================================================ settings
    def restore(self) -> None:
        s = self.settings
        self.ssh_port.setValue(_int(s.value(_S + "ssh_port", 0)))
        path = str(s.value(_S + "hostfile", "") or "")
        self.path.line.blockSignals(True)
        self.path.setText(path)
        self.path.line.blockSignals(False)
        self.setChecked(str(s.value(_S + "hosts_on", "false")).lower() == "true")
        if path:
            self.open_file(path)

    def save_settings(self) -> None:
        self.settings.setValue(_S + "hosts_on", self.isChecked())
        self.settings.setValue(_S + "hostfile", self.path.text())
        self.settings.setValue(_S + "ssh_port", self.ssh_port.value())


def check_launch_hosts(request: LaunchRequest, environment: TrainingEnvironment | None) -> list[Any]:
    """Worker side: the plan the launch would build, then the checks the launch runs (backend.nodes.launching)."""
    from traindeck.backend.launch import preview_plan
    from traindeck.backend.nodes import preflight_checks

    return preflight_checks(request, preview_plan(request, environment))


def _int(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0
