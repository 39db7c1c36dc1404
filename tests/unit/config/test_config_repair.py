"""`repair_text` / `traindeck config fix`, table-driven over real flattened, malformed and misspelt files
(tests/fixtures/configs/repair/, with the repaired config each should become in repair/expected/), the other config
fixtures' malformed and typo files, and ambiguous cases that must be reported, not guessed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support import FIXTURES

from traindeck.backend.config.repair import repair_text
from traindeck.backend.config.source import parse_text
from traindeck.backend.config.validate import check_document

REPAIR = FIXTURES / "configs" / "repair"
EXPECTED = REPAIR / "expected"


def _load(path_or_text: str | Path, fmt: str):
    text = Path(path_or_text).read_text() if isinstance(path_or_text, Path) else path_or_text
    return json.loads(text) if fmt == "json" else yaml.safe_load(text)


def _errors(text: str, file: str) -> list[str]:
    """What repair is about: errors, and the warnings for unknown (misplaced, misspelt) and renamed keys (a key
    DeepSpeed ignores is only a warning, yet a lost setting)."""
    return [m.format() for m in check_document(parse_text(text, file=file))
            if m.severity == "error" or "unknown key" in m.message
            or ("deprecated" in m.message and "no effect" not in m.message)]


# file -> substrings of the changes it must list (each with its line)
REPAIRABLE = {
    "accelerate_deepspeed_flat.yaml": ["line 4: moved gradient_accumulation_steps under deepspeed_config",
                                       "line 9: moved zero_stage under deepspeed_config"],
    "accelerate_fsdp_flat.yaml": ["line 7: moved fsdp_activation_checkpointing under fsdp_config",
                                  "line 18: moved fsdp_version under fsdp_config"],
    "accelerate_fsdp_no_header.yaml": ["line 6: moved fsdp_auto_wrap_policy under fsdp_config"],
    "accelerate_broken_indent.yaml": ["indentation was inconsistent", "line 6: moved zero_stage under deepspeed_config"],
    "accelerate_typos.yaml": ["line 3: deepspeed_config.offload_optimizer_device: 'cpuu' -> 'cpu'",
                              "line 4: key 'zero_stgae' -> 'zero_stage'",
                              "line 6: distributed_type: 'DEEPSPED' -> 'DEEPSPEED'",
                              "line 7: mixed_precision: 'Bf16' -> 'bf16'", "line 9: num_processes: '2' -> 2"],
    "accelerate_deprecated.yaml": ["line 3: deprecated key 'dynamo_backend' -> 'dynamo_config.dynamo_backend'",
                                   "line 4: deprecated key 'fp16: true' -> 'mixed_precision: fp16'"],
    "ds_zero_keys_at_top.json": ["line 5: moved stage under zero_optimization",
                                 "line 9: moved offload_optimizer under zero_optimization"],
    "ds_after_empty_header.json": ["line 4: moved stage under zero_optimization", "line 8: moved enabled under fp16"],
    "ds_nested_flat.yaml": ["line 8: moved device under zero_optimization.offload_optimizer",
                            "line 11: moved device under zero_optimization.offload_param",
                            "line 4: moved enabled under bf16"],
    "ds_pasted_from_python.json": ["line 2: removed a // comment", "line 6: removed a /* */ comment",
                                   "line 6: True -> true", "line 8: removed a trailing comma",
                                   "line 10: 'zero_optimization' -> \"zero_optimization\"",
                                   "line 13: added a missing comma", "line 18: None -> null"],
    "ds_typos.json": ["line 2: train_batch_size: 'Auto' -> 'auto'", "line 3: train_micro_batch_size_per_gpu: '4' -> 4",
                      "line 4: deprecated key 'bfloat16' -> 'bf16'", "line 6: zero_optimization.stage: '3' -> 3",
                      "line 7: key 'offload_optimzer' -> 'offload_optimizer'",
                      "line 8: zero_optimization.offload_param.device: 'Cpu' -> 'cpu'",
                      "line 9: deprecated key 'stage3_gather_fp16_weights_on_model_save'"],
}

# file -> substrings of the problems it must report (nothing guessed)
AMBIGUOUS = {
    "ds_ambiguous_device.json": ["line 4: 'device' is a key of several sections (zero_optimization.offload_param, "
                                 "zero_optimization.offload_optimizer)", "line 5: 'pin_memory'", "line 6: 'enabled'"],
    "ds_ambiguous_typo.json": ["line 3: unknown key 'f16' is close to several keys (fp16, bf16)"],
    "accelerate_ambiguous_value.yaml": ["line 3: mixed_precision: 'f16' is not allowed and is close to several values"],
    "accelerate_ambiguous_duplicate.yaml": ["line 6: 'zero_stage' is a key of deepspeed_config, which already has "
                                            "'zero_stage' (line 3) with another value"],
}

UNPARSEABLE = {
    "ds_unrepairable.json": "line 3, column 24: JSON syntax: this '{' is never closed",
    "accelerate_unrepairable.yaml": "line 3, column 17: YAML syntax",
}


def test_every_fixture_is_in_a_table():
    listed = set(REPAIRABLE) | set(AMBIGUOUS) | set(UNPARSEABLE)
    assert {p.name for p in REPAIR.glob("*.*")} == listed
    assert {p.name for p in EXPECTED.iterdir()} == set(REPAIRABLE)


@pytest.mark.parametrize("name", sorted(REPAIRABLE))
def test_repairs_into_the_config_that_was_meant(name: str):
    path = REPAIR / name
    fmt = "json" if name.endswith(".json") else "yaml"
    before = _errors(path.read_text(), str(path))
    result = repair_text(path.read_text(), file=str(path))
    assert result.ok and result.problems == [], result.problems
    for expected in REPAIRABLE[name]:
        assert any(expected in change for change in result.changes), (expected, result.changes)
    assert all(change.startswith("line ") for change in result.changes)
    assert _load(result.text_out, fmt) == _load(EXPECTED / name, fmt)
    # What was wrong is gone: the repaired text checks clean (it had findings before).
    assert before, f"{name} should have findings before the repair"
    assert _errors(result.text_out, str(path)) == []
    # Repairing again changes nothing.
    again = repair_text(result.text_out, file=str(path))
    assert again.changes == [] and again.problems == [] and again.text_out == result.text_out


@pytest.mark.parametrize("name", ["ds_pasted_from_python.json", "ds_typos.json", "accelerate_typos.yaml"])
def test_fixes_that_keep_the_structure_are_minimal_text_edits(name: str):
    """Comments, blank lines, key order, spacing and quoting elsewhere stay as they were."""
    path = REPAIR / name
    assert repair_text(path.read_text(), file=str(path)).text_out == (EXPECTED / name).read_text()


@pytest.mark.parametrize("name", sorted(AMBIGUOUS))
def test_ambiguous_fixes_are_reported_not_guessed(name: str):
    path = REPAIR / name
    result = repair_text(path.read_text(), file=str(path))
    assert not result.ok
    for expected in AMBIGUOUS[name]:
        assert any(expected in problem for problem in result.problems), (expected, result.problems)
    # The ambiguous keys stay where they were.
    fmt = "json" if name.endswith(".json") else "yaml"
    data = _load(result.text_out, fmt)
    if name == "ds_ambiguous_device.json":
        assert data["device"] == "cpu" and data["zero_optimization"] == {"stage": 3}
    if name == "accelerate_ambiguous_value.yaml":
        assert data["mixed_precision"] == "f16"


@pytest.mark.parametrize("name", sorted(UNPARSEABLE))
def test_unparseable_text_is_refused_with_the_place(name: str):
    path = REPAIR / name
    result = repair_text(path.read_text(), file=str(path))
    assert result.text_out is None and not result.ok
    assert UNPARSEABLE[name] in result.problems[0]


# The other engineers' files: malformed JSON and misspelt keys/values.
OTHERS = {
    "deepspeed/malformed/missing_comma.json": ["line 2: added a missing comma"],
    "deepspeed/malformed/python_true.json": ["line 3: True -> true"],
    "deepspeed/malformed/trailing_comma.json": ["line 4: removed a trailing comma before '}'"],
    "deepspeed/pitfall/typos_in_keys.json": ["line 3: key 'gradient_acumulation_steps' -> 'gradient_accumulation_steps'",
                                             "line 7: key 'offload_optimzer' -> 'offload_optimizer'",
                                             "line 8: key 'overlap_com' -> 'overlap_comm'"],
    "deepspeed/pitfall/deprecated.json": ["line 3: deprecated key 'bfloat16' -> 'bf16'",
                                          "line 7: deprecated key 'cpu_offload: true' -> 'offload_optimizer: "
                                          "{device: cpu}'", "line 12: deprecated key 'thread_count'"],
}


@pytest.mark.parametrize("rel", sorted(OTHERS))
def test_other_fixtures_malformed_and_misspelt_files_are_repaired(rel: str):
    path = FIXTURES / "configs" / rel
    result = repair_text(path.read_text(), file=str(path))
    assert result.ok, result.problems
    for expected in OTHERS[rel]:
        assert any(expected in change for change in result.changes), (expected, result.changes)
    doc = parse_text(result.text_out, file=str(path))
    assert doc.syntax == []
    left = {m.path for m in check_document(doc) if "unknown key" in m.message or "syntax" in m.message
            or ("deprecated" in m.message and "no effect" not in m.message)}
    assert left == set()  # (a deprecated key with no replacement and no effect is the checker's to report)


def test_typo_fixes_leave_real_errors_alone():
    """typos_in_values.json: 'true' and 'cpuu' are typos; stage 4 and a negative bucket are not (no single meant
    value), so they stay for `config check` to report."""
    path = FIXTURES / "configs/deepspeed/pitfall/typos_in_values.json"
    result = repair_text(path.read_text(), file=str(path))
    data = json.loads(result.text_out)
    assert data["bf16"]["enabled"] is True and data["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert data["zero_optimization"]["stage"] == 4 and data["zero_optimization"]["reduce_bucket_size"] == -1


def test_duplicate_keys_with_different_values_are_not_guessed():
    path = FIXTURES / "configs/deepspeed/malformed/duplicate_key.json"
    result = repair_text(path.read_text(), file=str(path))
    assert not result.ok and "line 4: 'zero_optimization' is set twice (also line 3)" in result.problems[0]


def test_removed_keys_are_not_taken_for_typos():
    """DeepSpeed refuses sparse_gradients (REMOVED): renaming it to the similar prescale_gradients would change
    the meaning."""
    path = FIXTURES / "configs/deepspeed/pitfall/removed_keys.json"
    result = repair_text(path.read_text(), file=str(path))
    assert not any("sparse_gradients" in c for c in result.changes)


@pytest.mark.parametrize(("text", "kind_of_change"), [
    ('{"a": 1, /* x */ "train_batch_size": 8}', "removed a /* */ comment"),
    ('{"train_batch_size": 8} ,', "removed a comma after the closing"),
    ("{train_batch_size: 8}", "quoted the key train_batch_size"),
    ('{"gradient_clipping": .5}', ".5 -> 0.5"),
    ('{"steps_per_print": 10 # hjson comment\n}', "removed a # comment"),
])
def test_json_token_fixes(text: str, kind_of_change: str):
    result = repair_text(text, fmt="json")
    assert any(kind_of_change in c for c in result.changes), result.changes
    json.loads(result.text_out)


def test_a_yaml_flow_empty_section_is_not_taken_for_a_flattened_header():
    """accelerate writes unused sections as `fsdp_config: {}`; keys after it stay at the top."""
    text = "compute_environment: LOCAL_MACHINE\nfsdp_config: {}\ngpu_ids: all\ndistributed_type: MULTI_GPU\n"
    result = repair_text(text, fmt="yaml")
    assert result.changes == [] and result.problems == [] and result.text_out == text


# ------------------------------------------------------------------------------------------ the command


def _cli(args: list[str]) -> int:
    from traindeck.backend.cli import build_parser

    parser = build_parser()
    parsed = parser.parse_args(args)
    return int(parsed.handler(parsed))


def test_config_fix_writes_the_repaired_file_and_lists_changes(tmp_path: Path, capsys):
    out = tmp_path / "fixed.yaml"
    assert _cli(["config", "fix", str(REPAIR / "accelerate_deepspeed_flat.yaml"), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "line 9: moved zero_stage under deepspeed_config" in printed and str(out) in printed
    assert yaml.safe_load(out.read_text()) == yaml.safe_load((EXPECTED / "accelerate_deepspeed_flat.yaml").read_text())


@pytest.mark.parametrize("name", ["ds_ambiguous_device.json", "ds_unrepairable.json"])
def test_config_fix_exits_1_and_writes_nothing_when_it_cannot(name: str, tmp_path: Path, capsys):
    out = tmp_path / "fixed.json"
    assert _cli(["config", "fix", str(REPAIR / name), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "nothing written" in err and "line " in err
    assert not out.exists()


def test_config_fix_with_nothing_to_fix_copies_and_says_so(tmp_path: Path, capsys):
    out = tmp_path / "same.json"
    good = FIXTURES / "configs/deepspeed/good/zero3.json"
    assert _cli(["config", "fix", str(good), "-o", str(out)]) == 0
    assert out.read_text() == good.read_text() and "nothing to repair" in capsys.readouterr().out


def test_config_fix_to_dash_writes_the_file_to_stdout_and_the_report_to_stderr(tmp_path: Path, capsys,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _cli(["config", "fix", str(REPAIR / "accelerate_deepspeed_flat.yaml"), "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert not (tmp_path / "-").exists()
    assert yaml.safe_load(captured.out) == yaml.safe_load((EXPECTED / "accelerate_deepspeed_flat.yaml").read_text())
    assert "line 9: moved zero_stage under deepspeed_config" in captured.err


def test_config_fix_to_dash_with_nothing_to_fix_prints_the_file_unchanged(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    good = FIXTURES / "configs/deepspeed/good/zero3.json"
    assert _cli(["config", "fix", str(good), "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out == good.read_text() and "nothing to repair" in captured.err
    assert not (tmp_path / "-").exists()
