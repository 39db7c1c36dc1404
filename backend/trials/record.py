"""Where a trial lives: a folder `trials/ID` in the data dir with `spec.json` (what to try, written once),
`state.json` (the candidates' results and the trial's state, rewritten atomically by the trial's driver after each
change) and `stop` (a request to stop, written by `trial stop`). Each candidate's run keeps `trial.json` in its own
folder (the trial's id and the candidate), beside `sweep.json` for sweeps.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.core.paths import data_dir, ensure_private_dir
from traindeck.backend.runs.record.trial_mark import TRIAL_FILE  # in a candidate's run folder
from traindeck.backend.trials.scoring import Result

TRIAL_STATES = ("starting", "running", "finished", "stopped", "failed")


class TrialError(Exception):
    """What is wrong with a trial's options (one line for the user)."""


def trials_dir() -> Path:
    return data_dir() / "trials"


def new_trial_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


@dataclass
class TrialSpec:
    """What a trial tries: the base launch (as data the driver can rebuild a LaunchRequest from) and the axes."""

    id: str
    name: str
    script: str
    script_args: list[str]
    base_preset: dict[str, Any]  # preset_to_mapping() of the base
    candidates: list[dict[str, Any]]  # Candidate.to_dict(), in the order to try them
    estimates: list[str | None] = field(default_factory=list)  # the estimator's verdict per candidate, if any
    launcher: str | None = None
    nproc: int | None = None
    python: str | None = None
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    gpus: list[int] | None = None
    warmup: int = 3
    steps: int = 20
    headroom: float = 0.1
    keep_global_batch: bool = False
    checkpointing_arg: str | None = None
    ladder: bool = False  # micro-batches double from 1 while a set-up is measured
    memory_limit: int | None = None  # host bytes one rank may use; a rank above it ends its candidate
    candidate_timeout_s: float = 900.0  # no new step for this long ends a candidate as failed
    model_size: str | None = None
    world_size: int = 1
    skipped: list[dict[str, Any]] = field(default_factory=list)  # Result.to_dict() of those pruned beforehand
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class TrialState:
    """The trial as its driver last wrote it."""

    id: str
    state: str = "starting"  # one of TRIAL_STATES
    results: list[Result] = field(default_factory=list)
    current: int | None = None  # the candidate running now
    driver_pid: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.state in ("finished", "stopped", "failed")

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["results"] = [r.to_dict() for r in self.results]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialState:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["results"] = [Result.from_dict(r) for r in data.get("results") or [] if isinstance(r, dict)]
        return cls(**known)


class TrialFolder:
    """One trial's folder."""

    def __init__(self, trial_id: str, root: Path | None = None) -> None:
        self.id = trial_id
        self.path = (root or trials_dir()) / trial_id
        self.driver_pid: int | None = None  # set by whoever started the driver (before it writes its state)

    @property
    def spec_path(self) -> Path:
        return self.path / "spec.json"

    @property
    def state_path(self) -> Path:
        return self.path / "state.json"

    @property
    def stop_path(self) -> Path:
        return self.path / "stop"

    @property
    def log_path(self) -> Path:
        return self.path / "driver.log"

    def create(self, spec: TrialSpec) -> None:
        ensure_private_dir(self.path.parent)
        self.path.mkdir(mode=0o700)
        atomic_write_text(self.spec_path, json.dumps(spec.to_dict(), indent=1) + "\n")

    def exists(self) -> bool:
        return self.spec_path.is_file()

    def spec(self) -> TrialSpec:
        return TrialSpec.from_dict(json.loads(self.spec_path.read_text(encoding="utf-8")))

    def state(self) -> TrialState:
        """The state the driver last wrote (a fresh one when it has written none yet)."""
        try:
            return TrialState.from_dict(json.loads(self.state_path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return TrialState(self.id)

    def write_state(self, state: TrialState) -> None:
        atomic_write_text(self.state_path, json.dumps(state.to_dict(), indent=1) + "\n")

    def request_stop(self) -> None:
        atomic_write_text(self.stop_path, f"{time.time()}\n")

    def stop_requested(self) -> bool:
        return self.stop_path.exists()


def list_trials(root: Path | None = None) -> list[str]:
    """Trial ids, oldest first (ids begin with their start time)."""
    base = root or trials_dir()
    try:
        return sorted(p.name for p in base.iterdir() if (p / "spec.json").is_file())
    except OSError:
        return []


def resolve_trial(text: str, root: Path | None = None) -> str:
    """A trial id from an id or a unique prefix of one (`last` is the newest); KeyError with a line otherwise."""
    ids = list_trials(root)
    if text == "last" and ids:
        return ids[-1]
    if text in ids:
        return text
    matches = [i for i in ids if i.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise KeyError(f"trial id {text!r} is ambiguous: {', '.join(matches[:5])}")
    raise KeyError(f"no trial {text!r} (`traindeck trial show last` shows the newest)")


def write_trial_mark(run_dir: Path | str, trial_id: str, index: int, candidate: dict[str, Any]) -> None:
    """Mark a run as candidate `index` of trial `trial_id` (History can group a trial's runs by it)."""
    data = {"trial_id": trial_id, "index": index, "candidate": candidate}
    atomic_write_text(Path(run_dir) / TRIAL_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_trial_mark(run_dir: Path | str) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(run_dir) / TRIAL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("trial_id"), str) else None
