"""The Runs page's header for the open run: its name, state and duration (with the page's stop buttons at the row's
end), the command it runs, its progress with the throughput beside it (worded by the backend's live_rate, its
source in the tooltip), and the banner of a stalled run or of ops being built on first use. It draws the RunRecord
it is handed; the page decides when."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from traindeck.backend.runs import RateText, RunRecord
from traindeck.backend.runs.control import view as watch
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.labels import ElidedLabel, SteadyLabel, SteadyProgressBar
from traindeck.gui.widgets.labels import label as _label
from traindeck.gui.widgets.labels import panel as _panel
from traindeck.gui.widgets.run_state import badge_style, panel_style


class RunHeader(QWidget):
    """What the open run is and how far it got, drawn from its record."""

    def __init__(self, controls: list[QWidget]) -> None:
        """`controls` end the first row, after a stretch (the stop buttons)."""
        super().__init__()
        self.name_label = ElidedLabel(bold=True)  # a long name is cut, never widens the window
        font = self.name_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.35)
        self.name_label.setFont(font)
        self.state_badge = QLabel()
        self.duration_label = SteadyLabel("running for 0:00")  # ticks every second
        self.duration_label.setToolTip("How long the run has been running (or ran)")
        row = QHBoxLayout()
        row.addWidget(self.name_label)
        row.addWidget(self.state_badge)
        row.addWidget(self.duration_label)
        row.addStretch(1)
        for widget in controls:
            row.addWidget(widget)
        self.meta_label = _label(selectable=True)
        self.meta_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        set_muted(self.meta_label)

        self.progress_bar = SteadyProgressBar()  # repaints with the page, not on its own (setValue)
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setFixedHeight(14)
        # New words every poll; against the throughput on its right, so a shorter line than the label's widest (the
        # end's, without "· 0:18 left") leaves no blank between the two.
        self.progress_label = SteadyLabel("1,000 / 10,000 steps (10%) · 9.99 steps/s", align=Qt.AlignmentFlag.AlignRight)
        self.rate_label = SteadyLabel("· 99.9 samples/s")  # the throughput, its source the tooltip; hidden if none
        self.rate_label.setHidden(True)
        progress = QHBoxLayout()
        progress.addWidget(self.progress_bar, 1)
        progress.addWidget(self.progress_label)
        progress.addWidget(self.rate_label)

        self.stall_panel, stall_layout = _panel("stallPanel")
        self.stall_panel.setStyleSheet(panel_style("warning", "stallPanel"))
        self.stall_label = _label(wrap=True, selectable=True)
        stall_layout.addWidget(self.stall_label)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.meta_label)
        layout.addLayout(progress)
        layout.addWidget(self.stall_panel)

    def open_run(self, run_id: str) -> None:
        """Another run is open: its id until its record arrives."""
        self.stall_panel.setVisible(False)
        self.name_label.set_full_text(run_id)
        self.state_badge.clear()
        self.meta_label.clear()
        self.progress_label.clear()
        self.show_rate(RateText("", ""))
        self.progress_bar.setValue(0)

    def no_such_run(self, run_id: str) -> None:
        self.name_label.set_full_text(f"{run_id}: no such run")

    def state_text(self) -> str:
        return self.state_badge.text()

    def show_record(self, record: RunRecord) -> None:
        """Everything but the duration (the page moves that with its clock, on screen only)."""
        self.name_label.set_full_text(record.name or record.id, "" if not record.name else record.id)
        self.state_badge.setText(record.state)
        style = badge_style(record.state)
        if self.state_badge.styleSheet() != style:  # every poll: setting a style sheet re-polishes, even the same
            self.state_badge.setStyleSheet(style)
        self.state_badge.setToolTip(record.state_detail or record.state)
        parts = [record.id, record.launcher]
        if record.preset:
            parts.append(f"preset {record.preset}")
        parts.append(" ".join([record.script, *self._script_args(record)]).strip() or "-")
        self.meta_label.setText(" · ".join(parts))
        self.meta_label.setToolTip(" ".join(record.argv))
        self._show_progress(record)
        stall = watch.stall_warning(record)
        build = watch.op_build_note(record)
        self.stall_panel.setVisible(stall is not None or build is not None)
        if build is not None:  # not a hang: a first use compiles ops for minutes, often without a line of output
            self.stall_label.setText(f"⚙ {build[0].upper()}{build[1:]}: not a hang; the run goes on by itself "
                                     "once they are built (kept for later runs).")
        elif stall is not None:
            self.stall_label.setText(f"⚠ The run looks stalled: {stall.removeprefix('stalled: ')}. It may be "
                                     "waiting on another rank (a hang) or on slow I/O; the console shows its last "
                                     "output.")

    def show_rate(self, rate: RateText) -> None:
        """The throughput beside the progress (nothing where it is unknown), its source in the tooltip."""
        self.rate_label.setText(f"· {rate.text}" if rate.text else "")
        self.rate_label.setToolTip(rate.tooltip)
        self.rate_label.setHidden(not rate.text)  # no space kept for a figure that is not known

    def show_duration(self, record: RunRecord | None) -> None:
        if record is None:
            self.duration_label.clear()
            return
        seconds = watch.run_duration(record)
        verb = "running for" if record.state == "running" else "ran"
        self.duration_label.setText(f"{verb} {watch.duration_text(seconds)}" if seconds is not None else "")

    @staticmethod
    def _script_args(record: RunRecord) -> list[str]:
        if record.script and record.script in record.argv:
            return record.argv[record.argv.index(record.script) + 1:]
        return []

    def _show_progress(self, record: RunRecord) -> None:
        text = watch.progress_text(record.progress, stalled=watch.stall_warning(record) is not None)
        bar = self.progress_bar
        if text is None:
            if record.state == "running":
                bar.setRange(0, 0)  # busy: no progress reported (yet)
                self.progress_label.setText("no progress reported yet")
            else:
                bar.setRange(0, 1000)
                bar.setValue(0)
                self.progress_label.setText("no progress was reported")
            return
        bar.setRange(0, 1000)
        if text.fraction is None:
            bar.setRange(0, 0) if record.state == "running" else bar.setValue(1000)
        else:
            bar.setValue(int(1000 * text.fraction))
        self.progress_label.setText(text.line() if record.state == "running" else text.count
                                    + (f" ({100 * text.fraction:.0f}%)" if text.fraction is not None else "")
                                    + (f" · {text.rate}" if text.rate else ""))
