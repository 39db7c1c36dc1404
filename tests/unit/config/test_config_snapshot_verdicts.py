"""The three wrong verdicts of issue 10 on real keys, and DeepSpeed's / accelerate's own classes agreeing.

1. DeepSpeed's DeepSpeedZeroConfig names its ZeRO-3 fields max_live_parameters, gather_16bit_weights_on_model_save,
   ... with the stage3_* spellings as aliases (populate_by_name): both spellings are valid, neither is "repaired".
2. A SageMaker accelerate config is read by SageMakerConfig, whose keys (ec2_instance_type, iam_role_name, ...)
   are not ClusterConfig's.
3. DeepSpeed's CompileConfig forbids unknown keys: a `compile` section with one is refused at start-up.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from traindeck.backend.config.messages import Message
from traindeck.backend.config.repair import repair_text
from traindeck.backend.config.validate import check_files

HAS_TOOLS = all(importlib.util.find_spec(name) is not None for name in ("deepspeed", "accelerate"))

ZERO3_FIELD_NAMES = {  # the spellings axolotl's and LLaVA's zero3 configs use
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "sub_group_size": 0,
        "reduce_bucket_size": 1000000,
        "prefetch_bucket_size": 1000000,
        "param_persistence_threshold": 10000,
        "max_live_parameters": 0,
        "max_reuse_distance": 0,
        "gather_16bit_weights_on_model_save": True,
    },
}
BOTH_SPELLINGS = {
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 3, "max_live_parameters": 100, "stage3_max_live_parameters": 200},
}
OLD_NAME_BESIDE_ALIAS = {  # the deprecated name and the new key under its field name: DeepSpeed asserts
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True,
                          "gather_16bit_weights_on_model_save": True},
}
COMPILE_FORBIDDEN = {
    "train_micro_batch_size_per_gpu": 1,
    "compile": {"deepcompile": True, "offload_activations": True},  # CompileConfig's key is offload_activation
}
COMPILE_OK = {
    "train_micro_batch_size_per_gpu": 1,
    "compile": {"deepcompile": True, "offload_activation": True, "passes": ["z3"]},
}
SAGEMAKER = """\
compute_environment: AMAZON_SAGEMAKER
distributed_type: DATA_PARALLEL
ec2_instance_type: ml.p3.16xlarge
iam_role_name: accelerate_sagemaker_execution_role
image_uri: null
mixed_precision: fp16
num_machines: 1
profile: default
py_version: py38
pytorch_version: 1.10.2
region: us-east-1
transformers_version: 4.17.0
use_cpu: false
"""
SAGEMAKER_WITH_CLUSTER_KEY = SAGEMAKER + "num_processes: 8\n"  # a ClusterConfig key SageMakerConfig lacks


def _write(tmp_path: Path, name: str, data: dict[str, Any] | str) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2), encoding="utf-8")
    return path


def _errors(messages: list[Message], prefix: str = "") -> list[Message]:
    return [m for m in messages if m.severity == "error" and m.path.startswith(prefix)]


def test_zero3_field_names_are_valid_and_left_alone_by_fix(tmp_path: Path) -> None:
    path = _write(tmp_path, "zero3.json", ZERO3_FIELD_NAMES)
    messages = check_files([path], hf_trainer=True)
    assert [m for m in messages if m.path.startswith("zero_optimization")] == []
    repaired = repair_text(path.read_text(), str(path))
    assert repaired.changes == []
    assert json.loads(repaired.text_out or "{}")["zero_optimization"] == ZERO3_FIELD_NAMES["zero_optimization"]


def test_the_stage3_spellings_stay_valid_too(tmp_path: Path) -> None:
    zero = {"stage": 3, "stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0,
            "stage3_gather_16bit_weights_on_model_save": True, "stage3_prefetch_bucket_size": 1000000}
    path = _write(tmp_path, "zero3_old.json", {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero})
    assert _errors(check_files([path], hf_trainer=True), "zero_optimization") == []


def test_both_spellings_of_one_key_are_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "both.json", BOTH_SPELLINGS)
    (error,) = _errors(check_files([path]), "zero_optimization")
    assert error.path == "zero_optimization.max_live_parameters"
    assert "'max_live_parameters' and 'stage3_max_live_parameters' are two spellings of one key" in error.message
    assert "DeepSpeed refuses them together" in error.message


def test_a_deprecated_name_beside_the_new_keys_other_spelling_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "old_and_new.json", OLD_NAME_BESIDE_ALIAS)
    (error,) = _errors(check_files([path]), "zero_optimization")
    assert error.path == "zero_optimization.stage3_gather_fp16_weights_on_model_save"
    assert "old name of 'gather_16bit_weights_on_model_save', which is also set" in error.message


def test_a_sagemaker_config_is_checked_against_sagemakers_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, "sagemaker.yaml", SAGEMAKER)
    assert [m for m in check_files([path]) if "unknown key" in m.message] == []
    assert _errors(check_files([path])) == []
    repaired = repair_text(SAGEMAKER, str(path))
    assert "ec2_instance_type" in (repaired.text_out or "") and "iam_role_name" in (repaired.text_out or "")
    wrong = _write(tmp_path, "sagemaker_cluster_key.yaml", SAGEMAKER_WITH_CLUSTER_KEY)
    (error,) = _errors(check_files([wrong]))
    assert error.path == "num_processes" and "unknown key 'num_processes'" in error.message


def test_a_compile_key_deepspeed_forbids_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "compile.json", COMPILE_FORBIDDEN)
    (error,) = _errors(check_files([path]))
    assert error.path == "compile.offload_activations"
    assert error.message == ("unknown key 'offload_activations' (DeepSpeed refuses unknown keys in compile); "
                             "did you mean 'offload_activation'?")
    assert _errors(check_files([_write(tmp_path, "compile_ok.json", COMPILE_OK)])) == []


# ------------------------------------------------------------------------------------------ the tools' own verdicts

_PROBE = textwrap.dedent('''
    import json, logging, sys
    logging.disable(logging.CRITICAL)
    out = {}
    for name, kind, arg in json.loads(sys.stdin.read()):
        try:
            if kind == "deepspeed":
                from deepspeed.runtime.config import DeepSpeedConfig
                DeepSpeedConfig(arg)  # runs on CPU: no process group -> world size 1
            elif kind == "zero":
                from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
                DeepSpeedZeroConfig(**arg)
            elif kind == "compile":
                from deepspeed.compile.config import CompileConfig
                CompileConfig(**arg)
            else:
                from accelerate.commands.config.config_args import load_config_from_file
                load_config_from_file(arg)
            out[name] = "accepted"
        except Exception as exc:
            out[name] = "refused: " + type(exc).__name__ + ": " + " ".join(str(exc).split())
    print(json.dumps(out))
''')


@pytest.mark.train
@pytest.mark.skipif(not HAS_TOOLS, reason="needs deepspeed and accelerate (the `train` extra)")
def test_deepspeed_and_accelerate_agree_with_each_verdict(tmp_path: Path) -> None:
    sagemaker = _write(tmp_path, "sagemaker.yaml", SAGEMAKER)
    sagemaker_bad = _write(tmp_path, "sagemaker_cluster_key.yaml", SAGEMAKER_WITH_CLUSTER_KEY)
    cases: list[tuple[str, str, Any]] = [
        ("zero3 field names", "deepspeed", ZERO3_FIELD_NAMES),
        ("zero3 field names (model)", "zero", ZERO3_FIELD_NAMES["zero_optimization"]),
        ("both spellings", "zero", BOTH_SPELLINGS["zero_optimization"]),
        ("old name beside the alias", "zero", OLD_NAME_BESIDE_ALIAS["zero_optimization"]),
        ("compile forbidden key", "deepspeed", COMPILE_FORBIDDEN),
        ("compile forbidden key (model)", "compile", COMPILE_FORBIDDEN["compile"]),
        ("compile ok", "compile", COMPILE_OK["compile"]),
        ("sagemaker", "accelerate", str(sagemaker)),
        ("sagemaker with a cluster key", "accelerate", str(sagemaker_bad)),
    ]
    done = subprocess.run([sys.executable, "-c", _PROBE], input=json.dumps(cases), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    tools = json.loads(done.stdout.strip().splitlines()[-1])
    ours = {
        "zero3 field names": _errors(check_files([_write(tmp_path, "a.json", ZERO3_FIELD_NAMES)])),
        "both spellings": _errors(check_files([_write(tmp_path, "b.json", BOTH_SPELLINGS)])),
        "old name beside the alias": _errors(check_files([_write(tmp_path, "e.json", OLD_NAME_BESIDE_ALIAS)])),
        "compile forbidden key": _errors(check_files([_write(tmp_path, "c.json", COMPILE_FORBIDDEN)])),
        "compile ok": _errors(check_files([_write(tmp_path, "d.json", COMPILE_OK)])),
        "sagemaker": _errors(check_files([sagemaker])),
        "sagemaker with a cluster key": _errors(check_files([sagemaker_bad])),
    }
    ours["zero3 field names (model)"] = ours["zero3 field names"]
    ours["compile forbidden key (model)"] = ours["compile forbidden key"]
    table = {name: (tools[name], [m.message for m in ours[name]]) for name, _, _ in cases}
    for name, (tool, errors) in table.items():
        print(f"{name:32} tool: {tool[:70]:70} traindeck: {errors[0][:60] if errors else 'no error'}")
    for name, (tool, errors) in table.items():
        assert (tool == "accepted") == (errors == []), f"{name}: tool {tool}; traindeck errors {errors}"
    assert "Extra inputs are not permitted" in tools["compile forbidden key (model)"]
    assert "unknown keys (['num_processes'])" in tools["sagemaker with a cluster key"]


_EVERY_SPELLING = textwrap.dedent('''
    import importlib, json, logging, sys
    logging.disable(logging.CRITICAL)
    sections = json.loads(sys.stdin.read())
    out = {}
    for path, section in sections.items():
        module, _, name = section["source"].rpartition(".")
        model = getattr(importlib.import_module(module), name)
        for field, entry in section["fields"].items():
            if "default" not in entry or entry.get("section"):
                continue
            for spelling in [field, *entry["aliases"]]:
                try:
                    model(**{spelling: entry["default"]})
                    out[path + "." + spelling] = "accepted"
                except Exception as exc:
                    out[path + "." + spelling] = "refused: " + " ".join(str(exc).split())[:200]
        try:
            model(**{"surely_not_a_key": 1})
            out[path + ".surely_not_a_key"] = "accepted"
        except Exception as exc:
            out[path + ".surely_not_a_key"] = "refused: " + type(exc).__name__
    print(json.dumps(out))
''')


@pytest.mark.train
@pytest.mark.skipif(not HAS_TOOLS, reason="needs deepspeed and accelerate (the `train` extra)")
def test_every_spelling_deepspeeds_models_accept_the_checker_accepts() -> None:
    # Each key of each DeepSpeed pydantic section, under each of its spellings, with its default, given to
    # DeepSpeed's own model; and an unknown key. The checker must agree on every one.
    from traindeck.backend.config import key_snapshot as snapshot
    from traindeck.backend.config.deepspeed_schema import DeepSpeedConfig
    from traindeck.backend.config.validate import check_values

    sections = {p: s for p, s in snapshot.load("deepspeed")["sections"].items() if snapshot.refuses_unknown(s)}
    done = subprocess.run([sys.executable, "-c", _EVERY_SPELLING], input=json.dumps(sections), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    tools = json.loads(done.stdout.strip().splitlines()[-1])
    # tensor_parallel.dtype takes a torch.dtype object: no JSON value is one (DeepSpeed's own default included).
    unwritable = {"tensor_parallel.dtype"}
    disagree = []
    for where, verdict in tools.items():
        if where in unwritable:
            continue
        *parents, key = where.split(".")
        data: dict[str, Any] = {}
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = 1 if key == "surely_not_a_key" else _default_at(sections, ".".join(parents), key)
        errors = [f for f in check_values(data, DeepSpeedConfig) if f[0] == "error" and ".".join(f[1]) == where]
        if (verdict == "accepted") != (errors == []):
            disagree.append((where, verdict, errors))
    assert len(tools) > 170
    assert disagree == []


def _default_at(sections: dict[str, Any], path: str, key: str) -> Any:
    for name, entry in sections[path]["fields"].items():
        if key in (name, *entry["aliases"]):
            return entry["default"]
    raise KeyError(key)
