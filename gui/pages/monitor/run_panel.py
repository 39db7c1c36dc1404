"""The Monitor's Run tab: the watched run's ranks (host memory, CPU, GPU memory, pinned memory) charted a line each
beside the run's totals, and its process table. A running run is fed from live samples after its recorded totals; a
finished one is read back from its recording through `ctx.tasks`. The recording is read again when the page asks
(`reload`: back on screen, Refresh), so the totals and each rank's line also cover the seconds nobody sampled live:
those before the page opened and those while it was hidden. A live run's recorded series go out as `recorded` for
the Host tab, whose charts fill back the same way."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QHeaderView, QLabel, QStackedWidget, QWidget

from traindeck.backend.monitor import RunChoice, RunSnapshot, run_history
from traindeck.backend.runs import RANKS_SUM, SystemLines, moment_words
from traindeck.gui.context import AppContext
from traindeck.gui.pages.monitor.gpus_panel import GpuChartSlot
from traindeck.gui.pages.monitor.shared import (
    break_lines,
    clear_series,
    fit_window,
    new_chart,
    new_table,
    read_failed_text,
    set_row,
)
from traindeck.gui.widgets.chart_axis import format_value
from traindeck.gui.widgets.charts import TimeSeriesChart

# The run's totals, a line each beside its ranks' lines: (chart, line, the recording's column for what came before
# the panel watched, the live snapshot's property for each sample since). Both feed every line, so that "largest
# rank" and the CPU and locked totals move with the ranks' own lines rather than stand at their last recorded value.
RUN_TOTAL_LINES = (("rank_rss_chart", "all ranks", "ranks_rss", "ranks_rss_bytes"),
                   ("rank_rss_chart", "largest rank", "rank_rss_max", "max_rank_rss_bytes"),
                   ("rank_cpu_chart", "all ranks", "ranks_cpu_pct", "ranks_cpu_percent"),
                   ("rank_gpu_chart", "all ranks", "ranks_gpu_mem", "ranks_gpu_memory_bytes"),
                   ("rank_locked_chart", "all ranks", "ranks_locked", "ranks_locked_bytes"))


def with_recording(t: np.ndarray, values: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A total's line: its points (`x`, `y`: live samples and what was read before) joined with the recorded samples
    (`t`, `values`) of the times those points do not cover, before the first one and inside each gap (a NaN: sampling
    stopped while the page was hidden), oldest first. A gap that recorded samples fill loses its NaN: the recording
    went on through it."""
    finite = np.flatnonzero(~np.isnan(y))
    if not len(finite):
        return t, values
    covered = np.zeros(len(t), dtype=bool)
    for stretch in np.split(finite, np.flatnonzero(np.diff(finite) > 1) + 1):  # the points between two gaps
        covered |= (t >= x[stretch[0]]) & (t <= x[stretch[-1]])
    added = t[~covered]
    keep = np.ones(len(x), dtype=bool)
    for gap in np.flatnonzero(np.isnan(y)):
        earlier, later = finite[finite < gap], finite[finite > gap]
        low = x[earlier[-1]] if len(earlier) else -np.inf
        high = x[later[0]] if len(later) else np.inf
        keep[gap] = not np.any((added > low) & (added < high))
    joined_x = np.concatenate((added, x[keep]))
    order = np.argsort(joined_x, kind="stable")
    return joined_x[order], np.concatenate((values[~covered], y[keep]))[order]


def process_cells(p: Any) -> list[str]:
    """A process table row from a live `ProcessSnapshot` or a recorded one (a dict)."""
    get = (lambda k: p.get(k)) if isinstance(p, dict) else (lambda k: getattr(p, k))  # noqa: E731
    rank = get("rank")
    return [str(get("pid")), str(get("role") or ""), "" if rank is None else str(rank),
            format_value(get("cpu_percent")), format_value(get("rss_bytes"), "B"),
            format_value(get("locked_bytes"), "B"), format_value(get("gpu_memory_bytes"), "B"),
            format_value(get("read_bytes"), "B"), format_value(get("write_bytes"), "B"), str(get("cmdline") or "")]


RANK_CHARTS = (("rank_rss_chart", "rss"), ("rank_cpu_chart", "cpu"), ("rank_gpu_chart", "gpu"),
               ("rank_locked_chart", "locked"))  # (chart, `rank_lines` figure) of each rank's line
RANK_LINES = "ranks"  # the key of every rank chart's lines in `RunPanel.lines`: the charts share their ranks


