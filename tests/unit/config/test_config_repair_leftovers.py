"""`config fix` never says "done" over a config `config check` refuses (issue 10, point 5), and `config check`
names every JSON syntax problem of a file, not only the first (point 6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from traindeck.backend.config.repair import repair_text
from traindeck.backend.config.source import parse_text

FLAT_HEAD = "compute_environment: LOCAL_MACHINE\ndeepspeed_config:\ngradient_accumulation_steps: 4\n"
FLAT_TAIL = "distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_machines: 1\nnum_processes: 2\n"


def fix(path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", "config", "fix", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_an_unknown_key_among_a_flattened_sections_keys_goes_with_them(tmp_path):
    """The issue's file: indentation lost, and among deepspeed_config's keys one the description does not know
    (left at the top, accelerate refuses the file; it used to be left there with exit 0 and no message)."""
    src = tmp_path / "flat.yaml"
    src.write_text(FLAT_HEAD + "seq_parallel_communication_data_type: bf16\nzero3_init_flag: false\nzero_stage: 3\n"
                   + FLAT_TAIL)
    out = tmp_path / "fixed.yaml"
    done = fix(src, out)
    assert done.returncode == 0, done.stderr
    assert "line 4: moved seq_parallel_communication_data_type under deepspeed_config (a key traindeck does not " \
           "know" in done.stdout
    data = yaml.safe_load(out.read_text())
    assert data["deepspeed_config"] == {"gradient_accumulation_steps": 4, "seq_parallel_communication_data_type":
                                        "bf16", "zero3_init_flag": False, "zero_stage": 3}
    assert "seq_parallel_communication_data_type" not in data


def test_an_unknown_key_after_the_last_key_of_a_flattened_section_is_named_not_guessed(tmp_path):
    src = tmp_path / "flat_end.yaml"
    src.write_text(FLAT_HEAD + "zero_stage: 3\nseq_parallel_communication_data_type: bf16\n" + FLAT_TAIL)
    out = tmp_path / "fixed.yaml"
    done = fix(src, out)
    assert done.returncode == 1 and not out.exists()
    assert "line 5: 'seq_parallel_communication_data_type' is a key traindeck does not know, after the keys of " \
           "deepspeed_config" in done.stderr
    assert "nothing written" in done.stderr


def test_a_misspelt_nested_enum_is_fixed_when_one_value_is_one_keystroke_away():
    text = '{\n  "zero_optimization": {\n    "stage": 3,\n    "offload_param": {"device": "cpy"}\n  }\n}\n'
    result = repair_text(text, file="ds.json")
    assert result.ok
    assert "line 4: zero_optimization.offload_param.device: 'cpy' -> 'cpu'" in result.changes
    assert result.text_out == text.replace('"cpy"', '"cpu"')


def test_a_misspelt_nested_enum_close_to_two_values_is_named():
    text = '{\n  "zero_optimization": {\n    "stage": 3,\n    "offload_param": {"device": "nome"}\n  }\n}\n'
    result = repair_text(text, file="ds.json")
    assert not result.ok
    assert any("'nome' is not allowed and is close to several values ('nvme', 'none')" in p for p in result.problems)


def test_fix_exits_1_and_says_what_is_left_when_check_would_still_refuse(tmp_path):
    """'nvm' -> 'nvme' is a sure fix, but offloading to nvme needs a path nobody can guess: not "repaired"."""
    src = tmp_path / "ds.json"
    src.write_text('{\n  "zero_optimization": {\n    "stage": 3,\n    "offload_optimizer": {"device": "nvm"}\n  }\n}\n')
    out = tmp_path / "fixed.json"
    done = fix(src, out)
    assert done.returncode == 1 and not out.exists()
    assert "line 4: zero_optimization.offload_optimizer.device: 'nvm' -> 'nvme'" in done.stdout
    assert "still refused after the repair: zero_optimization.offload_optimizer.device: offload_optimizer to " \
           "'nvme' needs nvme_path" in done.stderr
    assert "`config check` would still refuse it: 1 error(s) left to fix by hand); nothing written" in done.stderr


def test_check_names_every_json_syntax_problem_with_line_and_column():
    text = ('{\n  "train_batch_size": 8,\n  "fp16": {"enabled": True,},\n  "zero_optimization": {\n    "stage": 2\n'
            '    "offload_optimizer": {"device": "cpu"}\n  },\n  // a note\n  "gradient_clipping": 1.0,\n}\n')
    doc = parse_text(text, file="ds.json")
    assert doc.data is None
    found = [(m.line, m.column, m.message) for m in doc.syntax]
    assert [(line, column) for line, column, _ in found] == [(3, 23), (3, 27), (6, 5), (8, 3), (9, 27)]
    words = [message for _, _, message in found]
    assert "'True' is Python" in words[0] and "trailing comma" in words[1] and "missing comma" in words[2]
    assert "// comment" in words[3] and "trailing comma" in words[4]
    assert all(m.severity == "error" and m.file == "ds.json" for m in doc.syntax)


def test_check_goes_on_to_the_problem_it_cannot_read_past():
    """Fixable slips are all named, then the place where even the lenient reading stops."""
    text = '{\n  "a": True,\n  "b": [1, 2,],\n  "c": @\n}\n'
    doc = parse_text(text, file="ds.json")
    lines = [(m.line, m.message) for m in doc.syntax]
    assert [line for line, _ in lines] == [2, 3, 4]
    assert "'True' is Python" in lines[0][1] and "trailing comma" in lines[1][1]
    assert "unexpected character '@'" in lines[2][1]


def test_pasted_text_over_the_size_bound_is_refused_before_reading():
    """The dashboard's Open/Paste repairs text it read itself: the bound applies there too."""
    result = repair_text('{"a": [' + "1, " * 3_000_000 + "1]}", file="big.json")
    assert result.text_out is None and "a config file is at most 8.0 MB" in result.problems[0]
