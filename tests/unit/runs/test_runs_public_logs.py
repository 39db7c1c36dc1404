"""Real logs from public issue threads (tests/fixtures/logs/public: excerpts of the machine output the threads
quote, each with its source, the cause the thread established and the exit status its launcher really returns, in
README.md there) diagnosed from the log alone, as `traindeck diagnose` does: each must get the kind, rank and summary
expected.tsv records, and a few named details (the advice's key, package or variable) that a user acts on."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import TESTS

from traindeck.backend.runs.diagnosis.diagnose import Diagnosis
from traindeck.backend.runs.diagnosis.log_only import diagnose_logs

PUBLIC = TESTS / "fixtures" / "logs" / "public"


def _expected() -> list[dict[str, str]]:
    with open(PUBLIC / "expected.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


EXPECTED = _expected()
BY_FILE = {row["file"]: row for row in EXPECTED}


def _diagnose(name: str) -> Diagnosis:
    return diagnose_logs([PUBLIC / name], int(BY_FILE[name]["exit_code"])).diagnosis


def test_every_log_has_its_expectation_and_its_source() -> None:
    logs = sorted(p.name for p in PUBLIC.glob("*.log"))
    assert len(logs) >= 30
    assert sorted(BY_FILE) == logs
    readme = (PUBLIC / "README.md").read_text()
    for name in logs:
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"{name} has no row in README.md"
        assert re.search(r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+", row), row
    kinds = {row["kind"] for row in EXPECTED}
    assert kinds >= {"loss_scale", "op_build", "killed", "segfault", "disk_full", "missing_module",
                     "package_version", "cuda_oom", "port_in_use", "collective_timeout", "deepspeed_batch_size",
                     "local_rank_arg"}


@pytest.mark.parametrize("row", EXPECTED, ids=[row["file"] for row in EXPECTED])
def test_the_log_alone_gives_the_expected_diagnosis(row: dict[str, str]) -> None:
    d = _diagnose(row["file"])
    assert d.kind == row["kind"], d
    assert d.rank == (None if row["rank"] == "-" else int(row["rank"])), d
    assert row["summary"] in d.summary, d.summary


def test_op_builds_name_what_to_change() -> None:
    assert "TORCH_CUDA_ARCH_LIST" in _diagnose("dschat_3299_compute_89.log").advice
    assert "CC=gcc-12 CXX=g++-12" in _diagnose("flashdepth_2_gcc_too_new.log").advice
    assert "CUDA_HOME" in _diagnose("cpmlive_244_cuda_home_unset.log").advice
    # A package's own extension is not DeepSpeed's.
    assert "DeepSpeed" not in _diagnose("quanto_54_compute_89.log").summary
    # DeepSpeed's prebuild without libaio: the switch the log names; no apt on Windows (its paths say so).
    for name in ("ds_3211_async_io_precompile.log", "llama_chinese_27_async_io.log"):
        d = _diagnose(name)
        assert "DS_BUILD_AIO=0" in d.advice and "apt" not in d.advice, d.advice


def test_a_linux_prebuild_without_libaio_also_names_the_package_to_install(tmp_path: Path) -> None:
    # The same DeepSpeed warnings as ds_3211's, from a Linux path: apt's package is named as well.
    text = (PUBLIC / "ds_3211_async_io_precompile.log").read_text().replace("D:\\python\\DeepSpeed\\",
                                                                             "/tmp/DeepSpeed/")
    path = tmp_path / "linux.log"
    path.write_text(text)
    d = diagnose_logs([path], 1).diagnosis
    assert "apt install libaio-dev" in d.advice and "DS_BUILD_AIO=0" in d.advice, d.advice


def test_launchers_reports_name_the_rank_and_say_a_kill_is_only_likely_memory() -> None:
    d = _diagnose("dschat_3232_return_code_-9.log")
    assert any("DeepSpeed's launcher reported rank 0 as the first failure" in e for e in d.evidence), d.evidence
    assert "most often the kernel's out-of-memory killer" in d.advice and d.memory == ""
    d = _diagnose("recurrent_drafter_5_torchrun_sigkill.log")
    assert 'Killed process 3309' in d.advice
    assert any("torchrun reported rank 7 (pid 3309)" in e for e in d.evidence), d.evidence


def test_what_a_log_does_not_say_is_not_claimed() -> None:
    # The thread found the disk full; the log says only that the file could not be opened.
    d = _diagnose("ronin_51_cannot_open_checkpoint.log")
    assert d.kind == "exception" and "space" not in d.summary
    # The thread's CUDA OOM never reached this excerpt: torchrun's table says only that rank 1 exited with 1.
    d = _diagnose("llamafactory_6040_torchrun_relays_rank1.log")
    assert d.kind == "exit_code" and "memory" not in d.summary


def test_version_pins_name_the_package_and_the_version() -> None:
    d = _diagnose("wan22_347_peft_pin.log")
    assert "python -m pip install 'peft>=0.17.0'" in d.advice
    assert "peft 0.14.0;" in d.summary  # the version as found, without the sentence's full stop
    assert "python -m pip install transformers" in _diagnose("tas_3_cannot_import_unknown_location.log").advice


def test_loss_scale_names_the_keys_to_change() -> None:
    d = _diagnose("firefly_68_loss_scale.log")
    assert '"bf16"' in d.advice and '"initial_scale_power"' in d.advice


def test_a_refused_local_rank_names_the_launcher_and_how_to_accept_it() -> None:
    d = _diagnose("yi_69_unrecognized_local_rank.log")
    assert 'parser.add_argument("--local_rank", type=int, default=-1)' in d.advice, d.advice
    assert "torchrun or accelerate" in d.advice and "--no_local_rank" in d.advice
    assert d.evidence[0] == "text_generation_tp.py: error: unrecognized arguments: --local_rank=0", d.evidence
    # The log alone does not say which launcher added it: both that do are named, as possibilities.
    assert "its launcher (the deepspeed launcher, or torch.distributed.launch)" in d.summary
    # torch's launcher spells it with a hyphen: the parser must take that spelling.
    d = _diagnose("tecogan_31_unrecognized_local_rank_hyphen.log")
    assert '"--local-rank", "--local_rank", dest="local_rank"' in d.advice and "--no_local_rank" not in d.advice
    assert "which torch.distributed.launch passes" in d.summary
    assert "local_rank: int = -1 field" in _diagnose("trl_596_hfargumentparser_local_rank.log").advice


def _cli(path: Path, code: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "traindeck", "diagnose", str(path), "--exit-code", code, "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", ["firefly_68_loss_scale.log", "dschat_3232_return_code_-9.log",
                                  "dsexamples_626_return_code_-11.log", "llamafactory_9510_cuda_oom_gpu4.log",
                                  "starcoder_77_batch_size_rich.log", "pytorch_118369_nccl_timeout_tqdm.log",
                                  "yi_69_unrecognized_local_rank.log", "trl_596_hfargumentparser_local_rank.log"])
def test_the_command_says_the_same(name: str) -> None:
    row = BY_FILE[name]
    found = _cli(PUBLIC / name, row["exit_code"])
    d = found["diagnosis"]
    assert isinstance(d, dict)
    assert d["kind"] == row["kind"] and d["rank"] == (None if row["rank"] == "-" else int(row["rank"]))
    assert row["summary"] in str(d["summary"])
    assert any("no memory was sampled" in str(item) for item in found["unknown"])  # type: ignore[attr-defined]
