"""`distributed_type: NO` written unquoted is YAML 1.1's false. accelerate keeps false as it is (BaseConfig only
converts strings to DistributedType) and its launcher, finding no distributed type in false, runs the single-process
launcher: the file works, by accident. The check says so as a warning and asks for quotes; without num_processes it
is an error, since process_config defaults num_processes to 1 only for the string NO and launch then refuses -1."""

from __future__ import annotations

from pathlib import Path

from traindeck.backend.config.validate import check_files


def _check(tmp_path: Path, text: str) -> list[tuple[str, str, str]]:
    path = tmp_path / "accelerate.yaml"
    path.write_text(text)
    return [(m.severity, m.path, m.message) for m in check_files([path], cwd=tmp_path)]


def test_unquoted_no_with_num_processes_is_a_warning_to_quote_it(tmp_path: Path) -> None:
    found = _check(tmp_path, "compute_environment: LOCAL_MACHINE\ndistributed_type: NO\nmixed_precision: 'no'\n"
                             "num_processes: 1\nnum_machines: 1\nmachine_rank: 0\nuse_cpu: false\n")
    assert [f for f in found if f[0] == "error"] == []
    about = [f for f in found if f[1] == "distributed_type"]
    assert len(about) == 1 and about[0][0] == "warning", found
    assert "by accident" in about[0][2] and 'distributed_type: "NO"' in about[0][2]


def test_unquoted_no_without_num_processes_is_an_error_as_accelerate_launch_refuses_it(tmp_path: Path) -> None:
    found = _check(tmp_path, "distributed_type: NO\nmixed_precision: 'no'\n")
    errors = [f for f in found if f[0] == "error"]
    assert len(errors) == 1 and errors[0][1] == "distributed_type", found
    assert "--num_processes" in errors[0][2] and 'distributed_type: "NO"' in errors[0][2]


def test_quoted_no_and_other_booleans(tmp_path: Path) -> None:
    assert [f for f in _check(tmp_path, "distributed_type: 'NO'\nmixed_precision: 'no'\n") if f[0] != "note"] == []
    found = _check(tmp_path, "distributed_type: true\nnum_processes: 1\n")
    assert any(f[0] == "error" and f[1] == "distributed_type" for f in found), found
