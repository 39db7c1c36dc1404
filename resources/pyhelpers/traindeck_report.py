"""Exact progress and metrics for traindeck, from any training script. No dependencies; safe to import anywhere.

traindeck puts this folder on PYTHONPATH for the runs it launches. In a script:

    try:
        import traindeck_report as td
    except ImportError:          # running without traindeck: keep the script standalone
        td = None
    ...
    if td:
        td.progress(step, total=max_steps)
        td.metrics(step=step, loss=loss.item(), lr=scheduler.get_last_lr()[0])

Each call prints one line to stdout and flushes:
    @traindeck {"v": 1, "kind": "metrics", "step": 10, "values": {"loss": 0.53}, "t": 1732200000.1, "rank": 0}
Only the process with rank 0 prints (RANK, else LOCAL_RANK; a process with neither is rank 0), unless
`all_ranks=True` is passed or TRAINDECK_REPORT_ALL_RANKS=1 is set; TRAINDECK_REPORT=0 silences it. Values may be
Python numbers, numpy scalars or one-element tensors (anything float() or .item() accepts); others are skipped.
While a tqdm bar is on screen the line goes through tqdm.write, so it does not land in the middle of the bar.
Nothing here ever raises into the training script.

Save, then stop (optional; needs nothing the script does not already import). With it, traindeck's Stop becomes
"save a checkpoint, then stop", and "Save now" (`traindeck runs save ID`) saves one at the next step:

    trainer.add_callback(td.hf_callback())           # HF Trainer: also reports its logs as exact metrics

    guard = td.SaveStop()                            # an accelerate / DeepSpeed loop
    for step, batch in enumerate(loader):
        ...
        action = guard.check()                       # None, "save" or "stop": the same answer on every rank
        if action:
            engine.save_checkpoint(save_dir)         # or accelerator.save_state(...)
            guard.saved(save_dir, step)
            if action == "stop":
                break

The companion announces itself in the run directory (companion.json); traindeck then holds its signals for up to
`hold_s` seconds after a stop request, while the script saves and ends. Force stop is not held.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

__all__ = ["progress", "metrics", "report", "metric", "enabled", "MARKER", "SaveStop", "hf_callback", "event"]

MARKER = "@traindeck "
_VERSION = 1


def _env_rank() -> int | None:
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def enabled(all_ranks: bool = False) -> bool:
    """Whether a call in this process prints anything."""
    if os.environ.get("TRAINDECK_REPORT", "1").strip() in ("0", "false", "no", "off"):
        return False
    if all_ranks or os.environ.get("TRAINDECK_REPORT_ALL_RANKS", "").strip() in ("1", "true", "yes", "on"):
        return True
    rank = _env_rank()
    return rank is None or rank == 0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        pass
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return float(item())
        except Exception:  # noqa: BLE001 - whatever a foreign scalar raises, the training must go on
            return None
    return None


def _int(value: Any) -> int | None:
    number = _number(value)
    if number is None or not math.isfinite(number):
        return None
    return int(number)


def _emit(payload: dict[str, Any]) -> None:
    payload["v"] = _VERSION
    payload["t"] = round(time.time(), 6)
    rank = _env_rank()
    if rank is not None:
        payload["rank"] = rank
    try:
        line = MARKER + json.dumps(payload, separators=(",", ":"), allow_nan=True)
    except (TypeError, ValueError):
        return
    try:
        tqdm_module = sys.modules.get("tqdm")
        bar_class = getattr(tqdm_module, "tqdm", None) if tqdm_module is not None else None
        if bar_class is not None and getattr(bar_class, "_instances", None):
            bar_class.write(line, file=sys.stdout)  # clears the bars, prints, redraws them
            sys.stdout.flush()
            return
    except Exception:  # noqa: BLE001
        pass
    try:
        # "\r" first: a plain carriage-return bar has no newline after it, and this line would otherwise be glued
        # to its end (the bar's next redraw comes after it anyway).
        sys.stdout.write("\r" + line + "\n")
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):  # closed or missing stdout, broken pipe
        pass


def progress(current: Any, total: Any = None, *, unit: str = "step", all_ranks: bool = False) -> None:
    """Where the run is: `current` of `total` (total may be None when unknown)."""
    if not enabled(all_ranks):
        return
    cur = _int(current)
    if cur is None:
        return
    _emit({"kind": "progress", "current": cur, "total": _int(total) if total is not None else None, "unit": unit})


def metrics(step: Any = None, *, all_ranks: bool = False, **values: Any) -> None:
    """Named values at `step`: metrics(step=10, loss=0.53, lr=1e-4). Names that are not identifiers:
    metrics(step=10, **{"train/loss": 0.53})."""
    _metrics(step, all_ranks, values)


def metric(name: str, value: Any, step: Any = None, *, all_ranks: bool = False) -> None:
    """One named value (any name, "step" included)."""
    _metrics(step, all_ranks, {name: value})


def _metrics(step: Any, all_ranks: bool, values: dict[str, Any]) -> None:
    if not enabled(all_ranks):
        return
    clean = {}
    for name, value in values.items():
        number = _number(value)
        if number is not None:
            clean[str(name)] = number
    if not clean:
        return
    _emit({"kind": "metrics", "step": _int(step) if step is not None else None, "values": clean})


# The demo script (resources/demo/train_tiny.py) and older scripts call it report(step=..., loss=...).
report = metrics


def event(kind: str, text: str, **values: Any) -> None:
    """A one-off fact for the run's event list (a checkpoint saved, a phase begun)."""
    if not enabled():
        return
    _emit({"kind": "event", "event": str(kind), "text": str(text), **values})


