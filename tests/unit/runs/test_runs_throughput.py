"""A run's throughput from its measured step rate x the global batch, beside DeepSpeed's engine-only figure: real
DeepSpeed log lines (its ThroughputTimer and pipeline engine prints), real run directories and a real run store."""

from __future__ import annotations

import json

import pytest
from fixtures.history_runs import T0, make_run
from support import FIXTURES

from traindeck.backend.logparse import Line, LineAssembler, Metric, OutputParser
from traindeck.backend.runs import compare_many
from traindeck.backend.runs.control.history import run_figures
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.record.throughput import (
    ENGINE_NOTE,
    BatchShape,
    GlobalBatch,
    batch_shape,
    global_batch,
    run_throughput,
    sequence_length,
    shape_from_json,
    shape_json,
)

# DeepSpeed's ThroughputTimer.stop line (deepspeed/utils/timer.py), as a 2-rank CPU run printed it.
TIMER_LINE = ("[2026-11-21 17:26:06,162] [INFO] [timer.py:264:stop] epoch=0/micro_step=216/global_step=216, "
              "RunningAvgSamplesPerSec=678.0534, CurrSamplesPerSec=701.2, MemAllocated=0.37GB, "
              "MaxMemAllocated=0.37GB")
# PipelineEngine.train_batch's print.
PIPE_LINE = "steps: 40 loss: 0.6931 iter time (s): 0.500 samples/sec: 52.000"


@pytest.fixture
def store():
    with RunStore() as s:
        yield s


def _metrics(*texts: str) -> list[Metric]:
    parser = OutputParser(clock=lambda: 0.0)
    return [i for t in texts for i in parser.feed(Line(t, None)) if isinstance(i, Metric)] + [
        i for i in parser.flush() if isinstance(i, Metric)]


def test_step_rate_times_the_global_batch_not_deepspeeds_engine_figure(store):
    # 216 steps at 0.218 s a step, micro batch 4 x grad accum 1 x 2 processes: 8 samples a step (~36.7 samples/s);
    # DeepSpeed's timer says 678 samples/s because it times the engine alone.
    run = make_run(store, "tiny", micro_batch=4, steps=216, seconds_per_step=0.218)
    engine = [m for m in _metrics(TIMER_LINE) if m.name == "samples_per_sec"]
    assert [m.value for m in engine] == [678.0534]
    store.add_metrics(run.id, [(m.name, m.step, T0 + 100, m.value, None) for m in engine])
    figures = run_figures(store, store.get_run(run.id))
    assert figures.seconds_per_step == pytest.approx(0.218)
    assert figures.throughput == pytest.approx(8 / 0.218)
    assert figures.throughput_unit == "samples/s"
    assert figures.engine_samples_per_s == pytest.approx(678.0534)
    assert "batch 8" in figures.throughput_source
    assert "micro batch 4 x grad accum 1 x 2 processes" in figures.throughput_source
    note = figures.throughput_note
    assert note.startswith("From step rate (0.218 s/step) x batch 8")
    assert f"{ENGINE_NOTE}: 678 samples/s" in note
    # Compared with a run without DeepSpeed's figure, the engine's row stands apart from the throughput.
    other = make_run(store, "other", micro_batch=4, steps=100, seconds_per_step=0.5, started=T0 + 600)
    rows = {row.what: row for row in compare_many(store, [run.id, other.id]).figures}
    assert rows["Throughput"].values == ("36.7 samples/s", "16 samples/s")
    assert rows["DeepSpeed's engine figure (forward/backward/step only)"].values == ("678 samples/s", "-")
    assert "DeepSpeed's engine figure (forward/backward/step only)" not in {
        row.what for row in compare_many(store, [other.id, other.id]).figures}


