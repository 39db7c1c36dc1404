"""What a trial tells the user: the table (a row per candidate as it finishes), the winner and why the faster
ones were passed over, the time it took, its JSON, and the preset made from its winner (`trial use`)."""

from __future__ import annotations

from typing import Any

from traindeck.backend.presets import Preset
from traindeck.backend.trials.candidates import Candidate, candidate_preset
from traindeck.backend.trials.record import TrialSpec, TrialState
from traindeck.backend.trials.scoring import Result, label_of, passed_over, ranking, winner

HEADER = f"{'#':>3}  {'candidate':<24} {'samples/s':>10} {'step ms':>9} {'peak GPU':>9} {'peak host':>9}  verdict"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**30:.2f}G" if value >= 2**30 else f"{value / 2**20:.0f}M"


def row_text(index: int, result: Result) -> str:
    """One candidate's row: samples/s, step ms, peak GPU, peak host memory per rank, verdict (and why)."""
    rate = f"{result.samples_per_s:.1f}" if result.samples_per_s is not None else "-"
    step = f"{result.step_ms:.1f}" if result.step_ms is not None else "-"
    verdict = result.state.replace("_", " ")
    if result.reason:
        verdict += f": {result.reason}"
    if result.note:
        verdict += f" (note: {result.note})"
    return (f"{index:>3}  {label_of(result):<24} {rate:>10} {step:>9} {_bytes(result.peak_gpu_bytes):>9} "
            f"{_bytes(result.peak_host_bytes):>9}  {verdict}")


def winner_lines(state: TrialState) -> list[str]:
    """`winner: ID ...` (or why there is none) and why faster candidates were passed over."""
    best = winner(state.results)
    if best is None:
        return [f"winner: none (no candidate of trial {state.id} was measured with room to spare)"]
    r = state.results[best]
    lines = [f"{line}" for line in passed_over(state.results)]
    rate = f"{r.samples_per_s:.1f} samples/s, " if r.samples_per_s is not None else ""
    lines.append(f"winner: {state.id} #{best} {label_of(r)} ({rate}{r.step_ms:.1f} ms a step; run {r.run_id}); "
                 f"make it a preset: traindeck trial use {state.id} --preset NAME")
    return lines


def time_line(state: TrialState) -> str | None:
    """How long the trial took against the sum of what its candidates need at least (launch to the last measured
    step: start + warm-up + steps); the difference is stopping them and going from one to the next."""
    if state.started_at is None or state.ended_at is None:
        return None
    total = state.ended_at - state.started_at
    own = sum(s for r in state.results if (s := r.own_seconds) is not None)
    extra = (total / own - 1.0) if own > 0 else 0.0
    return (f"trial time: {total:.1f} s; its candidates' start + warm-up + steps: {own:.1f} s; overhead "
            f"{extra:+.1%}")


def trial_json(state: TrialState, spec: TrialSpec | None = None) -> dict[str, Any]:
    """The trial as `trial --json` and `trial show --json` print it."""
    candidates = []
    for r in state.results:
        c = r.candidate
        candidates.append({
            "stage": c.get("stage"), "offload": c.get("offload"), "micro_batch": c.get("micro_batch"),
            "checkpointing": bool(c.get("checkpointing")), "run_id": r.run_id, "state": r.state,
            "step_ms": r.step_ms, "samples_per_s": r.samples_per_s, "peak_gpu_bytes": r.peak_gpu_bytes,
            "peak_host_bytes": r.peak_host_bytes, "reason": r.reason, "note": r.note, "kind": r.kind,
            "estimate": r.estimate, "global_batch": r.global_batch, "seconds": r.seconds, "own_seconds": r.own_seconds,
        })
    out: dict[str, Any] = {"id": state.id, "state": state.state, "candidates": candidates,
                           "winner": winner(state.results), "ranking": ranking(state.results),
                           "started_at": state.started_at, "ended_at": state.ended_at}
    if spec is not None:
        out["warmup"], out["steps"], out["headroom"] = spec.warmup, spec.steps, spec.headroom
        out["notes"] = list(spec.notes)
    return out


def winner_preset(spec: TrialSpec, state: TrialState, name: str) -> Preset:
    """The base preset with the winner's set-up, named `name` (ValueError when the trial has no winner)."""
    from traindeck.backend.presets import preset_from_mapping

    best = winner(state.results)
    if best is None:
        raise ValueError(f"trial {state.id} has no winner (no candidate was measured with room to spare)")
    candidate = Candidate.from_dict(state.results[best].candidate)
    base = preset_from_mapping(spec.base_preset)
    preset = candidate_preset(base, candidate, spec.world_size, spec.keep_global_batch, name)
    how = f"ZeRO-{candidate.stage}, offload {candidate.offload}, micro-batch {candidate.micro_batch}"
    if candidate.checkpointing and spec.checkpointing_arg:
        how += f", checkpointing (run the script with {spec.checkpointing_arg})"
    preset.description = f"The winner of trial {state.id} ({how}), from preset '{base.name}'."
    if spec.nproc and base.accelerate is None:
        preset.num_processes = spec.nproc
    return preset
