"""The reporting helper's protocol (resources/pyhelpers/traindeck_report.py writes it, this reads it).

One line per call, `@traindeck ` followed by a JSON object:
  {"v": 1, "kind": "progress", "current": 10, "total": 100, "unit": "step", "t": 1732200000.123, "rank": 0}
  {"v": 1, "kind": "metrics", "step": 10, "values": {"loss": 0.53, "lr": 0.0001}, "t": 1732200000.125, "rank": 0}
"t" is the script's time.time() (rates are computed from it, so pipe buffering does not distort them); "rank" is
the RANK environment variable when set. NaN/Infinity are written as JSON's non-standard NaN/Infinity. The marker
is looked for anywhere in the line: a tqdm bar on stderr may have been drawn on the same terminal line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

REPORT_MARKER = "@traindeck "
_MARK_OBJ = "@traindeck {"
_MAX_CHARS = 65536
_decoder = json.JSONDecoder()


@dataclass
class Report:
    kind: str  # "progress" | "metrics"
    rank: int | None = None
    t: float | None = None
    current: int | None = None
    total: int | None = None
    unit: str = "step"
    step: int | None = None
    values: dict[str, float] = field(default_factory=dict)


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return int(v)


def parse_report(text: str) -> Report | None:
    i = text.find(_MARK_OBJ)
    if i < 0 or len(text) - i > _MAX_CHARS:
        return None
    try:
        obj, _ = _decoder.raw_decode(text, i + len(REPORT_MARKER))
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    kind = obj.get("kind")
    rank = _int(obj.get("rank"))
    t = obj.get("t")
    t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) else None
    if kind == "progress":
        current = _int(obj.get("current"))
        if current is None:
            return None
        unit = obj.get("unit")
        return Report("progress", rank, t, current=current, total=_int(obj.get("total")),
                      unit=unit if isinstance(unit, str) and unit else "step")
    if kind == "metrics":
        values = obj.get("values")
        if not isinstance(values, dict):
            return None
        clean = {
            str(k): float(v)
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        return Report("metrics", rank, t, step=_int(obj.get("step")), values=clean)
    return None
