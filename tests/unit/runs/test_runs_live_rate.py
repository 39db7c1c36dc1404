"""The Runs page's live throughput: the progress bar's step rate (the steps/s the header shows) x the global batch
by the history's own rules, in words with its source; real run directories as the launcher writes them (a
DeepSpeed config, an HF Trainer-like script's arguments), real run records and a real store read."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
import yaml

from traindeck.backend.runs.control.live_rate import live_throughput, rate_text
from traindeck.backend.runs.control.view import read_view
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.record.throughput import ENGINE_NOTE, batch_shape, run_throughput

STALLED = "stalled: no output or progress for 12 min; a step usually takes 0.25 s"


def deepspeed_dir(root: Path, *, micro: int | str = 4, accumulation: int = 1, argv: tuple[str, ...] = ()) -> Path:
    """A DeepSpeed run's directory: its ds_config.json and a 2-process launch in command.json."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ds_config.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": accumulation,
         "zero_optimization": {"stage": 2}}), encoding="utf-8")
    (root / "command.json").write_text(json.dumps(
        {"argv": ["deepspeed", "--num_gpus", "2", "train.py", *argv], "nproc": 2}), encoding="utf-8")
    return root


def record(run_dir: Path, rate: float, unit: str = "step", **fields: object) -> RunRecord:
    now = time.time()
    return RunRecord(id=run_dir.name, run_dir=str(run_dir), created_at=now, started_at=now,
                     progress={"current": 40, "total": 100, "rate": rate, "eta_s": 15.0, "unit": unit},
                     **fields)  # type: ignore[arg-type]


def test_a_deepspeed_runs_samples_and_tokens_per_second_from_its_ds_config(tmp_path: Path) -> None:
    run_dir = deepspeed_dir(tmp_path / "ds", argv=("--seq_len", "512"))
    run = record(run_dir, 4.0)  # 4 steps/s x (micro 4 x accumulation 1 x 2 processes) = 32 samples/s
    shape = batch_shape(run_dir)
    words = rate_text(run, {}, shape)
    assert words.text == "32 samples/s · 16,384 tokens/s"
    assert words.tooltip.splitlines()[0] == ("From step rate (0.25 s/step) x batch 8 (micro batch 4 x grad accum 1 "
                                             "x 2 processes); tokens: x sequence length 512")
    # DeepSpeed's engine-only figure stays beside it in the tooltip, named as what it is, never in its place.
    words = rate_text(run, {"samples_per_sec": 678.05}, shape)
    assert words.text == "32 samples/s · 16,384 tokens/s"
    assert f"{ENGINE_NOTE}: 678 samples/s" in words.tooltip
    # The History's function gives the same figure for the same step rate: one formula.
    history = run_throughput(run_dir, 0.25, {})
    assert live_throughput(run, {}, shape) == history
    # Stalled: the rate no longer holds, so it says stalled, as the ETA does.
    stalled = rate_text(record(run_dir, 4.0, state_detail=STALLED), {}, shape)
    assert stalled.text == "samples/s: stalled"
    assert stalled.tooltip.startswith("The run looks stalled") and "x batch 8" in stalled.tooltip


def test_an_hf_trainer_like_runs_batch_comes_from_its_arguments(tmp_path: Path) -> None:
    # HF Trainer leaves DeepSpeed's batch sizes "auto" and fills them from its own arguments: those state the batch.
    run_dir = deepspeed_dir(tmp_path / "hf", micro="auto", argv=(
        "--per_device_train_batch_size", "8", "--gradient_accumulation_steps=2", "--max_seq_length", "128"))
    (run_dir / "ds_config.json").write_text(json.dumps(
        {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
         "gradient_accumulation_steps": "auto"}), encoding="utf-8")
    (run_dir / "accelerate_config.yaml").write_text(yaml.safe_dump({"num_processes": 2}), encoding="utf-8")
    run = record(run_dir, 2.0, unit="it")  # tqdm's "it" in a Trainer counts optimizer steps
    words = rate_text(run, {"loss": 1.2}, batch_shape(run_dir))
    assert words.text == "64 samples/s · 8,192 tokens/s"
    assert words.tooltip.splitlines()[0] == (
        "From step rate (0.5 s/step) x batch 32 (per-device batch 8 x grad accum 2 x 2 processes (the script's "
        "arguments)); tokens: x sequence length 128")
    # At the end the Trainer's own summary comes first, as in the History.
    summary = rate_text(run, {"train_samples_per_second": 61.5}, batch_shape(run_dir))
    assert (summary.text, summary.tooltip) == ("61.5 samples/s", "From the run's train_samples_per_second")


def test_nothing_where_the_batch_is_unknown_and_the_engine_figure_labelled_when_alone(tmp_path: Path) -> None:
    run_dir = tmp_path / "plain"
    run_dir.mkdir()
    (run_dir / "command.json").write_text(json.dumps({"argv": ["python", "train.py"], "nproc": 1}), encoding="utf-8")
    run = record(run_dir, 4.0)
    shape = batch_shape(run_dir)
    assert shape.batch is None
    # No batch: no number (the progress bar's own rate is the steps/s the header shows already).
    assert rate_text(run, {"loss": 0.5}, shape) == rate_text(run, {}, None)
    assert rate_text(run, {}, shape).text == ""
    assert rate_text(record(run_dir, 4.0, state_detail=STALLED), {}, shape).text == ""
    # Only DeepSpeed's engine figure: shown, labelled as the engine's.
    words = rate_text(run, {"samples_per_sec": 678.05}, shape)
    assert words.text == "678 samples/s (DeepSpeed engine)"
    assert words.tooltip == f"From {ENGINE_NOTE}"
    # A progress bar counting samples is no step rate: the batch does not multiply it.
    samples = rate_text(record(deepspeed_dir(tmp_path / "s"), 40.0, unit="samples"), {}, None)
    assert samples.text == ""


def test_the_pages_first_read_carries_the_runs_batch_and_later_reads_do_not_read_it_again() -> None:
    run_dir = create_run_dir()
    deepspeed_dir(run_dir.path)
    run_dir.output.write_bytes(b"")
    run = record(run_dir.path, 4.0)
    run = dataclasses.replace(run, id=run_dir.run_id)
    with RunStore() as store:
        store.add_run(run)
        first = read_view(store, run.id)
        assert first is not None and first.shape is not None and first.shape.batch is not None
        assert first.shape.batch.samples == 8
        later = read_view(store, run.id, metric_mark=first.metric_mark)
        assert later is not None and later.shape is None


@pytest.mark.parametrize("argv", [("--per_device_train_batch_size", "auto"), ("--per_device_train_batch_size",)])
def test_arguments_that_state_no_number_give_no_batch(tmp_path: Path, argv: tuple[str, ...]) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "command.json").write_text(json.dumps({"argv": ["python", "train.py", *argv], "nproc": 2}),
                                          encoding="utf-8")
    assert batch_shape(run_dir).batch is None
