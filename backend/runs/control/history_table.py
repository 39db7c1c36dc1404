"""History's table for "which was best": the runs' swept values and one metric's final and best values as columns,
a sweep's runs grouped, the best run of each sweep marked, a trial's runs as one group under the trial (its size
and winner from the trial's record). Qt-free: the History page's table presents it.

A metric's best value is its lowest, or its highest for names that count what is wanted more of (accuracy, F1,
BLEU, reward, throughput: `higher_is_better`). A sweep's best run is the one with the best best-value among its runs
that did not fail.

A trial's runs are its candidates (each marked by trial.json): they are kept together like a sweep's and gathered
under a `TrialGroup`, whose row the table shows as their parent; choosing the group compares its measured candidates.
A sweep of two or more runs shown is gathered the same way under a `SweepGroup`: choosing it compares and overlays
its runs, the best by the metric first, at most MAX_COMPARED (how many more were left out is kept with the group).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from traindeck.backend.runs.control.history import RunFigures
from traindeck.backend.runs.record.trial_mark import TrialSummary

DEFAULT_METRIC = "loss"
# Metric names where more is better; every other metric (loss, perplexity, error rates) is better lower.
_HIGHER = re.compile(r"acc|f1|bleu|rouge|auc|precision|recall|score|reward|map\b|_per_s|per_sec|throughput|mfu",
                     re.IGNORECASE)
_FAILED = frozenset({"failed", "lost"})  # such a run's values are no result

MAX_COMPARED = 8  # runs side by side (Compare): more columns than that cannot be read


def higher_is_better(metric: str) -> bool:
    return bool(_HIGHER.search(metric))


@dataclass(frozen=True)
class HistoryRow:
    """One run with the table's extra cells."""

    run: RunFigures
    params: tuple[str, ...]  # the run's value of each swept name of the table ("" where it has none)
    final: float | None  # the metric's last value
    best: float | None  # its lowest (highest for higher_is_better) value
    group: str  # the sweep's id; "" for a run of no sweep
    group_label: str  # "name: lr, zero_stage (4 runs)"; "" for a run of no sweep
    is_best: bool  # the best run of its sweep by `best`
    sort_time: float  # its start for ordering: its sweep's newest start, less a millisecond per newer run of the
    # sweep (a sweep's runs stay together, newest first, in a list sorted by start); its own start otherwise
    final_step: int | None = None  # the step the metric's last value was logged at (None: logged without steps)
    trial: str = ""  # the trial's id for a trial's candidate; "" otherwise
    label: str = ""  # a candidate's set-up ("ZeRO-2 cpu mb 4"), its name in the table; "" for other runs
    is_winner: bool = False  # the candidate its trial chose

    @property
    def name(self) -> str:
        """The run's name in the table: a candidate's set-up, else the run's name (its id when it has none)."""
        return self.label or self.run.name or self.run.run_id

    def final_text(self, say_step: bool) -> str:
        """The final value as a cell shows it; with say_step, the step it is at ("2.93 at step 216"). A running
        run's value is its latest, not its final one, and says so ("2.93 at step 80 (latest)")."""
        text = format_metric(self.final)
        if say_step and self.final is not None and self.final_step is not None:
            text = f"{text} at step {self.final_step}"
        return f"{text} (latest)" if self.is_latest else text

    @property
    def is_latest(self) -> bool:
        """The metric's value is the running run's latest, not a final one."""
        return self.final is not None and self.run.state == "running"


@dataclass(frozen=True)
class TrialGroup:
    """A trial's runs as one group: its line, its candidates' runs and those that choosing the group compares."""

    trial_id: str
    label: str  # "trial ID — 3 of 4 candidates, winner: ZeRO-2 cpu mb 4"
    state: str  # the trial's state from its record ("" when the record is gone)
    run_ids: tuple[str, ...]  # its runs, in the table's order
    compare_ids: tuple[str, ...]  # its measured candidates' runs (fastest first, at most MAX_COMPARED)
    sort_time: float  # its newest run's start: where the group stands in a list sorted by start
    detail: str = ""  # a longer line for a tooltip

    @property
    def key(self) -> str:
        """The group's key among the table's groups (what the table keeps open and selected)."""
        return f"trial:{self.trial_id}"


@dataclass(frozen=True)
class SweepGroup:
    """A sweep's runs as one group: its line, its runs and those that choosing the group compares."""

    sweep_id: str
    label: str  # "sweep tiny: lr (3 of 4 runs), best: tiny-lr=3e-3"
    state: str  # "running" while one of its runs runs, else "finished"
    run_ids: tuple[str, ...]  # its runs, in the table's order
    compare_ids: tuple[str, ...]  # its runs by the metric's best value (best first, then those without), at most
    # MAX_COMPARED
    sort_time: float  # its newest run's start
    detail: str = ""  # a longer line for a tooltip
    left_out: int = 0  # its runs shown that compare_ids leaves out (over MAX_COMPARED)

    @property
    def key(self) -> str:
        return f"sweep:{self.sweep_id}"


