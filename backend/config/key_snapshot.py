"""The key snapshot: DeepSpeed's and accelerate's config keys as the installed tools define them, read from JSON.

snapshot/deepspeed.json and snapshot/accelerate.json are written by snapshot_gen.py (which imports the tools, in the
training interpreter); this module only reads them, so the dashboard and `config check` never import deepspeed,
accelerate or torch. A snapshot section is {"extra": "forbid" | "loose" | "passed-on" | ..., "fields": {name: entry}} where an
entry has "aliases" (other spellings the tool accepts), "kinds", "choices", "nullable", optional "default",
"ge"/"gt"/"le"/"lt", "section" (the path of a nested section) and, for DeepSpeed's deprecated fields,
"deprecated"/"new_param"/"set_new_param".
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

Tool = str  # "deepspeed" or "accelerate": the name of a snapshot file
SNAPSHOT_DIR = Path(__file__).with_name("snapshot")


@cache
def load(tool: Tool) -> dict[str, Any]:
    """The whole snapshot of one tool: {"tool", "version", "sections": {path: section}}."""
    data: dict[str, Any] = json.loads((SNAPSHOT_DIR / f"{tool}.json").read_text(encoding="utf-8"))
    return data


def version(tool: Tool) -> str:
    return str(load(tool).get("version", ""))


def section(tool: Tool, path: str) -> dict[str, Any] | None:
    """The snapshot section at `path` ("" is the top level, "zero_optimization.offload_param" a nested one)."""
    found: dict[str, Any] | None = load(tool)["sections"].get(path)
    return found


def spellings(entry: dict[str, Any], name: str) -> list[str]:
    """Every spelling the tool accepts for a field: its name, then its aliases."""
    return [name, *entry.get("aliases", [])]


def refuses_unknown(snap: dict[str, Any]) -> bool:
    """True when the tool stops at a key the section does not declare (pydantic extra="forbid", a dataclass)."""
    return snap.get("extra") == "forbid"


def all_keys(tool: Tool) -> dict[str, set[str]]:
    """Every accepted spelling of every key, per section path."""
    return {path: {s for name, entry in snap["fields"].items() for s in spellings(entry, name)}
            for path, snap in load(tool)["sections"].items()}
