"""Who fills "auto", on the corpus of real configs (TRAINDECK_CORPUS, else ../shared/corpus; skipped without one).

Every real DeepSpeed config with "auto" values gets exactly one note for them and no warning or error at an "auto"
key: these files are written for the HF Trainer / accelerate, whose fill lists cover every "auto" they use.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from support import REPO, real_corpus

from traindeck.backend.config.auto_fill import auto_paths, dotted
from traindeck.backend.config.validate import check_files

REPO = REPO


CORPUS = real_corpus()
pytestmark = pytest.mark.skipif(CORPUS is None, reason="no corpus of real configs (set TRAINDECK_CORPUS)")


def _auto_configs() -> list[tuple[Path, dict]]:
    assert CORPUS is not None
    out = []
    with open(CORPUS / "manifest.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if row["kind"] != "deepspeed":
                continue
            try:
                data = json.loads((CORPUS / row["relpath"]).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a file the syntax checks are for
            if isinstance(data, dict) and next(auto_paths(data), None) is not None:
                out.append((CORPUS / row["relpath"], data))
    return out


def test_real_auto_configs_get_one_note_and_nothing_at_their_auto_keys() -> None:
    configs = _auto_configs()
    assert len(configs) >= 20, "the corpus should hold the HF templates and their copies"
    for path, data in configs:
        messages = check_files([path], cwd=path.parent)
        # besides the one note on "auto", a comment key ("_comment": ...) is said to be kept as a comment
        notes = [m for m in messages if m.severity == "note" and "reads as a comment" not in m.message]
        assert len(notes) == 1 and notes[0].message.startswith("'auto' values: "), (path, notes)
        autos = {dotted(p) for p in auto_paths(data)}
        said = [m.format() for m in messages if m.severity != "note" and m.path in autos]
        assert said == [], said
