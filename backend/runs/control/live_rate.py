"""The open run's throughput as the Runs page shows it beside its progress: the progress bar's step rate (the
steps/s the header shows, from the same read of the run's record) times the global batch, by the history's own
rules (`seconds_per_step`, `run_throughput`), in words with where the figure comes from.

Nothing is shown where the batch is unknown (a number would be a guess), nor where the only rate is the progress
bar's own (the header shows it already); DeepSpeed's engine figure, when that is all there is, is labelled as what
it is. While the run looks stalled the figure says so instead of a rate that no longer holds, as the ETA does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from traindeck.backend.runs.control.history import seconds_per_step
from traindeck.backend.runs.control.view import stall_warning
from traindeck.backend.runs.record.run_store import RunRecord
from traindeck.backend.runs.record.throughput import (
    ENGINE_NOTE,
    PROGRESS_SOURCE,
    BatchShape,
    Throughput,
    rate_number,
    run_throughput,
)

STALLED = "stalled"
ENGINE_LABEL = "DeepSpeed engine"


@dataclass(frozen=True)
class RateText:
    """The throughput's words for the header: `text` ("36.7 samples/s · 18,790 tokens/s", "" for nothing) and
    `tooltip` (where it comes from)."""

    text: str
    tooltip: str


def live_throughput(record: RunRecord, last: Mapping[str, float], shape: BatchShape | None) -> Throughput | None:
    """The run's throughput from its record's progress rate and `shape` (its run directory's batch, read off the UI
    thread), with `last` the latest metric values (DeepSpeed's engine figure, HF Trainer's summary); None where
    nothing truthful beyond the progress bar's rate is known."""
    sps, _source = seconds_per_step(record, {}, {})  # the progress bar's rate in steps: the header's steps/s
    rate = run_throughput(record.run_dir, sps, last, record.progress, shape=shape or BatchShape(None, None))
    if rate.value is None or rate.source == PROGRESS_SOURCE:
        return None
    return rate


def rate_text(record: RunRecord, last: Mapping[str, float], shape: BatchShape | None) -> RateText:
    """The header's throughput words for the run's newest read."""
    rate = live_throughput(record, last, shape)
    if rate is None or rate.value is None:
        return RateText("", "")
    if stall_warning(record) is not None:
        return RateText(f"{rate.unit}: {STALLED}",
                        f"The run looks stalled: its last rate does not hold now.\n{rate.note}")
    text = f"{rate_number(rate.value)} {rate.unit}"
    if rate.source == ENGINE_NOTE:
        text += f" ({ENGINE_LABEL})"
    elif rate.tokens_per_s is not None and rate.unit != "tokens/s":
        text += f" · {rate_number(rate.tokens_per_s)} tokens/s"
    return RateText(text, rate.note)
