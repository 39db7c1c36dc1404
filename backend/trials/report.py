"""What a trial tells the user: the table (a row per candidate as it finishes), the winner and why the faster
ones were passed over, the time it took, its JSON, and the preset made from its winner (`trial use`)."""

from __future__ import annotations

from typing import Any

from traindeck.backend.core import format_bytes
from traindeck.backend.presets import Preset
from traindeck.backend.trials.candidates import Candidate, candidate_preset
from traindeck.backend.trials.record import TrialSpec, TrialState
from traindeck.backend.trials.scoring import Result, label_of, passed_over, ranking, winner

HEADER = f"{'#':>3}  {'candidate':<24} {'samples/s':>10} {'step ms':>9} {'peak GPU':>9} {'peak host':>9}  verdict"


def memory_cell(value: int | None) -> str:
    """A peak memory in a candidate's row (the table's and the Trials page's): "1.50G", "390M", "-"."""
    return format_bytes(value, digits=2, compact=True)


def row_text(index: int, result: Result) -> str:
    """One candidate's row: samples/s, step ms, peak GPU, peak host memory per rank, verdict (and why)."""
    rate = f"{result.samples_per_s:.1f}" if result.samples_per_s is not None else "-"
    step = f"{result.step_ms:.1f}" if result.step_ms is not None else "-"
    verdict = result.state.replace("_", " ")
    if result.reason:
        verdict += f": {result.reason}"
    if result.note:
        verdict += f" (note: {result.note})"
    return (f"{index:>3}  {label_of(result):<24} {rate:>10} {step:>9} {memory_cell(result.peak_gpu_bytes):>9} "
            f"{memory_cell(result.peak_host_bytes):>9}  {verdict}")


def measured_count(state: TrialState) -> int:
    """How many candidates were measured (with room to spare or too tight)."""
    return sum(1 for r in state.results if r.state in ("measured", "too_tight"))


def end_line(state: TrialState) -> str:
    """How far an ended trial got: "4 of 4 candidates done"; a stopped one says what it measured before the stop
    ("stopped before any candidate was measured", "stopped: 1 of 3 candidates measured")."""
    total = len(state.results)
    if state.state != "stopped":
        return f"{sum(1 for r in state.results if r.finished)} of {total} candidates done"
    measured = measured_count(state)
    if measured == 0:
        return "stopped before any candidate was measured"
    return f"stopped: {measured} of {total} candidate{'s' if total != 1 else ''} measured"


def winner_lines(state: TrialState, cli_hint: bool = True) -> list[str]:
    """`winner: ID ...` (or why there is none) and why faster candidates were passed over; `cli_hint`: end the
    winner's line with the `trial use` command that makes it a preset (the dashboard has a button instead)."""
    best = winner(state.results)
    if best is None:
        if state.state == "stopped" and measured_count(state) == 0:
            return [f"winner: none (trial {state.id} was stopped before any candidate was measured)"]
        if state.state == "stopped":
            return [f"winner: none (trial {state.id} was stopped; no candidate measured before the stop had room "
                    "to spare)"]
        return [f"winner: none (no candidate of trial {state.id} was measured with room to spare)"]
    r = state.results[best]
    lines = [f"{line}" for line in passed_over(state.results)]
    rate = f"{r.samples_per_s:.1f} samples/s, " if r.samples_per_s is not None else ""
    hint = f"; make it a preset: traindeck trial use {state.id} --preset NAME" if cli_hint else ""
    stopped = " (the trial was stopped: the best of those measured)" if state.state == "stopped" else ""
    lines.append(f"winner: {state.id} #{best} {label_of(r)} ({rate}{r.step_ms:.1f} ms a step; run {r.run_id})"
                 f"{stopped}{hint}")
    return lines


def time_line(state: TrialState) -> str | None:
    """How long the trial took against the sum of what its candidates need at least (launch to the last measured
    step: start + warm-up + steps); the difference is stopping them and going from one to the next. A stopped trial
    says its time only: a candidate cut short makes that difference meaningless."""
    if state.started_at is None or state.ended_at is None:
        return None
    total = state.ended_at - state.started_at
    if state.state == "stopped":
        return f"trial time: {total:.1f} s (stopped before its end)"
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