@dataclass(frozen=True)
class HistoryTable:
    metric: str
    higher_is_better: bool
    params: tuple[str, ...]  # the swept names of the runs shown, in the order first met
    rows: list[HistoryRow]  # a sweep's runs together, at the place of its newest run; otherwise as given
    metrics: tuple[str, ...]  # every metric the runs logged (to choose from), sorted
    groups: dict[str, TrialGroup] = field(default_factory=dict)  # trial id -> its group, for the trials shown
    sweeps: dict[str, SweepGroup] = field(default_factory=dict)  # sweep id -> its group, for sweeps of 2+ runs shown

    @property
    def final_steps_differ(self) -> bool:
        """The runs' final values were logged at different steps (a run stopped at 216 beside one that reached
        100): a final value then says its step, or it is compared with one from elsewhere in training."""
        return len({r.final_step for r in self.rows if r.final is not None and r.final_step is not None}) > 1

    def param_sort_keys(self) -> list[tuple[float | str, ...]]:
        """Per row, one sort key per swept name: numbers where every value of that name is one, else the text."""
        numeric = [all(_number(r.params[i]) is not None for r in self.rows if r.params[i])
                   for i in range(len(self.params))]
        out = []
        for row in self.rows:
            keys: list[float | str] = []
            for i, text in enumerate(row.params):
                number = _number(text) if text else None
                keys.append((-math.inf if number is None else number) if numeric[i] else text)
            out.append(tuple(keys))
        return out


def default_metric(metrics: Sequence[str]) -> str:
    """`loss` when a run logged it, else the first name with loss in it, else the first name."""
    if DEFAULT_METRIC in metrics or not metrics:
        return DEFAULT_METRIC
    return next((m for m in metrics if "loss" in m.lower()), metrics[0])


def history_table(runs: Sequence[RunFigures], metric: str | None = None,
                  trials: Mapping[str, TrialSummary] | None = None) -> HistoryTable:
    """The table for `runs` (newest first, as RunHistory lists them) by `metric` (None: default_metric); `trials`:
    what the trials' records say of the trials the runs are candidates of (backend.trials.trial_summaries)."""
    metrics = tuple(sorted({name for run in runs for name in (*run.final_metrics, *run.metric_extremes)}))
    metric = metric or default_metric(metrics)
    higher = higher_is_better(metric)
    params: dict[str, None] = {}
    for run in reversed(runs):  # the oldest sweep's names first: their columns keep their place as runs come
        for name in (run.sweep.values if run.sweep else {}):
            params.setdefault(name, None)
    names = tuple(params)

    members: dict[str, list[RunFigures]] = {}
    candidates: dict[str, list[RunFigures]] = {}
    for run in runs:
        if run.trial is not None:
            candidates.setdefault(run.trial.trial_id, []).append(run)
        elif run.sweep is not None:
            members.setdefault(run.sweep.sweep_id, []).append(run)
    best_of: dict[str, str] = {}
    for sweep_id, group in members.items():
        scored = [(value, run.run_id) for run in group if run.state not in _FAILED
                  and (value := _best(run, metric, higher)) is not None]
        if len(scored) >= 2:
            best_of[sweep_id] = (max if higher else min)(scored)[1]

    rows: list[HistoryRow] = []
    groups: dict[str, TrialGroup] = {}
    sweeps: dict[str, SweepGroup] = {}
    placed: set[str] = set()
    for run in runs:
        if run.trial is not None:
            trial_id = run.trial.trial_id
            if trial_id not in groups:
                group_rows, groups[trial_id] = _trial_group(trial_id, candidates[trial_id], (trials or {}).get(trial_id),
                                                            names, metric, higher)
                rows += group_rows
            continue
        if run.sweep is None:
            rows.append(_row(run, names, metric, higher, "", "", False, _start(run)))
            continue
        sweep_id = run.sweep.sweep_id
        if sweep_id in placed:
            continue
        placed.add(sweep_id)
        group = members[sweep_id]
        newest = max(_start(r) for r in group)
        label = _group_label(group)
        rank = {r.run_id: i for i, r in enumerate(sorted(group, key=_start, reverse=True))}
        sweep_rows = [_row(r, names, metric, higher, sweep_id, label, best_of.get(sweep_id) == r.run_id,
                           newest - rank[r.run_id] * 1e-3) for r in group]
        rows += sweep_rows
        if len(group) >= 2:
            sweeps[sweep_id] = _sweep_group(sweep_id, label, sweep_rows, metric, higher, newest)
    return HistoryTable(metric, higher, names, rows, metrics, groups, sweeps)


