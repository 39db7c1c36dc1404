"""The estimator's verdict on one candidate, against the memory free now (measured once per process)."""

from __future__ import annotations

from typing import Any

from traindeck.backend.presets import Preset
from traindeck.backend.trials.candidates import Candidate, candidate_preset
from traindeck.backend.trials.record import TrialError, TrialSpec

_FREE: list[Any] = []  # what is free, measured once per process (the estimator compares every candidate with it)


def estimate_verdict(base: Preset, candidate: Candidate, spec: TrialSpec) -> tuple[str | None, str]:
    """The estimator's verdict for the candidate ("fits" / "tight" / "does not fit") and its lines; (None, "")
    without a model size or where nothing could be compared."""
    if not spec.model_size:
        return None, ""
    from traindeck.backend.estimate import check_preset, free_memory, read_model_size

    try:
        shape = read_model_size(spec.model_size)
    except (ValueError, OSError) as exc:
        raise TrialError(f"--model-size {spec.model_size}: {exc}") from exc
    if not _FREE:
        _FREE.append(free_memory())
    preset = candidate_preset(base, candidate, spec.world_size, spec.keep_global_batch, "trial-candidate")
    check = check_preset(preset, shape, spec.world_size, free=_FREE[0])
    if check.verdict == "unknown":
        return None, ""
    return check.verdict, "; ".join(check.lines())


