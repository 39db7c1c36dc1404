"""The checkpoints a run leaves behind, found by the layouts the training libraries write (read from their sources):

- HF Trainer (transformers/trainer.py): `<output_dir>/checkpoint-<global_step>/` holding `trainer_state.json`;
  with DeepSpeed it also holds DeepSpeed's own `latest` + `global_stepN/` (that is part of the Trainer checkpoint).
- DeepSpeed (runtime/engine.py save_checkpoint): `<save_dir>/latest` (a text file naming the newest tag) and
  `<save_dir>/<tag>/` holding `mp_rank_NN_model_states.pt` (and `*_optim_states.pt`); the default tag is
  `global_step<N>`.
- accelerate (accelerator.save_state / checkpointing.save_accelerator_state): a folder with `random_states_<rank>.pkl`
  beside `model.safetensors` / `pytorch_model.bin`, `optimizer.bin`, `scheduler.bin`, `sampler.bin`; with
  automatic_checkpoint_naming it is `<project_dir>/checkpoints/checkpoint_<N>/`.

Where to look: the run's working directory and the folders named by its arguments (`--output_dir`, `--save_dir`...),
a few levels down. Reading only: nothing here writes, and a folder that cannot be read is skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HF_TRAINER = "hf-trainer"
DEEPSPEED = "deepspeed"
ACCELERATE = "accelerate"

# Script options whose value is a folder the run writes into (checkpoints, logs, event files).
OUTPUT_OPTIONS = ("output_dir", "save_dir", "logging_dir", "log_dir", "logdir", "checkpoint_dir", "ckpt_dir",
                  "checkpoints_dir", "save", "save_path", "project_dir", "tensorboard_dir", "load", "output")
MAX_DEPTH = 4
MAX_ENTRIES = 20000  # a working directory full of data must not make a listing crawl

_HF_NAME = re.compile(r"^checkpoint-(\d+)$")
_STEP_IN_NAME = re.compile(r"(\d+)$")
_SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".torch_ext", "wandb"})


@dataclass(frozen=True)
class Checkpoint:
    path: str
    kind: str  # hf-trainer | deepspeed | accelerate
    step: int | None
    time: float  # the newest modification time of a file in it
    bytes: int
    latest: bool = False  # DeepSpeed: the tag its `latest` file names

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def option_dirs(argv: Sequence[str], cwd: str) -> list[Path]:
    """The folders named by output-like options in argv (`--output_dir X`, `--save_dir=X`), absolute."""
    found: list[Path] = []
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        if name.replace("-", "_") not in OUTPUT_OPTIONS:
            continue
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                continue
            value = argv[i + 1]
        if value and "{" not in value:
            found.append(Path(cwd, os.path.expanduser(value)))
    return found


def search_roots(argv: Sequence[str], cwd: str) -> list[Path]:
    """The working directory and the argument folders, without repeats (a folder inside another is kept once)."""
    roots: list[Path] = []
    for path in [*option_dirs(argv, cwd), Path(cwd)]:
        try:
            real = path.resolve()
        except OSError:
            continue
        if real not in roots:
            roots.append(real)
    return roots


def walk_folders(root: Path, max_depth: int = MAX_DEPTH) -> Iterable[tuple[Path, list[str], list[str]]]:
    """(folder, subfolder names, file names), breadth first, bounded in depth and entries; never follows links."""
    queue = [(root, 0)]
    seen = 0
    while queue:
        folder, depth = queue.pop(0)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        seen += len(entries)
        dirs = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        files = sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
        yield folder, dirs, files
        if seen > MAX_ENTRIES:
            return
        if depth < max_depth:
            queue.extend((folder / d, depth + 1) for d in dirs if d not in _SKIP_DIRS)


def _size_and_time(folder: Path) -> tuple[int, float]:
    total, newest = 0, 0.0
    for current, _dirs, files in os.walk(folder):
        for name in files:
            try:
                st = os.stat(os.path.join(current, name), follow_symlinks=False)
            except OSError:
                continue
            total += st.st_size
            newest = max(newest, st.st_mtime)
    if not newest:
        try:
            newest = folder.stat().st_mtime
        except OSError:
            pass
    return total, newest


def _step_from_name(name: str) -> int | None:
    match = _STEP_IN_NAME.search(name)
    return int(match.group(1)) if match else None


def _is_deepspeed_tag(files: list[str]) -> bool:
    return any(f.endswith("_model_states.pt") or f.endswith("_optim_states.pt") for f in files)


def _is_accelerate_state(files: list[str]) -> bool:
    return any(f.startswith("random_states_") and f.endswith(".pkl") for f in files)


def find_checkpoints(roots: Iterable[Path]) -> list[Checkpoint]:
    """Every checkpoint under the roots, oldest first (by step, then time)."""
    found: dict[str, Checkpoint] = {}
    inside: set[Path] = set()  # folders already part of a checkpoint: not listed again
    for root in roots:
        for folder, dirs, files in walk_folders(root):
            if any(parent in inside for parent in (folder, *folder.parents)):
                continue
            key = str(folder)
            hf = _HF_NAME.match(folder.name)
            if hf and ("trainer_state.json" in files or "latest" in files or files):
                size, mtime = _size_and_time(folder)
                found[key] = Checkpoint(key, HF_TRAINER, int(hf.group(1)), mtime, size)
                inside.add(folder)
                continue
            if _is_accelerate_state(files):
                size, mtime = _size_and_time(folder)
                found[key] = Checkpoint(key, ACCELERATE, _step_from_name(folder.name), mtime, size)
                inside.add(folder)
                continue
            if "latest" in files:
                latest = _read_latest(folder / "latest")
                for tag in dirs:
                    tag_dir = folder / tag
                    try:
                        tag_files = os.listdir(tag_dir)
                    except OSError:
                        continue
                    if not _is_deepspeed_tag(tag_files):
                        continue
                    size, mtime = _size_and_time(tag_dir)
                    found[str(tag_dir)] = Checkpoint(str(tag_dir), DEEPSPEED, _step_from_name(tag), mtime, size,
                                                     latest=tag == latest)
                    inside.add(tag_dir)
    return sorted(found.values(), key=lambda c: (c.step if c.step is not None else -1, c.time, c.path))


def _read_latest(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()[:200] or None
    except OSError:
        return None


def run_checkpoints(argv: Sequence[str], cwd: str) -> list[Checkpoint]:
    """The checkpoints of a run from its recorded argv and working directory."""
    return find_checkpoints(search_roots(argv, cwd))


def newest(checkpoints: Sequence[Checkpoint]) -> Checkpoint | None:
    """The checkpoint to resume from by default: the highest step, then the newest written."""
    if not checkpoints:
        return None
    return max(checkpoints, key=lambda c: (c.step if c.step is not None else -1, c.time))
