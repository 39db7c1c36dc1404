"""Where a draft preset comes from besides the preset store: a blank new one, or a config the user pasted or opened.

A pasted or opened text is examined first (`examine_text`): parsed the way `traindeck config check` reads it, and
run through the same repair as `traindeck config fix`, so the caller can show what a repair would change before
anything is loaded. `ConfigText.preset()` then turns it (repaired or as it is) into an unsaved Preset: an accelerate
YAML becomes an accelerate preset (bringing in the DeepSpeed JSON its deepspeed_config_file names, like
`presets.import_preset`), a DeepSpeed JSON a deepspeed preset, a whole preset file the preset it describes.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traindeck.backend.config.bounded import BoundsError, read_config_text
from traindeck.backend.config.messages import Message
from traindeck.backend.config.repair import RepairResult, repair_text
from traindeck.backend.config.source import SourceDocument, load_file, parse_text
from traindeck.backend.presets import Preset, PresetError, preset_from_mapping

# Keys only a preset file has at its top: a pasted preset is loaded as a preset, not as a config.
_PRESET_MARKERS = {"launcher", "schema_version"}


@dataclass
class ConfigText:
    """A pasted or opened config, examined: what it is, what is wrong with its text, and the repair on offer."""

    text: str
    file: str | None
    doc: SourceDocument
    repair: RepairResult | None  # None for a preset file (the repair knows accelerate and DeepSpeed configs)

    @property
    def is_preset(self) -> bool:
        return isinstance(self.doc.data, dict) and bool(_PRESET_MARKERS & set(map(str, self.doc.data)))

    @property
    def readable(self) -> bool:
        """The text parses as it is (it may still have values the checks will flag)."""
        return self.doc.data is not None

    @property
    def syntax(self) -> list[Message]:
        return list(self.doc.syntax)

    @property
    def offers_repair(self) -> bool:
        """A repaired text exists and differs from the original."""
        return self.repair is not None and self.repair.text_out is not None and self.repair.changed

    @property
    def loadable(self) -> bool:
        return self.readable or self.offers_repair

    def diff(self) -> str:
        """The repair as a unified diff (empty when nothing changes)."""
        if self.repair is None or self.repair.text_out is None:
            return ""
        name = Path(self.file).name if self.file else "pasted"
        return "".join(difflib.unified_diff(self.text.splitlines(keepends=True),
                                            self.repair.text_out.splitlines(keepends=True),
                                            fromfile=f"{name} (as given)", tofile=f"{name} (repaired)"))

    def preset(self, *, repaired: bool, name: str = "untitled") -> Preset:
        """An unsaved preset from the text (`repaired`: from the repaired text). PresetError when unreadable."""
        doc = self.doc
        if repaired:
            if self.repair is None or self.repair.text_out is None:
                raise PresetError("there is no repaired text to load")
            doc = parse_text(self.repair.text_out, file=self.file, kind=self.repair.kind, fmt=self.repair.format)
        if doc.data is None:
            first = doc.syntax[0].format() if doc.syntax else "it cannot be read"
            raise PresetError(f"the config cannot be loaded: {first}")
        where = Path(self.file).name if self.file else "pasted text"
        if self.is_preset:
            preset = preset_from_mapping(copy.deepcopy(doc.data), name=name)
            preset.builtin, preset.path = False, None
            return preset
        data = copy.deepcopy(doc.data)
        if doc.kind == "deepspeed":
            return Preset(name=name, launcher="deepspeed", deepspeed=data, description=f"from {where}")
        deepspeed = _referenced_deepspeed(doc, data)
        return Preset(name=name, launcher="accelerate", accelerate=data, deepspeed=deepspeed,
                      description=f"from {where}")


def examine_text(text: str, file: str | None = None) -> ConfigText:
    """Parse a pasted or opened config and prepare its repair (nothing is loaded or written)."""
    text = text.lstrip("\ufeff")
    doc = parse_text(text, file=file)
    probe = ConfigText(text, file, doc, None)
    if probe.is_preset:
        return probe
    return ConfigText(text, file, doc, repair_text(text, file=file, kind=doc.kind))


def read_config_file(path: str | Path) -> ConfigText:
    """`examine_text` on a file; PresetError when it cannot be read as text."""
    p = Path(path).expanduser()
    try:
        text = read_config_text(p)  # bounded: a FIFO or /dev/zero picked by mistake cannot fill the memory
    except OSError as exc:
        raise PresetError(f"cannot read {p}: {exc.strerror or exc}") from None
    except BoundsError as exc:
        at = f":{exc.line}" if exc.line else ""
        raise PresetError(f"{p}{at}: {exc}") from None
    return examine_text(text, file=str(p))


def _referenced_deepspeed(doc: SourceDocument, accelerate: dict[str, Any]) -> dict[str, Any] | None:
    """The DeepSpeed JSON an opened accelerate YAML points at, taken into the preset (its path dropped, as
    import_preset does: the launch writes it afresh). Pasted text has no folder to resolve a path from."""
    from traindeck.backend.config.validate import referenced_deepspeed_file

    if not doc.file:
        return None
    ref = referenced_deepspeed_file(doc)
    if ref is None or not ref.is_file():
        return None
    ref_doc = load_file(ref, kind="deepspeed", as_deepspeed_reads=True)  # what DeepSpeed reads past, kept
    if not isinstance(ref_doc.data, dict):
        return None
    section = accelerate.get("deepspeed_config")
    if isinstance(section, dict):
        section.pop("deepspeed_config_file", None)
    return copy.deepcopy(ref_doc.data)


def blank_preset(name: str = "untitled") -> Preset:
    """A new preset: one process under accelerate, no DeepSpeed; the user builds from there."""
    return Preset(name=name, launcher="accelerate", description="", accelerate=blank_accelerate(False))


def blank_accelerate(with_deepspeed: bool) -> dict[str, Any]:
    """The accelerate section a preset gets when the user adds one (DEEPSPEED when the preset has DeepSpeed)."""
    if with_deepspeed:
        return {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_machines": 1,
                "num_processes": 1, "deepspeed_config": {}}
    return {"compute_environment": "LOCAL_MACHINE", "distributed_type": "NO", "num_machines": 1,
            "num_processes": 1, "mixed_precision": "no"}


def blank_deepspeed(launcher: str) -> dict[str, Any]:
    """The DeepSpeed section a preset gets when the user adds one: ZeRO-2; under accelerate the batch numbers are
    "auto" (accelerate fills them from the script), elsewhere nobody fills them in, so they are numbers."""
    batch: Any = "auto" if launcher == "accelerate" else 1
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": batch,
            "zero_optimization": {"stage": 2}}


def free_name(base: str, taken: Iterable[str]) -> str:
    """`base`, or `base-2`, `base-3`... : the first not in `taken` (case-insensitive, like the store)."""
    used = {t.lower() for t in taken}
    if base.lower() not in used:
        return base
    n = 2
    while f"{base}-{n}".lower() in used:
        n += 1
    return f"{base}-{n}"
