"""Validation messages: what is wrong, where (file, line, column, key path), and how bad."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

# "note": information a reviewer wants once per file (who fills "auto"), never a problem: exit status unaffected.
Severity = Literal["error", "warning", "note"]
PathT = tuple[str | int, ...]


def format_path(path: Sequence[str | int]) -> str:
    """("zero_optimization", "offload_param", "device") -> "zero_optimization.offload_param.device"; ints -> [i]."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass(frozen=True)
class Message:
    severity: Severity
    path: str  # dotted key path, "" for the document as a whole
    message: str
    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based

    def format(self) -> str:
        """`FILE:LINE:COL: error|warning|note: PATH: message`, the form compilers use, so editors can jump to it."""
        where = f"{self.file or '<text>'}:{self.line or 1}:{self.column or 1}"
        return f"{where}: {self.severity}: {self.path or '(document)'}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def has_errors(messages: Iterable[Message]) -> bool:
    return any(m.severity == "error" for m in messages)


def sort_messages(messages: Iterable[Message]) -> list[Message]:
    rank = {"error": 0, "warning": 1, "note": 2}
    return sorted(messages, key=lambda m: (m.file or "", m.line or 0, m.column or 0, rank.get(m.severity, 1), m.path))
