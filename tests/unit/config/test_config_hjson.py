"""DeepSpeed reads a config *file* with hjson (deepspeed/runtime/config.py: hjson.load with a duplicate-key check),
so a trailing or missing comma that strict JSON refuses still runs under DeepSpeed's own launcher, while the HF
Trainer and accelerate (json.load) stop on it. Real case: DeepSpeedExamples' pipeline_parallelism/ds_config.json."""

from __future__ import annotations

from pathlib import Path

from traindeck.backend.config.validate import check_files

TRAILING = '{\n  "train_batch_size": 16,\n  "steps_per_prnt": 10,\n  "fp16": {"enabled": true},\n}\n'


def _check(tmp_path: Path, text: str, **kwargs: object) -> list[tuple[str, int | None, str]]:
    path = tmp_path / "ds.json"
    path.write_text(text)
    return [(m.severity, m.line, m.message) for m in check_files([path], **kwargs)]  # type: ignore[arg-type]


def test_a_slip_deepspeeds_reader_takes_is_a_warning_and_the_keys_are_still_checked(tmp_path: Path) -> None:
    found = _check(tmp_path, TRAILING)
    slip = [f for f in found if "trailing comma" in f[2]]
    assert [f[0] for f in slip] == ["warning"] and slip[0][1] == 4
    assert "hjson" in slip[0][2] and "HF Trainer" in slip[0][2]
    # the data hjson read is checked as usual, with the key's own line
    assert any(f[1] == 3 and "steps_per_prnt" in f[2] for f in found), found


def test_the_same_slip_is_an_error_for_the_hf_trainer_and_accelerate(tmp_path: Path) -> None:
    for kwargs in ({"consumer": "hf_trainer"}, {"consumer": "accelerate"}):
        found = _check(tmp_path, TRAILING, **kwargs)
        assert [f[0] for f in found if "trailing comma" in f[2]] == ["error"], kwargs


def test_auto_values_say_who_reads_the_file(tmp_path: Path) -> None:
    # "auto" is filled only by the HF Trainer / accelerate, which read strict JSON: the slip stops them.
    text = '{\n  "train_batch_size": "auto"\n  "gradient_accumulation_steps": "auto"\n}\n'
    assert [f[0] for f in _check(tmp_path, text) if "missing comma" in f[2]] == ["error"]


def test_what_hjson_refuses_too_stays_a_syntax_error(tmp_path: Path) -> None:
    found = _check(tmp_path, '{\n  "train_batch_size": 16,\n  "fp16": {"enabled": true\n')
    assert found and all(f[0] == "error" for f in found)
    # duplicate keys: DeepSpeed's reader refuses them
    found = _check(tmp_path, '{\n  "train_batch_size": 16,\n  "train_batch_size": 8,\n}\n')
    assert any(f[0] == "error" for f in found)
