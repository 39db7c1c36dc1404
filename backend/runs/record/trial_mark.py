"""Which trial a run is a candidate of: `trial.json` in the run's folder, beside `sweep.json` for sweeps.

A trial's driver (backend.trials) writes it when a candidate's run starts: the trial's id, the candidate's place in
the trial and the candidate (ZeRO stage, offload, micro-batch, checkpointing). History reads it to show a trial's
runs as one group, `runs list` to mark them. `TrialSummary` is what the trial's own record says of the whole trial
(its size, state and winner), read by backend.trials and handed to History's table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRIAL_FILE = "trial.json"


def candidate_label(candidate: dict[str, Any]) -> str:
    """A candidate as a person reads it: "ZeRO-2 cpu mb 4", "ZeRO-3 mb 1 ckpt" (no offload left unsaid)."""
    parts = [f"ZeRO-{candidate.get('stage')}"]
    offload = str(candidate.get("offload") or "none")
    if offload != "none":
        parts.append(offload)
    parts.append(f"mb {candidate.get('micro_batch')}")
    if candidate.get("checkpointing"):
        parts.append("ckpt")
    return " ".join(parts)


def candidate_slug(candidate: dict[str, Any]) -> str:
    """A candidate as the trial's own table names it: `zero2-cpu-mb4`, `zero3-none-mb1-ckpt`."""
    text = f"zero{candidate.get('stage')}-{candidate.get('offload')}-mb{candidate.get('micro_batch')}"
    return text + ("-ckpt" if candidate.get("checkpointing") else "")


@dataclass(frozen=True)
class TrialMark:
    """One run's place in a trial."""

    trial_id: str
    index: int = 0  # the candidate's place in the trial's list
    candidate: dict[str, Any] = field(default_factory=dict)  # Candidate.to_dict()

    @property
    def label(self) -> str:
        return candidate_label(self.candidate)

    @property
    def slug(self) -> str:
        return candidate_slug(self.candidate)

    @classmethod
    def from_dict(cls, data: Any) -> TrialMark | None:
        """The mark in `data` (as the driver writes it), or None when it holds none."""
        if not isinstance(data, dict) or not isinstance(data.get("trial_id"), str) or not data["trial_id"]:
            return None
        index = data.get("index")
        candidate = data.get("candidate")
        return cls(trial_id=data["trial_id"],
                   index=index if isinstance(index, int) and not isinstance(index, bool) else 0,
                   candidate=dict(candidate) if isinstance(candidate, dict) else {})


def read_trial_file(run_dir: Path | str) -> TrialMark | None:
    """The run's trial mark, or None (no trial, no folder, an unreadable file)."""
    try:
        text = (Path(run_dir) / TRIAL_FILE).read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        return TrialMark.from_dict(json.loads(text))
    except ValueError:
        return None


@dataclass(frozen=True)
class TrialSummary:
    """What a trial's record says of the whole trial, for the group History shows."""

    trial_id: str
    state: str = ""  # the trial's state (starting, running, finished, stopped, failed); "" when unknown
    candidates: int = 0  # candidates the trial holds (pruned and ladder steps included)
    winner: str = ""  # the winner's candidate_label; "" when there is none (yet)
    winner_run_id: str | None = None
    measured: tuple[str, ...] = ()  # the runs of the candidates measured to the end, fastest first
