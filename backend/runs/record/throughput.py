"""A run's throughput as the wall clock saw it: the measured step rate times the samples in one optimizer step.

DeepSpeed's own `RunningAvgSamplesPerSec` (and the pipeline engine's `samples/sec`) times only what happens inside
the engine between its timer's start and stop: data loading, logging and anything else the script does between
steps is left out, so a tiny run can say 678 samples/s while its steps take 0.218 s at 8 samples a step (~37
samples/s). The figure here is steps per second (measured between logged steps) times the global batch, which
comes from the run directory's DeepSpeed config: `train_batch_size`, else micro batch x gradient accumulation x
processes; where the config leaves them to the script ("auto", HF Trainer) or there is none, from the script's
HF Trainer arguments (`--per_device_train_batch_size` x `--gradient_accumulation_steps` x processes). Tokens per
second follow where the script's arguments name a sequence length. The engine's figure is kept beside it, labelled
as what it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEEPSPEED_FILE = "ds_config.json"
ACCELERATE_FILE = "accelerate_config.yaml"
COMMAND_FILE = "command.json"
ENGINE_METRIC = "samples_per_sec"  # DeepSpeed's RunningAvgSamplesPerSec, or the pipeline engine's samples/sec
ENGINE_NOTE = "DeepSpeed's engine figure (its timer covers forward, backward and step only)"
# Script arguments that state the tokens in one sample.
SEQUENCE_OPTIONS = ("--seq_len", "--seq-len", "--seq_length", "--seq-length", "--sequence_length",
                    "--sequence-length", "--max_seq_length", "--max-seq-length", "--max_seq_len", "--block_size",
                    "--block-size", "--max_length", "--max-length", "--context_length", "--context-length")
# Script arguments (HF Trainer's) that state the samples one process takes per micro step, and the accumulation.
PER_DEVICE_OPTIONS = ("--per_device_train_batch_size", "--per-device-train-batch-size")
ACCUMULATION_OPTIONS = ("--gradient_accumulation_steps", "--gradient-accumulation-steps")
PROGRESS_SOURCE = "the progress bar's rate"
# Metrics a run reports its own wall-clock throughput in (HF Trainer's end-of-training summary): (name, unit).
REPORTED = (("train_samples_per_second", "samples/s"), ("train_tokens_per_second", "tokens/s"),
            ("tokens_per_sec", "tokens/s"))


@dataclass(frozen=True)
class GlobalBatch:
    """The samples one optimizer step takes, over every process, and where that number comes from."""

    samples: int
    source: str  # "train_batch_size 8 in ds_config.json" / "micro batch 4 x grad accum 1 x 2 processes"


@dataclass(frozen=True)
class BatchShape:
    """What a run directory states about one optimizer step: its global batch and the tokens in one sample (each
    None where unknown). Read once off the UI thread; the throughput is computed from it."""

    batch: GlobalBatch | None
    sequence_length: int | None


@dataclass(frozen=True)
class Throughput:
    """A run's throughput: `value` in `unit` (samples/s, tokens/s or the progress bar's unit/s), how it was
    obtained (`source`, one phrase), tokens per second where known, and DeepSpeed's engine figure kept apart."""

    value: float | None
    unit: str
    source: str  # "" when unknown
    tokens_per_s: float | None = None
    engine_samples_per_s: float | None = None  # DeepSpeed's own figure, when the run logged it

    @property
    def note(self) -> str:
        """Where the figure comes from, and the engine's figure beside it: a tooltip's text."""
        lines = [f"From {self.source}" if self.source else "No throughput recorded"]
        if self.tokens_per_s is not None and self.unit != "tokens/s":
            lines.append(f"{rate_number(self.tokens_per_s)} tokens/s")
        if self.engine_samples_per_s is not None and not self.source.startswith("DeepSpeed"):
            lines.append(f"{ENGINE_NOTE}: {rate_number(self.engine_samples_per_s)} samples/s")
        return "\n".join(lines)


def _positive(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def _count(value: Any) -> int | None:
    """A positive whole number from a config value ("auto" and other words are not one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    return None


def _read(path: Path, load: Any) -> Any:
    try:
        return load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None


def global_batch(run_dir: str | Path) -> GlobalBatch | None:
    """The samples per optimizer step a run directory states: its DeepSpeed config's, else (no config, or "auto"
    batch sizes filled in by the script) the script's HF Trainer arguments'; None where neither says."""
    root = Path(run_dir)
    ds = _read(root / DEEPSPEED_FILE, json.loads)
    if isinstance(ds, Mapping):
        total = _count(ds.get("train_batch_size"))
        if total:
            return GlobalBatch(total, f"train_batch_size {total} in {DEEPSPEED_FILE}")
        micro = _count(ds.get("train_micro_batch_size_per_gpu"))
        if micro is not None:
            accum = _count(ds.get("gradient_accumulation_steps")) or 1
            world = _processes(root)
            return None if world is None else GlobalBatch(micro * accum * world,
                                                          f"micro batch {micro} x grad accum {accum} x {_of(world)}")
    return _argument_batch(root)


def _of(world: int) -> str:
    return f"{world} process{'es' if world != 1 else ''}"


def _argument_batch(root: Path) -> GlobalBatch | None:
    """The global batch from the script's HF Trainer arguments, where the configs leave it to the script."""
    argv = run_argv(root)
    micro = _option_int(argv, PER_DEVICE_OPTIONS)
    if micro is None:
        return None
    accum = _option_int(argv, ACCUMULATION_OPTIONS) or 1
    world = _processes(root)
    if world is None:
        return None
    return GlobalBatch(micro * accum * world,
                       f"per-device batch {micro} x grad accum {accum} x {_of(world)} (the script's arguments)")


