"""What History needs of trials: each trial's size, state and winner from its record (`state.json`), for the group
History shows of the trial's runs (backend.runs.history_table gathers them; the runs carry their trial marks)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from traindeck.backend.runs.record.trial_mark import TrialSummary, candidate_label
from traindeck.backend.trials.record import TrialFolder
from traindeck.backend.trials.scoring import ranking, winner

if TYPE_CHECKING:
    from traindeck.backend.runs import RunFigures, RunHistory

MEASURED = ("measured", "too_tight")  # candidates with their figures (a too tight one is measured, not chosen)


def trial_summary(trial_id: str, root: Path | None = None) -> TrialSummary | None:
    """What trial `trial_id`'s record says of it, or None when it has no record (deleted, another data dir)."""
    folder = TrialFolder(trial_id, root)
    try:
        if not folder.exists():
            return None
        spec = folder.spec()
    except (OSError, ValueError, TypeError):
        return None
    state = folder.state()
    results = state.results
    best = winner(results)
    order = ranking(results)
    order += [i for i, r in enumerate(results) if r.state in MEASURED and i not in order]
    return TrialSummary(
        trial_id=trial_id, state=state.state, candidates=len(results) or len(spec.candidates),
        winner=candidate_label(results[best].candidate) if best is not None else "",
        winner_run_id=results[best].run_id if best is not None else None,
        measured=tuple(run for i in order if (run := results[i].run_id)))


def trial_summaries(trial_ids: Iterable[str], root: Path | None = None) -> dict[str, TrialSummary]:
    """The summaries of those of `trial_ids` that have a record."""
    out = {}
    for trial_id in dict.fromkeys(trial_ids):
        summary = trial_summary(trial_id, root)
        if summary is not None:
            out[trial_id] = summary
    return out


def history_rows(history: RunHistory, root: Path | None = None) -> tuple[list[RunFigures], dict[str, TrialSummary]]:
    """History's runs and the summaries of the trials they are candidates of, read together (on a worker thread)."""
    rows = history.rows()
    return rows, trial_summaries((r.trial.trial_id for r in rows if r.trial is not None), root)
