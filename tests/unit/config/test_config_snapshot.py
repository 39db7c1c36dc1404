"""The key snapshot (backend/config/snapshot/*.json): generated from the installed tools, and all of it known to the
checker; hand-written keys are all in it or say why not."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import REPO

from traindeck.backend.config import accelerate_schema, deepspeed_schema
from traindeck.backend.config import key_snapshot as snapshot
from traindeck.backend.config.schema import Section, fields_of
from traindeck.backend.config.snapshot_gen import drift

HAS_TOOLS = all(importlib.util.find_spec(name) is not None for name in ("deepspeed", "accelerate"))
needs_tools = pytest.mark.skipif(not HAS_TOOLS, reason="needs deepspeed and accelerate (the `train` extra)")
ROOTS: dict[tuple[str, str], type[Section]] = {
    ("deepspeed", ""): deepspeed_schema.DeepSpeedConfig,
    ("accelerate", ""): accelerate_schema.AccelerateConfig,
    ("accelerate", "@sagemaker"): accelerate_schema.SageMakerConfig,
}


def _gen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck.backend.config.snapshot_gen", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.train
@needs_tools
def test_shipped_snapshot_matches_the_installed_tools() -> None:
    # Regenerates both snapshots in memory from the installed DeepSpeed / accelerate and compares; a new DeepSpeed
    # that adds, renames or re-aliases a key makes this fail with the lines of drift().
    done = _gen("--check")
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stdout


@pytest.mark.train
@needs_tools
def test_check_fails_on_a_planted_drift(tmp_path: Path) -> None:
    planted = copy.deepcopy(snapshot.load("deepspeed"))
    zero = planted["sections"]["zero_optimization"]["fields"]
    zero["max_live_parameters"]["aliases"].remove("stage3_max_live_parameters")
    planted["sections"]["compile"]["fields"]["offload_everything"] = {"aliases": [], "kinds": ["bool"]}
    (tmp_path / "deepspeed.json").write_text(json.dumps(planted), encoding="utf-8")
    (tmp_path / "accelerate.json").write_text(json.dumps(snapshot.load("accelerate")), encoding="utf-8")
    done = _gen("--check", "--out", str(tmp_path))
    assert done.returncode == 1
    assert "deepspeed: zero_optimization.max_live_parameters: aliases differ" in done.stderr
    assert "deepspeed: compile.offload_everything: not a key of the installed tool" in done.stderr
    assert "accelerate:" not in done.stderr.replace("accelerate.json", "")  # only the planted file is stale
    assert json.loads((tmp_path / "deepspeed.json").read_text()) == planted  # --check writes nothing


def test_drift_names_each_difference() -> None:
    shipped = snapshot.load("deepspeed")
    assert drift(shipped, shipped) == []
    fresh = copy.deepcopy(shipped)
    fresh["version"] = "0.20.0"
    fresh["sections"]["zero_optimization"]["fields"]["max_live_parameters"]["aliases"].append("live_params")
    del fresh["sections"]["fp16"]["fields"]["hysteresis"]
    fresh["sections"]["compile"]["extra"] = "ignore"
    assert drift(shipped, fresh) == [
        "version: snapshot 0.19.8, installed 0.20.0",
        "compile: unknown keys ignore (snapshot: forbid)",
        "fp16.hysteresis: not a key of the installed tool",
        "zero_optimization.max_live_parameters: aliases differ aliases: snapshot ['stage3_max_live_parameters'], "
        "installed ['stage3_max_live_parameters', 'live_params']",
    ]


def _section_at(tool: str, path: str) -> type[Section]:
    """The checker's section for a snapshot path, reached from the root the way check_values walks a file."""
    for (root_tool, root_path), root in ROOTS.items():
        if root_tool == tool and (path == root_path or (root_path == "" and not path.startswith("@"))):
            section = root
            rest = path[len(root_path):].strip(".") if root_path else path
            break
    for part in [p for p in rest.split(".") if p]:
        spec = fields_of(section)[part]
        assert spec.kind == "section" and spec.section is not None, f"{tool} {path}: {part} is not a section"
        section = spec.section
    return section


@pytest.mark.parametrize("tool", ["deepspeed", "accelerate"])
def test_every_snapshot_key_is_known_to_the_checker(tool: Any) -> None:
    removed = snapshot.load(tool).get("removed", {})
    checked = 0
    for path, snap in snapshot.load(tool)["sections"].items():
        if snap["extra"] == "passed-on":  # handed on whole (data_efficiency.data_sampling, pipeline): a mapping
            parent, _, key = path.rpartition(".")
            holder = fields_of(_section_at(tool, parent)) if not any(
                parent == p or parent.startswith(p + ".") for p, s in snapshot.load(tool)["sections"].items()
                if s["extra"] == "passed-on") else None
            assert holder is None or holder[key].kind == "mapping", path
            continue
        section = _section_at(tool, path)
        assert section.SNAPSHOT == (tool, path)
        assert section.UNKNOWN == ("error" if snapshot.refuses_unknown(snap) else "warning"), path
        known = set(fields_of(section)) | set(section.DEPRECATED)
        for name, entry in snap["fields"].items():
            for spelling in snapshot.spellings(entry, name):
                assert spelling in known or spelling in removed.get(path, {}), f"{tool} {path}.{spelling}"
                checked += 1
    assert checked > (250 if tool == "deepspeed" else 150)