def _sweep_group(sweep_id: str, label: str, rows: Sequence[HistoryRow], metric: str, higher: bool,
                 newest: float) -> SweepGroup:
    """A sweep's group: its runs with a result by their best value (best first), then the rest newest first (a
    failed run's curve still shows where it went wrong), cut at MAX_COMPARED."""
    scored = sorted((r for r in rows if r.best is not None and r.run.state not in _FAILED),
                    key=lambda r: -(r.best or 0.0) if higher else (r.best or 0.0))
    kept = {r.run.run_id for r in scored}
    ranked = [*scored, *sorted((r for r in rows if r.run.run_id not in kept), key=lambda r: r.sort_time,
                               reverse=True)]
    compare = tuple(r.run.run_id for r in ranked[:MAX_COMPARED])
    left_out = len(ranked) - len(compare)
    best = next((r.name for r in rows if r.is_best), "")
    rule = f" ({'highest' if higher else 'lowest'} {metric} reached)"  # the rule said: not the last value
    line = f"sweep {label}" + (f", best: {best}{rule}" if best else "")
    cut = (f" Its {len(compare)} best by {metric} are compared; {left_out} more left out (Ctrl+click runs to "
           "choose others)." if left_out else "")
    detail = f"Sweep {sweep_id}: select this row to compare and overlay its runs." + cut
    state = "running" if any(r.run.state == "running" for r in rows) else "finished"
    return SweepGroup(sweep_id=sweep_id, label=line, state=state, run_ids=tuple(r.run.run_id for r in rows),
                      compare_ids=compare, sort_time=newest, detail=detail, left_out=left_out)


def _trial_group(trial_id: str, runs: Sequence[RunFigures], summary: TrialSummary | None, names: tuple[str, ...],
                 metric: str, higher: bool) -> tuple[list[HistoryRow], TrialGroup]:
    """A trial's runs (newest first, kept together at its newest run's place) and its group."""

    ordered = sorted(runs, key=_start, reverse=True)
    newest = _start(ordered[0])
    shown = {r.run_id for r in ordered}
    winner = summary.winner_run_id if summary is not None else None
    rows = [replace(_row(r, names, metric, higher, "", "", False, newest - i * 1e-3), trial=trial_id,
                    label=r.trial.label if r.trial is not None else "", is_winner=r.run_id == winner)
            for i, r in enumerate(ordered)]
    if summary is not None:
        compare = [i for i in summary.measured if i in shown]
        total = max(summary.candidates, len(ordered))
        count = f"{len(summary.measured)} of {total} candidates measured"
        stopped = summary.state in ("stopped", "failed")
        verdict = (f"winner: {summary.winner}" + (f" ({summary.state} early)" if stopped else "")) if summary.winner \
            else (summary.state if stopped else "no winner" if summary.state == "finished"
                  else summary.state or "no winner yet")
        label = f"trial {trial_id} — {count}, {verdict}"
        detail = (f"Trial {trial_id} ({summary.state or 'state unknown'}): {len(ordered)} of its {total} candidates "
                  f"ran, {len(summary.measured)} measured to the end. Select this row to compare its measured "
                  "candidates; `traindeck trial show " + trial_id + "` prints its table.")
    else:
        compare = [r.run_id for r in ordered if r.state not in _FAILED]
        label = f"trial {trial_id} — {len(ordered)} candidate{'s' if len(ordered) != 1 else ''}"
        detail = f"Trial {trial_id}: its record is gone; the runs that did not fail are compared when it is selected."
    group = TrialGroup(trial_id=trial_id, label=label, state=summary.state if summary is not None else "",
                       run_ids=tuple(r.run_id for r in ordered), compare_ids=tuple(compare[:MAX_COMPARED]),
                       sort_time=newest, detail=detail)
    return rows, group


def _row(run: RunFigures, names: tuple[str, ...], metric: str, higher: bool, group: str, label: str,
         is_best: bool, sort_time: float) -> HistoryRow:
    values = run.sweep.values if run.sweep else {}
    return HistoryRow(run=run, params=tuple(values.get(n, "") for n in names), final=run.final_metrics.get(metric),
                      best=_best(run, metric, higher), group=group, group_label=label, is_best=is_best,
                      sort_time=sort_time, final_step=run.metric_last_steps.get(metric))


def _best(run: RunFigures, metric: str, higher: bool) -> float | None:
    extremes = run.metric_extremes.get(metric)
    if extremes is None:
        return run.final_metrics.get(metric)
    return extremes[1] if higher else extremes[0]


def _start(run: RunFigures) -> float:
    return run.started_at or run.created_at


def _group_label(group: Sequence[RunFigures]) -> str:
    mark = group[0].sweep
    assert mark is not None
    names = ", ".join(mark.values) or "sweep"
    shown = len(group)
    count = f"{shown} of {mark.size} runs" if mark.size > shown else f"{shown} run{'s' if shown != 1 else ''}"
    return f"{mark.name}: {names} ({count})" if mark.name else f"{names} ({count})"


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def format_metric(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
