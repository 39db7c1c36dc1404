"""The config framework itself: positions, syntax messages, the value checker, suggestions.

Uses small sections defined here so these tests pin the framework's behaviour independently of the real
accelerate/DeepSpeed schemas (which have their own tests).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
from pydantic import Field

from traindeck.backend.config.messages import Message, format_path
from traindeck.backend.config.schema import Section, fields_of
from traindeck.backend.config.source import load_file, parse_text
from traindeck.backend.config.validate import check_values, suggest


class Offload(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = "the tool refuses unknown keys here"
    device: Literal["none", "cpu", "nvme"] = Field("none", description="where to offload")
    nvme_path: str | None = Field(None, description="folder on the NVMe drive")


class Zero(Section):
    UNKNOWN: ClassVar = "error"
    UNKNOWN_WHY: ClassVar = "the tool refuses unknown keys here"
    DEPRECATED: ClassVar = {"cpu_offload": "offload_optimizer_flag"}
    stage: Literal[0, 1, 2, 3] = Field(0, description="ZeRO stage")
    reduce_bucket_size: int = Field(500_000_000, ge=0, description="bucket", json_schema_extra={"auto": True})
    offload_optimizer: Offload | None = Field(None, description="optimizer offload")
    offload_optimizer_flag: bool = Field(False, description="stand-in for a renamed key")


class Root(Section):
    train_batch_size: int | Literal["auto"] = Field(None, gt=0, description="global batch", json_schema_extra={"auto": True})
    gradient_clipping: float = Field(1.0, ge=0, description="clip norm")
    wall_clock_breakdown: bool = Field(False, description="timings")
    zero_optimization: Zero = Field(default_factory=Zero, description="ZeRO")
    mode: Literal["a", "b"] | str = Field("a", description="choice that also takes free text")


def findings(data):
    return {(sev, format_path(path), text) for sev, path, text in check_values(data, Root)}


def test_every_field_spec_reads_help_choices_and_ranges():
    specs = fields_of(Root)
    assert list(specs) == ["train_batch_size", "gradient_clipping", "wall_clock_breakdown", "zero_optimization", "mode"]
    assert specs["train_batch_size"].auto and specs["train_batch_size"].minimum == 0 and specs["train_batch_size"].exclusive_minimum
    assert fields_of(Zero)["stage"].choices == (0, 1, 2, 3)
    assert specs["zero_optimization"].section is Zero
    assert fields_of(Offload)["nvme_path"].nullable
    assert specs["mode"].kind == "choice" and specs["mode"].also_text
    assert all(spec.help for section in (Root, Zero, Offload) for spec in fields_of(section).values())


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"train_batch_size": 8, "zero_optimization": {"stage": 2}}, set()),
        ({"train_batch_size": "auto", "zero_optimization": {"reduce_bucket_size": "auto"}}, set()),
        ({"train_batch_size": 0}, {("error", "train_batch_size", "0 is out of range: expected a whole number > 0 or \"auto\"")}),
        ({"train_batch_size": "eight"}, {("error", "train_batch_size", "expected a whole number > 0 or \"auto\", got 'eight'")}),
        ({"train_batch_size": 8.5}, {("error", "train_batch_size", "expected a whole number > 0 or \"auto\", got 8.5")}),
        ({"zero_optimization": {"reduce_bucket_size": 5e8}}, set()),  # JSON's 5e8 is a float holding a whole number
        ({"gradient_clipping": True}, {("error", "gradient_clipping", "expected a number >= 0, got true")}),
        ({"wall_clock_breakdown": "false"}, {("error", "wall_clock_breakdown", "expected true or false, got 'false'")}),
        ({"zero_optimization": {"stage": 4}}, {("error", "zero_optimization.stage", "4 is not allowed: expected one of 0, 1, 2, 3 (nearest valid: 3)")}),
        ({"zero_optimization": {"stage": True}}, {("error", "zero_optimization.stage", "true is not allowed: expected one of 0, 1, 2, 3")}),
        ({"zero_optimization": {"offload_optimizer": {"device": "cpuu"}}},
         {("error", "zero_optimization.offload_optimizer.device", "'cpuu' is not allowed: expected one of 'none', 'cpu', 'nvme'; did you mean 'cpu'?")}),
        ({"zero_optimization": {"offload_optimizer": {"device": "CPU"}}},
         {("error", "zero_optimization.offload_optimizer.device", "'CPU' is not allowed: expected one of 'none', 'cpu', 'nvme'; did you mean 'cpu'?")}),
        ({"zero_optimization": {"offload_optimzer": {}}},
         {("error", "zero_optimization.offload_optimzer", "unknown key 'offload_optimzer' (the tool refuses unknown keys here); did you mean 'offload_optimizer'?")}),
        ({"my_note": "x"}, {("warning", "my_note", "unknown key 'my_note' (it is ignored)")}),
        ({"zero_optimization": {"cpu_offload": True}},
         {("warning", "zero_optimization.cpu_offload", "'cpu_offload' is deprecated: use 'offload_optimizer_flag' (same meaning)")}),
        ({"zero_optimization": {"cpu_offload": "yes"}},
         {("warning", "zero_optimization.cpu_offload", "'cpu_offload' is deprecated: use 'offload_optimizer_flag' (same meaning)"),
          ("error", "zero_optimization.cpu_offload", "expected true or false, got 'yes'")}),
        ({"zero_optimization": 2}, {("error", "zero_optimization", "expected a section of keys, got 2")}),
        ({"zero_optimization": None}, {("error", "zero_optimization", "missing value: expected a section of keys")}),
        ({"zero_optimization": {"offload_optimizer": None}}, set()),
        ({"mode": "custom-text"}, set()),
        ({"gradient_clipping": "auto"}, {("error", "gradient_clipping", "\"auto\" is not accepted here: expected a number >= 0")}),
    ],
)
def test_check_values(data, expected):
    assert findings(data) == expected


def test_suggest_prefers_case_then_one_clear_spelling():
    assert suggest("DEEPSPED", ["DEEPSPEED", "FSDP", "NO"]) == "DEEPSPEED"
    assert suggest("bf-16", ["no", "fp16", "bf16"]) == "bf16"
    assert suggest("multi_gpu", ["MULTI_GPU", "MULTI_CPU"]) == "MULTI_GPU"
    assert suggest("MULTI_PU", ["MULTI_GPU", "MULTI_CPU"]) is None  # two equally close: no guess
    assert suggest("banana", ["cpu", "nvme"]) is None


def test_json_positions_of_nested_keys_and_list_items():
    doc = parse_text('{\n  "zero_optimization": {\n    "stage": 2,\n    "offload_param": {"device": "cpu"}\n  },\n  "b": [1, {"x": 2}]\n}', file="ds.json")
    assert doc.kind == "deepspeed" and not doc.syntax
    assert doc.locations[("zero_optimization", "stage")] == (3, 5)
    assert doc.locations[("zero_optimization", "offload_param", "device")] == (4, 23)
    assert doc.locations[("b", 1, "x")] == (6, 13)
    # A key that is missing is located at its nearest ancestor.
    assert doc.where(("zero_optimization", "offload_param", "nvme_path")) == (4, 5)



def test_json_positions_inside_a_long_list_are_found_when_asked():
    items = ",\n".join(f'    {{"x": {i}}}' for i in range(500))
    doc = parse_text('{\n  "train_batch_size": 8,\n  "layers": [\n' + items + "\n  ]\n}\n", file="ds.json")
    assert not doc.syntax
    assert doc.locations[("layers", 499, "x")] == (503, 6)
    assert doc.where(("layers", 7, "x")) == (11, 6) and ("layers", 0) in doc.locations
    assert doc.where(("layers", 500, "x")) == (3, 3)  # past the end: the list's key
    assert doc.locations.get(("layers", 3)) == (7, 5)


def test_json_a_list_nested_too_deep_inside_a_list_is_refused_where_it_gets_too_deep():
    from traindeck.backend.config.bounded import MAX_DEPTH

    text = '{"a": 1,\n "b": [1, 2,\n' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "]}"
    doc = parse_text(text, file="ds.json")
    assert doc.data is None
    (message,) = doc.syntax
    assert "nested more than" in message.message and (message.line, message.column) == (3, MAX_DEPTH - 1)


def test_json_a_repeated_key_inside_a_list_item_is_located():
    doc = parse_text('{\n  "b": [\n    {"x": 1,\n     "x": 2}\n  ]\n}', file="ds.json")
    (message,) = doc.syntax
    assert "appears twice" in message.message and (message.line, message.column) == (4, 6)

@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ('{\n  "a": 1,\n  "b": 2,\n}', 3, 9, "trailing comma"),
        ('{\n  "a": [1, 2,]\n}', 2, 13, "trailing comma"),
        ('{\n  "a": 1\n  "b": 2\n}', 3, 3, "missing comma"),
        ('{"a": True}', 1, 7, "'True' is Python"),
        ("{'a': 1}", 1, 2, "double quotes"),
        ('{"a": 1, "a": 2}', 1, 10, "appears twice; DeepSpeed refuses duplicate keys"),
    ],
)
def test_malformed_json_names_line_and_column(text, line, column, words):
    (message,) = parse_text(text, file="ds.json").syntax
    assert (message.line, message.column) == (line, column)
    assert words in message.message and message.severity == "error" and message.file == "ds.json"


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("a: 1\n  b: 2\n", 2, 4, "mapping values are not allowed here"),
        ("a:\n\tb: 2\n", 2, 1, "tabs cannot indent YAML"),
        ("a: [1, 2\nb: 3\n", 2, 2, "YAML syntax"),
        ("- 1\n- 2\n", 1, 1, "expected a mapping of keys to values at the top, found a list"),
    ],
)
def test_malformed_yaml_names_line_and_column(text, line, column, words):
    messages = parse_text(text, file="a.yaml").syntax
    assert [(m.line, m.column) for m in messages] == [(line, column)]
    assert words in messages[0].message


def test_yaml_duplicate_key_is_a_warning_at_the_second_occurrence():
    doc = parse_text("deepspeed_config:\n  zero_stage: 2\n  zero_stage: 3\n", file="a.yaml")
    assert doc.data == {"deepspeed_config": {"zero_stage": 3}}
    (message,) = doc.syntax
    assert (message.severity, message.line, message.column, message.path) == ("warning", 3, 3, "deepspeed_config.zero_stage")


def test_kind_is_detected_from_keys_not_only_from_the_extension():
    assert parse_text("zero_optimization:\n  stage: 2\ntrain_batch_size: 8\n").kind == "deepspeed"
    assert parse_text('{"distributed_type": "DEEPSPEED", "num_processes": 2}').kind == "accelerate"


def test_unreadable_and_non_utf8_files_are_messages_not_exceptions(tmp_path):
    missing = load_file(tmp_path / "nope.yaml")
    assert missing.data is None and "cannot read the file" in missing.syntax[0].message
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"a: 1\nb: caf\xe9\n")
    doc = load_file(latin)
    assert doc.data is None and doc.syntax[0].line == 2 and "not UTF-8" in doc.syntax[0].message


def test_message_format_is_the_compiler_form():
    m = Message("error", "zero_optimization.stage", "bad", "ds.json", 3, 5)
    assert m.format() == "ds.json:3:5: error: zero_optimization.stage: bad"
    assert Message("warning", "", "x").format() == "<text>:1:1: warning: (document): x"
