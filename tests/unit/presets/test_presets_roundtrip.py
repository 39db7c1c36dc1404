"""Import-then-export gives the same data back, for every config file in tests/fixtures/configs/** (all three
engineers' fixtures: good, pitfall, malformed, flattened); and the real tools accept every exported built-in."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from support import FIXTURES

from traindeck.backend.config.source import load_file
from traindeck.backend.config.validate import lenient_slips, referenced_deepspeed_file
from traindeck.backend.launch.builders import INLINE_DEEPSPEED_KEYS, render_config_files
from traindeck.backend.presets import (
    BUILTIN_NAMES,
    PresetError,
    export_preset,
    find_secrets,
    import_preset,
    load_preset,
    render_files,
)

CONFIGS = sorted(p for p in (FIXTURES / "configs").rglob("*") if p.suffix in (".json", ".yaml", ".yml"))
# Keys accelerate refuses beside a deepspeed_config_file: export must drop them from the YAML (the DeepSpeed JSON
# is where those settings live), so they are the one documented difference in a round trip.
REFUSED_BESIDE_FILE = set(INLINE_DEEPSPEED_KEYS)


def test_there_are_fixtures_of_both_kinds():
    kinds = {load_file(p).kind for p in CONFIGS}
    assert {"accelerate", "deepspeed"} <= kinds and len(CONFIGS) >= 20


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(FIXTURES / "configs")))
def test_import_then_export_gives_the_same_data_back(path: Path, tmp_path: Path):
    doc = load_file(path, as_deepspeed_reads=True)  # a JSON only DeepSpeed's hjson takes: what DeepSpeed reads
    name = "rt-" + path.stem.replace(".", "-")[:50]
    if doc.data is None:
        with pytest.raises(PresetError, match=r"(?s)cannot import .*:\d+:\d+: error"):
            import_preset([path], name)
        return
    if any(m.severity == "error" for m in lenient_slips(doc, None)):  # config check's verdict on the slips
        with pytest.raises(PresetError, match=r"(?s)cannot import .*:\d+:\d+: error: .*JSON syntax"):
            import_preset([path], name)
        return
    ref = referenced_deepspeed_file(doc)
    if ref is not None and not ref.exists():
        with pytest.raises(PresetError, match="deepspeed_config_file"):
            import_preset([path], name)
        return
    referenced = load_file(ref, kind="deepspeed").data if ref is not None else None
    if find_secrets(doc.data) or (referenced is not None and find_secrets(referenced)):
        with pytest.raises(PresetError, match="looks like a secret"):
            import_preset([path], name)
        return

    import_preset([path], name)
    # Exported by name: read back through the store, so the YAML preset file must have kept every value.
    written = {p.name: p for p in export_preset(name, tmp_path / "out")}
    # The preset's own file beside the tools' files brings the same preset back.
    again, kept = import_preset([written.pop(f"{name}.traindeck.yaml")], name + "-back"), load_preset(name)
    assert (again.launcher, again.accelerate, again.deepspeed) == (kept.launcher, kept.accelerate, kept.deepspeed)

    if doc.kind == "deepspeed":
        assert set(written) == {"ds_config.json"}
        assert json.loads(written["ds_config.json"].read_text()) == doc.data
        return
    exported = yaml.safe_load(written["accelerate_config.yaml"].read_text())
    if referenced is None:
        assert set(written) == {"accelerate_config.yaml"}
        assert exported == doc.data
        return
    # An accelerate YAML with its DeepSpeed JSON: the same two configs, the YAML now pointing at the exported JSON.
    assert set(written) == {"accelerate_config.yaml", "ds_config.json"}
    ds_path = exported["deepspeed_config"].pop("deepspeed_config_file")
    assert Path(ds_path).is_absolute() and Path(ds_path) == written["ds_config.json"]
    expected = copy.deepcopy(doc.data)
    expected["deepspeed_config"].pop("deepspeed_config_file")
    dropped = {k for k in expected["deepspeed_config"] if k in REFUSED_BESIDE_FILE}
    dropped |= {k for k in ("mixed_precision", "fp16") if k in expected}
    for key in dropped:
        expected["deepspeed_config"].pop(key, None) if key in REFUSED_BESIDE_FILE else expected.pop(key)
    assert exported == expected
    exported_ds = json.loads(written["ds_config.json"].read_text())
    precision = doc.data.get("mixed_precision")
    if precision in ("fp16", "bf16") and not any(k in referenced for k in ("fp16", "bf16", "bfloat16")):
        assert exported_ds.pop(precision) == {"enabled": True}  # the YAML's precision moved into the JSON
    assert exported_ds == referenced


def test_a_flattened_accelerate_file_with_unknown_keys_round_trips(tmp_path: Path):
    data = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU", "num_processes": 2,
            "my_team_setting": {"nested": [1, "two", None, 3.5]}, "gpu_ids": "0,1", "downcast_bf16": "no",
            "dynamo_config": {}, "weird: key": "yes"}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    import_preset([tmp_path / "a.yaml"], "unk")
    out = export_preset("unk", tmp_path / "out")
    assert yaml.safe_load(out[0].read_text()) == data
    assert list(yaml.safe_load(out[0].read_text())) == list(data)  # key order too


def test_export_is_the_launchers_renderer():
    preset = load_preset("zero3-offload")
    assert render_files(preset, Path("/run/x")) == render_config_files(preset, Path("/run/x"))


# ------------------------------------------------------------------------------------------ the real tools


@pytest.mark.train
@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_accelerate_and_deepspeed_accept_every_exported_builtin(name: str, tmp_path: Path):
    load_config_from_file = pytest.importorskip("accelerate.commands.config.config_args").load_config_from_file
    zero_config = pytest.importorskip("deepspeed.runtime.zero.config")
    preset = load_preset(name)
    written = {p.name: p for p in export_preset(name, tmp_path)}
    if "accelerate_config.yaml" in written:
        config = load_config_from_file(str(written["accelerate_config.yaml"]))
        assert config.distributed_type.value == preset.accelerate["distributed_type"]
        if preset.deepspeed is not None:
            section = config.deepspeed_config
            assert section["deepspeed_config_file"] == str(written["ds_config.json"])
            assert not set(section) & REFUSED_BESIDE_FILE  # what accelerate launch refuses beside the file
            assert "mixed_precision" not in yaml.safe_load(written["accelerate_config.yaml"].read_text())
    if preset.deepspeed is not None:
        ds = json.loads(written["ds_config.json"].read_text())
        zero = zero_config.DeepSpeedZeroConfig(**ds.get("zero_optimization", {}))
        assert zero.stage == ds["zero_optimization"]["stage"]
        from deepspeed.runtime.precision_config import get_bfloat16_config, get_float16_config

        get_float16_config(ds)
        get_bfloat16_config(ds)