def test_a_real_deepspeed_log_gives_the_engine_figure_labelled_when_the_batch_is_unknown(store, tmp_path):
    data = (FIXTURES / "logs" / "deepspeed_zero2_2rank_loginfo.raw").read_bytes()
    assembler, parser = LineAssembler(), OutputParser(clock=lambda: 0.0)
    items = [i for ln in assembler.feed(data) + assembler.flush() for i in parser.feed(ln)] + parser.flush()
    last = {m.name: m.value for m in items if isinstance(m, Metric)}
    assert round(last["samples_per_sec"], 2) == 675.24
    # No DeepSpeed config in the run directory: no batch, so the engine's figure stands, named as what it is.
    rate = run_throughput(tmp_path, 0.25, last)
    assert (round(rate.value or 0, 2), rate.unit, rate.source) == (675.24, "samples/s", ENGINE_NOTE)
    (tmp_path / "ds_config.json").write_text(json.dumps({"train_batch_size": 16}), encoding="utf-8")
    rate = run_throughput(tmp_path, 0.25, last)
    assert rate.value == pytest.approx(64.0) and rate.engine_samples_per_s == pytest.approx(675.24, abs=0.01)
    assert rate.source.endswith("(train_batch_size 16 in ds_config.json)")


def test_pipeline_engine_line_and_tokens_from_the_sequence_length(tmp_path):
    last = {m.name: m.value for m in _metrics(PIPE_LINE)}
    assert last["samples_per_sec"] == 52.0
    (tmp_path / "ds_config.json").write_text(json.dumps(
        {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}), encoding="utf-8")
    (tmp_path / "command.json").write_text(json.dumps(
        {"argv": ["deepspeed", "--num_gpus", "2", "train.py", "--seq_len", "512"], "nproc": 2}), encoding="utf-8")
    batch = global_batch(tmp_path)
    assert batch is not None and batch.samples == 16
    rate = run_throughput(tmp_path, 0.5, last)
    assert rate.value == pytest.approx(32.0)
    assert rate.tokens_per_s == pytest.approx(32.0 * 512)
    assert "16,384 tokens/s" in rate.note and "52 samples/s" in rate.note


def test_batch_sizes_left_to_the_script_and_sequence_options():
    assert sequence_length(["train.py", "--max_length=1024"]) == 1024
    assert sequence_length(["train.py", "--block_size", "x", "--seq-len", "128"]) == 128
    assert sequence_length(["train.py", "--steps", "100"]) is None


def test_auto_batch_sizes_give_no_batch(tmp_path):
    (tmp_path / "ds_config.json").write_text(json.dumps(
        {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}), encoding="utf-8")
    assert global_batch(tmp_path) is None
    rate = run_throughput(tmp_path, 0.5, {}, {"rate": 2.0, "unit": "it"})
    assert (rate.value, rate.unit, rate.source) == (2.0, "it/s", "the progress bar's rate")


def test_hf_trainers_own_summary_comes_first(store):
    run = make_run(store, "hf", metrics=[("loss", 10, T0 + 40, 1.5, 0), ("loss", 20, T0 + 45, 1.4, 0),
                                         ("train_samples_per_second", None, T0 + 90, 812.5, 0)])
    figures = run_figures(store, store.get_run(run.id))
    assert (figures.throughput, figures.throughput_unit) == (812.5, "samples/s")
    assert figures.throughput_source == "the run's train_samples_per_second"


def test_the_batch_shape_goes_through_json_whole_and_anything_else_is_none(tmp_path):
    """What `runs show --json` gives a dashboard over SSH: the shape comes back as the run directory states it."""
    (tmp_path / "ds_config.json").write_text(json.dumps({"train_batch_size": 8}))
    (tmp_path / "command.json").write_text(json.dumps({"argv": ["train.py", "--seq_len", "256"], "nproc": 2}))
    shape = batch_shape(tmp_path)
    assert shape.batch is not None and shape.batch.samples == 8 and shape.sequence_length == 256
    assert shape_from_json(json.loads(json.dumps(shape_json(shape)))) == shape
    assert shape_from_json(shape_json(BatchShape(None, None))) == BatchShape(None, None)
    for other in (None, "8", [8], {"global_batch": {"samples": "auto"}, "sequence_length": -1}):
        assert shape_from_json(other) in (None, BatchShape(None, None))
    assert shape_from_json(None) is None  # a traindeck that does not give it: the run directory is read as before
    assert shape_from_json({"global_batch": {"samples": 4, "source": "x"}}) == BatchShape(GlobalBatch(4, "x"), None)