class RunPanel(QStackedWidget):
    """The run watched (`watch`), or a note asking to choose one (the stack's first page)."""

    recorded = Signal(object)  # a live run's recorded series (read_series' dict), read for its charts

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self._run: RunChoice | None = None
        self._demo = False  # demo data: samples of a run that is not live are shown, nothing is read
        self._request = 0  # ignores a recording read for a run no longer watched
        self._gpus = False  # the sampler reads GPUs: only then do the ranks get GPU memory lines
        # Which ranks exited (and when), by the Runs page System view's rule: a gone rank's last figure is no
        # figure of now, so its legend says when it exited instead.
        self.lines = SystemLines()
        self.run_title = QLabel()
        self.rank_rss_chart = new_chart("Ranks' host memory (RSS)", "B")
        self.rank_cpu_chart = new_chart("Ranks' CPU (100 % = one core)", "%")
        self.rank_gpu_chart = new_chart("Ranks' GPU memory", "B")
        self.rank_locked_chart = new_chart("Ranks' locked (pinned) host memory", "B")
        self.charts: tuple[TimeSeriesChart, ...] = (self.rank_rss_chart, self.rank_cpu_chart, self.rank_gpu_chart,
                                                    self.rank_locked_chart)
        self.process_table = new_table(["PID", "Role", "Rank", "CPU %", "RSS", "Locked", "GPU memory", "Read",
                                        "Written", "Command"])
        self.process_table.horizontalHeader().setSectionResizeMode(9, QHeaderView.ResizeMode.Stretch)
        content = QWidget()
        grid = QGridLayout(content)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.run_title, 0, 0, 1, 2)
        self.rank_gpu_slot = GpuChartSlot(self.rank_gpu_chart)  # without a GPU: the reason, not empty axes
        for index, chart in enumerate(self.charts):
            grid.addWidget(self.rank_gpu_slot if chart is self.rank_gpu_chart else chart, 1 + index // 2, index % 2)
        grid.addWidget(self.process_table, 3, 0, 1, 2)
        grid.setRowStretch(1, 3)
        grid.setRowStretch(2, 3)
        grid.setRowStretch(3, 2)
        self.no_run_label = QLabel("Choose a run above (a running one is sampled live: its launcher and every "
                                   "rank; a finished one is read back from its recording).")
        self.no_run_label.setWordWrap(True)
        self.no_run_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.addWidget(self.no_run_label)
        self.addWidget(content)

    def watch(self, choice: RunChoice | None, *, demo: bool = False) -> None:
        """Show `choice` (None: the note). A running run waits for live samples after its recorded totals; a
        finished one is read back whole. With `demo`, nothing is read and every run's samples are taken."""
        self._run, self._demo = choice, demo
        self._request += 1  # a read still under way was for the run watched before
        self.lines.clear()
        for chart in self.charts:
            clear_series(chart)
        self.rank_gpu_slot.update_shown()
        self.process_table.setRowCount(0)
        if choice is None:
            self.setCurrentIndex(0)
            return
        self.setCurrentIndex(1)
        if not choice.live:
            for chart in self.charts:
                chart.x_window = None  # a recording is shown whole
        self.run_title.setText(self._title())
        self.reload()

    def reload(self) -> None:
        """Read the watched run's recording (again): its totals fill the times that live samples do not cover,
        those before the run was watched and those while sampling was stopped (the page hidden). Not in the demo."""
        if self._run is None or self._demo:
            return
        self._request += 1  # the newest read answers; an older one may have found less recorded
        request = self._request
        self.ctx.tasks.run(run_history, self._run.id, done=lambda r: self._history_loaded(request, r),
                           failed=self._read_failed)

    def _title(self, nothing_recorded: bool = False) -> str:
        assert self._run is not None
        if nothing_recorded:
            return f"<b>{self._run.label}</b> — nothing recorded" + (" yet; sampling live" if self._run.live else "")
        return f"<b>{self._run.label}</b> — " + ("sampled live" if self._run.live else "from its recording")

    def set_title(self, text: str) -> None:
        self.run_title.setText(text)

    def set_gpus_present(self, present: bool, reason: str | None = None) -> None:
        """Whether the sampler reads GPUs: without one, NVML's reason stands where the GPU memory chart would."""
        self._gpus = present
        self.rank_gpu_slot.set_reason(None if present else reason or "NVML lists none")

    def set_window(self, seconds: float) -> None:
        """Show the newest `seconds` of a live run (or of none); a recording stays whole."""
        if self._run is None or self._run.live:
            for chart in self.charts:
                chart.x_window = seconds

    def fit_window(self, seconds: float) -> None:
        """A live run's window fitted to what its charts hold (see shared.fitted_window); a recording stays whole."""
        if self._run is not None and self._run.live:
            fit_window(self.charts, seconds)

    def set_estimate(self, gpu_bytes_per_device: float | None, cpu_bytes_per_node: float | None) -> None:
        """The memory estimate as reference lines (per GPU, host memory per node); None removes one."""
        for chart, value in ((self.rank_gpu_chart, gpu_bytes_per_device), (self.rank_rss_chart, cpu_bytes_per_node)):
            if value:
                chart.add_reference(float(value), "estimate")
            else:
                chart.remove_reference("estimate")

    def break_lines(self, at: float) -> None:
        """A gap at `at` in a live run's lines (a recording has none to break)."""
        if self._run is not None and self._run.live:
            break_lines(self.charts, at)

    def clear(self) -> None:
        """Every series and reference line gone (the demo's data replaces the live view)."""
        for chart in self.charts:
            chart.clear()

    def show_sample(self, run: RunSnapshot, tables: bool) -> None:
        """A live sample of the run's processes: taken while a live run is watched (or any run, in the demo)."""
        if self._run is None or not (self._run.live or self._demo):
            return
        t = run.t
        ranked = any(p.role == "rank" for p in run.processes)
        alive = []
        for process in run.ranks:
            name = f"rank {process.rank}" if ranked and process.rank is not None else f"PID {process.pid}"
            alive.append(name)
            self.rank_rss_chart.append(name, t, process.rss_bytes)
            self.rank_cpu_chart.append(name, t, process.cpu_percent)
            if self._gpus:  # no GPU: no empty series whose names promise figures
                self.rank_gpu_chart.append(name, t, process.gpu_memory_bytes)
            self.rank_locked_chart.append(name, t, process.locked_bytes)
        if run.processes:
            for chart_name, name, _column, live in RUN_TOTAL_LINES:
                if chart_name != "rank_gpu_chart" or self._gpus:
                    getattr(self, chart_name).append(name, t, getattr(run, live))
        self.lines.take_ranks(RANK_LINES, dict.fromkeys(alive, t), alive)
        self._note_exits()
        if tables:
            self._fill_process_table([process_cells(p) for p in run.processes])

    def _read_failed(self, error: str) -> None:
        self.ctx.status.emit(read_failed_text(error))

    def _history_loaded(self, request: int, result: dict[str, Any]) -> None:
        """The run's recorded totals: the whole chart for a finished run; for a live one, the times its live
        samples do not cover (`with_recording`)."""
        if request != self._request or self._run is None:
            return
        series = result["series"]
        t = series["t"]
        for chart_name, name, column, _live in RUN_TOTAL_LINES:
            chart = getattr(self, chart_name)
            values = series[column]
            if not len(t) or np.all(np.isnan(values)):
                continue
            if self._run.live:
                chart.set_series(name, *with_recording(t, values, *chart.data(name)))
            else:
                chart.set_series(name, t, values)
        for name, line in (result.get("ranks") or {}).items():
            for chart_name, figure in RANK_CHARTS:
                chart, values = getattr(self, chart_name), line[figure]
                if np.all(np.isnan(values)) or (chart is self.rank_gpu_chart and not self._gpus):
                    continue  # no empty series whose names promise figures
                if self._run.live:
                    chart.set_series(name, *with_recording(line["t"], values, *chart.data(name)))
                else:
                    chart.set_series(name, line["t"], values)
        ranks = result.get("ranks") or {}
        self.lines.take_ranks(RANK_LINES, {name: float(line["t"][-1]) for name, line in ranks.items()},
                              result.get("alive") or ())
        self._note_exits()
        if self._run.live and len(t):
            self.recorded.emit(series)
        last = result.get("last_processes")
        if last and not self._run.live:
            self._fill_process_table([process_cells(p) for p in last["processes"]])
        self.run_title.setText(self._title(nothing_recorded=not len(t)))
        self.rank_gpu_slot.update_shown()  # a recording may hold GPU memory from where it ran

    def _note_exits(self) -> None:
        """Each rank line's legend: when its rank exited, in place of a last figure that is no figure of now; the
        sum's how many ranks it counts while some have exited; the totals' end once no rank is left."""
        notes = self.lines.legend_notes(RANK_LINES, lambda at: moment_words(at, "time"))
        ended = notes.get(RANKS_SUM)
        notes["largest rank"] = ended if ended is not None and not ended[1] else None  # no "(3 live)" beside it
        for chart in self.charts:
            for line, note in notes.items():
                if line in chart.series_names():
                    words, beside = note if note is not None else (None, True)
                    chart.set_legend_note(line, words, value=beside)

    def _fill_process_table(self, rows: list[list[str]]) -> None:
        if self.process_table.rowCount() != len(rows):
            self.process_table.setRowCount(len(rows))
        for row, cells in enumerate(rows):
            set_row(self.process_table, row, cells, right_from=2)
            command = self.process_table.item(row, 9)
            if command is not None:  # set_row has just filled the row
                command.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
