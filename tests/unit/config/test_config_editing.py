"""Typing into a form: text -> stored value, unset vs default, in-place edits that leave other keys alone."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field

from traindeck.backend.config.editing import (
    FieldTextError,
    get_path,
    remove_path,
    set_path,
    text_from_value,
    value_from_text,
)
from traindeck.backend.config.schema import Section, fields_of


class Demo(Section):
    bucket: int = Field(500_000_000, ge=0, description="d", json_schema_extra={"auto": True})
    lr: float = Field(1e-3, description="d")
    flag: bool = Field(False, description="d")
    device: Literal["none", "cpu", "nvme"] = Field("none", description="d")
    stage: Literal[0, 1, 2, 3] = Field(0, description="d")
    path: str | None = Field(None, description="d")
    betas: list[float] = Field(default_factory=list, description="d")
    wrap: Literal["A", "B"] | str = Field("A", description="d")


S = fields_of(Demo)


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("bucket", "5e8", 500_000_000), ("bucket", "1_000", 1000), ("bucket", "auto", "auto"), ("bucket", "  ", None),
        ("lr", "1e-4", 1e-4), ("lr", "3", 3), ("flag", "true", True), ("flag", "off", False),
        ("device", "cpu", "cpu"), ("stage", "3", 3), ("path", "/nvme", "/nvme"), ("path", "null", None),
        ("betas", "[0.9, 0.999]", [0.9, 0.999]), ("wrap", "MyLayer", "MyLayer"), ("wrap", "B", "B"),
    ],
)
def test_text_to_value(key, text, value):
    got = value_from_text(S[key], text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    ("key", "text", "words"),
    [("bucket", "lots", "whole number"), ("bucket", "1.5", "whole number"), ("flag", "maybe", "true or false"),
     ("device", "gpu", "one of 'none', 'cpu', 'nvme'"), ("stage", "5", "one of 0, 1, 2, 3"), ("betas", "{a: 1}", "a list"),
     ("lr", "nan", "a number")],
)
def test_bad_text_says_what_is_expected(key, text, words):
    with pytest.raises(FieldTextError, match=words):
        value_from_text(S[key], text)


def test_values_show_as_the_text_that_reads_back_the_same():
    for key, value in [("bucket", 500_000_000.0), ("lr", 1e-4), ("flag", True), ("stage", 2), ("betas", [0.9, 0.99])]:
        assert value_from_text(S[key], text_from_value(S[key], value)) == value


def test_in_place_edits_create_sections_and_leave_other_keys():
    data = {"zero_optimization": None, "other": {"x": 1}}
    set_path(data, ("zero_optimization", "offload_optimizer", "device"), "cpu")
    assert data == {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}, "other": {"x": 1}}
    assert get_path(data, ("zero_optimization", "offload_optimizer", "device")) == "cpu"
    assert get_path(data, ("zero_optimization", "nope", "x"), "default") == "default"
    remove_path(data, ("zero_optimization", "offload_optimizer", "device"))
    remove_path(data, ("not", "there"))
    assert data == {"zero_optimization": {"offload_optimizer": {}}, "other": {"x": 1}}


class Params(Section):
    params: dict[str, object] = Field(default_factory=dict, description="d")
    anything: object = Field(None, description="d")


P = fields_of(Params)


@pytest.mark.parametrize(
    ("text", "value"),
    [('{"lr": 1e-4, "betas": [0.9, 0.999]}', {"lr": 1e-4, "betas": [0.9, 0.999]}),  # JSON: read as JSON
     ("{lr: 1e-4, eps: 1E-8}", {"lr": 1e-4, "eps": 1e-8}),  # YAML flow text: an exponent is a number too
     ('{lr: "1e-4"}', {"lr": "1e-4"})],  # quoted: text, as the user wrote it (the check then warns)
)
def test_a_mapping_typed_as_json_or_yaml_keeps_its_numbers(text, value):
    got = value_from_text(P["params"], text)
    assert got == value and all(type(got[k]) is type(value[k]) for k in value)
    assert value_from_text(P["anything"], "1e-4") == 1e-4


def test_numbers_written_as_text_are_flagged_with_file_line_and_key(tmp_path):
    from traindeck.backend.config import check_files

    ds = tmp_path / "ds.json"
    ds.write_text('{\n  "train_micro_batch_size_per_gpu": 1,\n  "optimizer": {"type": "AdamW",\n'
                  '    "params": {"lr": "1e-4", "betas": ["0.9", 0.999], "weight_decay": 0.0}}\n}\n')
    acc = tmp_path / "acc.yaml"
    acc.write_text("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_min_num_params: 1e8\n")
    found = {(m.file, m.line, m.path, m.severity) for m in check_files([ds, acc]) if "written as text" in m.message
             or "is text, not a number" in m.message}
    assert found == {(str(ds), 4, "optimizer.params.lr", "warning"), (str(ds), 4, "optimizer.params.betas[0]", "warning"),
                     (str(acc), 4, "fsdp_config.fsdp_min_num_params", "error")}