def _processes(root: Path) -> int | None:
    """The run's processes over every machine: accelerate's num_processes, else the launch's nproc x machines."""
    accelerate = _read(root / ACCELERATE_FILE, yaml.safe_load)
    if isinstance(accelerate, Mapping):
        count = _count(accelerate.get("num_processes"))
        if count:
            return count
    command = _read(root / COMMAND_FILE, json.loads)
    if isinstance(command, Mapping):
        nproc = _count(command.get("nproc"))
        if nproc:
            machines = _count(accelerate.get("num_machines")) if isinstance(accelerate, Mapping) else None
            return nproc * (machines or 1)
    return None


def sequence_length(argv: Sequence[str]) -> int | None:
    """The tokens in one sample, where the script's arguments say it (`--seq_len 512`, `--max_length=1024`)."""
    return _option_int(argv, SEQUENCE_OPTIONS)


def _option_int(argv: Sequence[str], options: Sequence[str]) -> int | None:
    """The first positive whole number one of `options` is given in `argv` (`--name 4` or `--name=4`)."""
    for i, arg in enumerate(argv):
        option, equals, value = arg.partition("=")
        if option not in options:
            continue
        if not equals:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        try:
            length = int(value)
        except ValueError:
            continue
        if length > 0:
            return length
    return None


def run_argv(run_dir: str | Path) -> list[str]:
    command = _read(Path(run_dir) / COMMAND_FILE, json.loads)
    argv = command.get("argv") if isinstance(command, Mapping) else None
    return [str(a) for a in argv] if isinstance(argv, list) else []


def batch_shape(run_dir: str | Path) -> BatchShape:
    """The run directory's global batch and sequence length, as `run_throughput` reads them."""
    return BatchShape(global_batch(run_dir), sequence_length(run_argv(run_dir)))


def shape_json(shape: BatchShape) -> dict[str, Any]:
    """`shape` as `runs show --json` gives it: what a dashboard watching the run over SSH, which has none of the
    run directory's files, computes the run's throughput from."""
    batch = None if shape.batch is None else {"samples": shape.batch.samples, "source": shape.batch.source}
    return {"global_batch": batch, "sequence_length": shape.sequence_length}


def shape_from_json(data: Any) -> BatchShape | None:
    """The shape from `shape_json`'s answer; None where `data` is not one (a traindeck that does not give it)."""
    if not isinstance(data, Mapping):
        return None
    batch, length = data.get("global_batch"), _count(data.get("sequence_length"))
    samples = _count(batch.get("samples")) if isinstance(batch, Mapping) else None
    found = GlobalBatch(samples, str(batch.get("source") or "")) if samples and isinstance(batch, Mapping) else None
    return BatchShape(found, length)


def run_throughput(run_dir: str | Path, seconds_per_step: float | None, last: Mapping[str, float],
                   progress: Mapping[str, Any] | None = None, shape: BatchShape | None = None) -> Throughput:
    """The run's throughput, best source first: what the run reported over its whole training (HF Trainer's
    summary); the measured step rate x the global batch; DeepSpeed's engine figure (labelled as such); the
    progress bar's own rate. `shape`, when given, is the run directory's batch already read (nothing is read)."""
    engine = _positive(last.get(ENGINE_METRIC))
    for name, unit in REPORTED:
        value = _positive(last.get(name))
        if value:
            return Throughput(value, unit, f"the run's {name}", None, engine)
    if seconds_per_step:
        shape = shape or batch_shape(run_dir)
    if seconds_per_step and shape is not None and shape.batch is not None:
        batch = shape.batch
        samples = batch.samples / seconds_per_step
        length = shape.sequence_length
        tokens = samples * length if length else None
        source = f"step rate ({seconds_per_step:.3g} s/step) x batch {batch.samples} ({batch.source})"
        if length:
            source += f"; tokens: x sequence length {length}"
        return Throughput(samples, "samples/s", source, tokens, engine)
    if engine:
        return Throughput(engine, "samples/s", ENGINE_NOTE, None, engine)
    progress = progress or {}
    rate = _positive(progress.get("rate"))
    if rate:
        return Throughput(rate, f"{progress.get('unit') or 'it'}/s", PROGRESS_SOURCE, None, None)
    return Throughput(None, "", "", None, None)


def rate_number(value: float) -> str:
    """A rate as the throughput's words write it: 678, 36.7, 0.25."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