def _sections(module: Any) -> list[type[Section]]:
    return [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Section) and c is not Section]


@pytest.mark.parametrize("module", [deepspeed_schema, accelerate_schema], ids=["deepspeed", "accelerate"])
def test_every_hand_written_key_is_in_the_snapshot_or_says_why_not(module: Any) -> None:
    for section in _sections(module):
        assert section.SNAPSHOT is not None, f"{section.__name__} is not tied to the snapshot"
        tool, path = section.SNAPSHOT
        snap = snapshot.section(tool, path)  # type: ignore[arg-type]
        assert snap is not None
        spellings = {s for name, entry in snap["fields"].items() for s in snapshot.spellings(entry, name)}
        for name, info in section.model_fields.items():
            key = info.alias or name
            assert key in spellings or key in section.OUTSIDE_SNAPSHOT or key in section.DEPRECATED, \
                f"{section.__name__}.{key} is not a key of {tool} {path or '(top level)'} and says nothing about it"
        for key in section.OUTSIDE_SNAPSHOT:
            assert key not in spellings, f"{section.__name__}.{key}: in the snapshot now, drop its OUTSIDE_SNAPSHOT"


def test_both_spellings_of_an_aliased_key_are_known_and_one_is_shown_in_forms() -> None:
    from traindeck.backend.config.schema import form_keys

    zero = fields_of(deepspeed_schema.ZeroOptimization)
    assert zero["max_live_parameters"].alias_of == "stage3_max_live_parameters"
    assert zero["stage3_max_live_parameters"].alias_of == ""
    keys = form_keys(zero, {})
    assert "stage3_max_live_parameters" in keys and "max_live_parameters" not in keys
    keys = form_keys(zero, {"max_live_parameters": 1})
    assert "max_live_parameters" in keys and "stage3_max_live_parameters" not in keys


def test_config_check_reads_the_snapshot_without_importing_the_tools(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, '
                      '"max_live_parameters": 1000000000}, "compile": {"deepcompile": true}}', encoding="utf-8")
    code = (
        "import sys\n"
        "from traindeck.backend.config.validate import check_files\n"
        f"check_files([{str(config)!r}])\n"
        "heavy = sorted(m for m in ('deepspeed', 'accelerate', 'torch') if m in sys.modules)\n"
        "print('imported:', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported: []"


def test_documented_counts_are_the_snapshots() -> None:
    page = (REPO / "docs" / "configs.md").read_text(encoding="utf-8")
    deepspeed, accelerate = snapshot.all_keys("deepspeed"), snapshot.all_keys("accelerate")
    ds_count = sum(len(keys) for keys in deepspeed.values())
    assert f"DeepSpeed {snapshot.version('deepspeed')} ({ds_count} spellings in {len(deepspeed)} sections" in page
    assert f"accelerate {snapshot.version('accelerate')} ({sum(len(k) for k in accelerate.values())}:" in page


def test_deepspeeds_validated_sections_take_types_and_defaults_from_the_snapshot() -> None:
    from traindeck.backend.config.snapshot_merge import _kind

    checked = 0
    for path, snap in snapshot.load("deepspeed")["sections"].items():
        if not snapshot.refuses_unknown(snap):
            continue
        specs = fields_of(_section_at("deepspeed", path))
        for name, entry in snap["fields"].items():
            spec = next((specs[s] for s in snapshot.spellings(entry, name) if s in specs), None)
            if spec is None or entry.get("section"):
                continue  # a deprecated name (worded by the checker) or a nested section
            kind, choices, _ = _kind(entry)
            if "default" in entry:
                assert spec.default == entry["default"], (path, name)
            if kind not in ("any", "str"):  # str: a hand-written value list may narrow it (comet's mode)
                assert (spec.kind, spec.choices) == (kind, choices), (path, name)
            if "ge" in entry or "gt" in entry:
                assert spec.minimum == entry.get("ge", entry.get("gt")), (path, name)
            checked += 1
    assert checked > 120


def test_deepspeeds_loosely_read_defaults_are_the_ones_it_reads_with() -> None:
    checked = 0
    for path, snap in snapshot.load("deepspeed")["sections"].items():
        if snap["extra"] != "loose":
            continue
        specs = fields_of(_section_at("deepspeed", path))
        for name, entry in snap["fields"].items():
            if "default" in entry and name in specs and specs[name].kind != "section":
                assert specs[name].default == entry["default"], (path, name)
                checked += 1
    assert checked > 60