# ---- save, then stop -----------------------------------------------------------------------------------------
_COMPANION = "companion.json"
_STOP = "stop"
_SAVE_NOW = "save_now"


def _run_file(name: str) -> str | None:
    run_dir = os.environ.get("TRAINDECK_RUN_DIR", "").strip()
    return os.path.join(run_dir, name) if run_dir else None


def _mtime(path: str | None) -> float | None:
    if path is None:
        return None
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _agree(value: int) -> int:
    """The largest value over all ranks when torch.distributed is running (so every rank saves and stops at the
    same step: a checkpoint save is collective); the value itself otherwise."""
    torch = sys.modules.get("torch")
    if torch is None:
        return value
    try:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return value
        device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
        tensor = torch.tensor([value], dtype=torch.int32, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())
    except Exception:  # noqa: BLE001 - without agreement each rank decides alone
        return value


class SaveStop:
    """Turns traindeck's stop request into "save, then stop" and its save request into "save now".

    check() reads two files of the run directory (a stat each) and, under torch.distributed, agrees with the other
    ranks (one tiny all_reduce); `every` > 1 checks only every n-th call.
    """

    def __init__(self, hold_s: float = 300.0, every: int = 1, kind: str = "loop") -> None:
        self.hold_s = float(hold_s)
        self.every = max(1, int(every))
        self._calls = 0
        self._save_seen = _mtime(_run_file(_SAVE_NOW))
        self._stopping = False
        self._announce(kind)

    def _announce(self, kind: str) -> None:
        path = _run_file(_COMPANION)
        if path is None or _env_rank() not in (None, 0):
            return
        try:
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump({"save_on_stop": True, "save_now": True, "hold_s": self.hold_s, "kind": kind,
                           "pid": os.getpid(), "t": time.time()}, handle)
            os.replace(temporary, path)
        except OSError:
            pass

    def check(self) -> str | None:
        """None, "save" (a Save now request) or "stop" (save, then stop)."""
        self._calls += 1
        if self._stopping or self._calls % self.every:
            return None
        local = 0
        if _mtime(_run_file(_STOP)) is not None:
            local = 2
        else:
            seen = _mtime(_run_file(_SAVE_NOW))
            if seen is not None and seen != self._save_seen:
                self._save_seen = seen
                local = 1
        action = {0: None, 1: "save", 2: "stop"}.get(_agree(local))
        if action == "stop":
            self._stopping = True
            event("save_stop", "stop requested: saving a checkpoint before stopping")
        elif action == "save":
            event("save_now", "save requested: saving a checkpoint")
        return action

    def saved(self, path: Any = None, step: Any = None) -> None:
        """Say that a checkpoint was written (shown in the run's events)."""
        event("checkpoint", f"checkpoint saved{f' at step {_int(step)}' if step is not None else ''}"
              f"{f': {path}' if path is not None else ''}", path=None if path is None else str(path),
              step=_int(step) if step is not None else None)


def hf_callback(hold_s: float = 300.0, every: int = 1) -> Any:
    """A transformers TrainerCallback: save-then-stop, save now, and the Trainer's logs as exact metrics."""
    from transformers import TrainerCallback  # the script uses the Trainer, so transformers is there

    guard_args = (hold_s, every)

    class TraindeckCallback(TrainerCallback):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.guard = SaveStop(*guard_args, kind="hf-trainer")

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            action = self.guard.check()
            if action:
                control.should_save = True
            if action == "stop":
                control.should_training_stop = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            path = os.path.join(str(args.output_dir), f"checkpoint-{state.global_step}")
            self.guard.saved(path, state.global_step)
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
            if logs:
                metrics(step=state.global_step, **{k: v for k, v in logs.items() if k != "step"})
            if state.max_steps:
                progress(state.global_step, state.max_steps)
            return control

    return TraindeckCallback()
