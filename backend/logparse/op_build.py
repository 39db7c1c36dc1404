"""DeepSpeed / torch extension builds in a run's output: a first use JIT-compiles ops for minutes, in silence or
with compiler lines only, and must not be taken for a hang.

The messages, as the installed versions write them (torch/utils/cpp_extension.py, deepspeed/ops/op_builder/
builder.py): torch's "Using <dir> as PyTorch extensions root...", "Emitting ninja build file <dir>/<op>/build.ninja...",
"Building extension module <op>...", "Loading extension module <op>..." (printed by older torch, logged at INFO by
torch 2.x, so often absent), ninja's own "[1/3] c++ ... -DTORCH_EXTENSION_NAME=<op> ..." lines (shown when DeepSpeed
builds verbosely, its default), and DeepSpeed's "Time to load <op> op: 93.2 seconds" once an op is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BUILDING = (
    re.compile(r"Building extension module (?P<op>\w+)\.\.\."),
    re.compile(r"Emitting ninja build file .*?[/\\](?P<op>\w+)[/\\]build\.ninja"),
    re.compile(r"^\[\d+/\d+\] .*-DTORCH_EXTENSION_NAME=(?P<op>\w+)"),
)
_LOADED = (
    re.compile(r"Time to load (?P<op>\w+) op: (?P<seconds>[\d.]+) seconds"),
    re.compile(r"Loading extension module (?P<op>\w+)\.\.\."),
)
_FAILED = re.compile(r"Error building extension '(?P<op>\w+)'")
# Cheap pre-filter: most lines of a run mention none of these.
_HINTS = ("xtension", "ninja", "TORCH_EXTENSION_NAME", "Time to load")


def op_display_name(op: str) -> str:
    """cpu_adam_v1 -> cpu_adam (torch bumps the name when the build inputs change)."""
    return re.sub(r"_v\d+$", "", op)


@dataclass
class OpBuildTracker:
    """Follows the lines of a run: which ops are being built now, and how long each finished one took."""

    building: dict[str, float] = field(default_factory=dict)  # op -> when its build was first seen (caller's clock)
    loaded: dict[str, float | None] = field(default_factory=dict)  # op -> seconds DeepSpeed reported (None: unknown)
    # A copy of `building` replaced (never changed) after each change: what another thread may read.
    building_now: dict[str, float] = field(default_factory=dict)

    def feed(self, text: str, now: float) -> str | None:
        """Take one line; returns "building:<op>" / "loaded:<op>" / "failed:<op>" when the line changes something."""
        if not any(hint in text for hint in _HINTS):
            return None
        for pattern in _LOADED:
            match = pattern.search(text)
            if match:
                op = op_display_name(match["op"])
                seconds = float(match["seconds"]) if "seconds" in match.groupdict() else None
                self.building.pop(op, None)
                self.building_now = dict(self.building)
                if seconds is not None or op not in self.loaded:
                    self.loaded[op] = seconds
                return f"loaded:{op}"
        failed = _FAILED.search(text)
        if failed:
            self.building.pop(op_display_name(failed["op"]), None)
            self.building_now = dict(self.building)
            return f"failed:{op_display_name(failed['op'])}"
        for pattern in _BUILDING:
            match = pattern.search(text)
            if match:
                op = op_display_name(match["op"])
                if op not in self.building:
                    self.building[op] = now
                    self.building_now = dict(self.building)
                    return f"building:{op}"
                return None
        return None


def is_deepspeed_op(op: str) -> bool:
    return op.startswith("deepspeed_") or op in DEEPSPEED_OPS


# DeepSpeed's op builders' NAMEs (deepspeed/ops/op_builder): the ones a run JIT-builds on first use.
DEEPSPEED_OPS = frozenset({
    "cpu_adam", "cpu_adagrad", "cpu_lion", "fused_adam", "fused_lamb", "fused_lion", "fused_adagrad", "async_io",
    "transformer", "stochastic_transformer", "transformer_inference", "quantizer", "random_ltd", "sparse_attn",
    "spatial_inference", "utils", "pin_memory", "ragged_ops", "ragged_device_ops", "inference_core_ops",
    "inference_cutlass_builder", "evoformer_attn", "fp_quantizer", "gds", "dc",
})


def build_text(ops: list[str]) -> str:
    """The state a run shows while ops build: "building DeepSpeed's cpu_adam (first use, a few minutes)"."""
    named = [op for op in sorted(ops) if op != "ops"]
    if not named:
        return "building DeepSpeed/torch ops (first use, a few minutes)"
    deepspeed = [op for op in named if is_deepspeed_op(op)]
    other = [op for op in named if not is_deepspeed_op(op)]
    parts = ([f"DeepSpeed's {', '.join(deepspeed)}"] if deepspeed else []) + (
        [f"the torch extension {', '.join(other)}"] if other else [])
    return f"building {' and '.join(parts)} (first use, a few minutes)"
