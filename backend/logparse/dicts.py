"""Dict lines: Hugging Face Trainer's `{'loss': ..., 'learning_rate': ..., 'epoch': ...}` and their relatives.

transformers < 5 prints the log dict's repr with floats; transformers 5 formats every float with `.4g` first, so
the values are strings (`{'loss': '0.6931', 'grad_norm': '1.23', 'learning_rate': '5e-05', 'epoch': '0.5'}`).
The summary at the end is the same shape (`{'train_runtime': '4.378', ..., 'train_loss': '6.366'}`), so are the
evaluation results (`{'eval_loss': ...}`). JSON objects printed by scripts (`{"loss": 0.5, "step": 10}`) and dicts
after a short label (the accelerate examples' `epoch 0: {'accuracy': 0.68, 'f1': 0.81}`) are read the same way.

Parsing uses json.loads / ast.literal_eval (no evaluation of code) on lines of at most MAX_CHARS characters.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

MAX_CHARS = 16384
# The Trainer's repr of a NaN/inf loss is a bare name (`{'loss': nan}`), which literal_eval refuses: quoted, it
# reads as the number it is (the loss watchdog needs exactly these).
_BARE_NONFINITE = re.compile(r"(:\s*)(-?inf|nan)(?=\s*[,}])")
STEP_KEYS = ("step", "global_step")
_TRAINER_KEYS = frozenset(
    {"loss", "learning_rate", "grad_norm", "epoch", "train_runtime", "train_loss", "eval_loss", "total_flos"}
)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:
            return None
    if isinstance(v, str) and 0 < len(v) <= 32:
        try:
            return float(v)
        except ValueError:
            return None
    return None


def parse_dict_text(s: str) -> dict[str, Any] | None:
    """`s` (already stripped, starting with "{" and ending with "}") as a dict with string keys, or None."""
    if len(s) > MAX_CHARS or ("':" not in s and '":' not in s):
        return None
    obj: Any = None
    try:
        if s[1:2] == '"':
            try:
                obj = json.loads(s)
            except ValueError:
                obj = None
        if obj is None:
            try:
                obj = ast.literal_eval(s)
            except ValueError:
                quoted = _BARE_NONFINITE.sub(r"\1'\2'", s)
                if quoted == s:
                    raise
                obj = ast.literal_eval(quoted)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(obj, dict) or not obj:
        return None
    return obj


def numeric_items(obj: dict[Any, Any]) -> tuple[dict[str, float], int | None]:
    """Numeric values (numeric strings included; one level of nesting flattened as "outer/inner") and the step."""
    values: dict[str, float] = {}
    step: int | None = None
    for key, raw in obj.items():
        if not isinstance(key, str):
            continue
        if isinstance(raw, dict):
            for sub, v in raw.items():
                num = _number(v)
                if isinstance(sub, str) and num is not None:
                    values[f"{key}/{sub}"] = num
            continue
        num = _number(raw)
        if num is None:
            continue
        if key in STEP_KEYS and step is None and math.isfinite(num) and num == int(num):
            step = int(num)
            continue
        values[key] = num
    return values, step


def is_trainer_dict(values: dict[str, float]) -> bool:
    return any(k in _TRAINER_KEYS or k.startswith(("eval_", "train_", "test_")) for k in values)
