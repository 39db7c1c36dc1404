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
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

__all__ = ["progress", "metrics", "report", "metric", "enabled", "MARKER"]

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
        sys.stdout.write(line + "\n")
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
