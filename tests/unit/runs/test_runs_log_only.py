"""Diagnoses read from the log alone: the launchers' reports of their ranks' ends (torchrun's ChildFailedError table,
DeepSpeed's "exits with return code", torch elastic's "failed (exitcode ...)"), the failures tools print (loss scale,
op builds, segfaults, full disks, package versions), and `traindeck diagnose` on a log from anywhere. The logs are
real where this machine can make them (tests/fixtures/logs: torchrun and DeepSpeed runs on CPU); the other lines are
the tools' own formats, from their source (named at each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support import TESTS

from traindeck.backend.runs.diagnosis.diagnose import Evidence, ProcessEnd, diagnose
from traindeck.backend.runs.diagnosis.launcher_reports import first_reported, rank_reports

LOGS = TESTS / "fixtures" / "logs"

# torch/distributed/elastic/multiprocessing/errors/__init__.py: _FAILURE_FORMAT_TEMPLATE, for a rank killed by a
# signal (its traceback field then says "Signal N (NAME) received by PID").
TORCHRUN_SIGNAL = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_10:46:27
  host      : node-a
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 4242) ({name})
  error_file: <N/A>
  traceback : Signal {signal} ({name}) received by PID 4242
============================================================"""


def _log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.log"
    path.write_text(text + "\n")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", "diagnose", *args], capture_output=True, text=True,
                          timeout=60)


def test_torchruns_table_names_the_root_cause_rank_and_the_others() -> None:
    lines = (LOGS / "torchrun_tee_2rank_fail.raw").read_text().splitlines()
    reports = rank_reports(lines)
    root = first_reported(reports)
    assert root is not None and (root.rank, root.exitcode, root.pid, root.root) == (1, 1, 13597, True)
    assert {(r.rank, r.exitcode) for r in reports} >= {(0, -15), (1, 1)}


def test_deepspeeds_return_code_line_names_the_local_rank() -> None:
    lines = (LOGS / "cascade" / "raise_rank1.log").read_text().splitlines()
    assert [(r.rank, r.exitcode) for r in rank_reports(lines)] == [(1, 1)]


def test_a_launcher_that_relays_a_ranks_sigsegv_is_not_the_crash() -> None:
    """torchrun exits 1 after its report: the supervisor saw only that; the report names rank 1's SIGSEGV."""
    lines = TORCHRUN_SIGNAL.format(rank=1, code=-11, signal=11, name="SIGSEGV").splitlines()
    ev = Evidence(launcher_returncode=1, ends=[ProcessEnd(10, "launcher", None, 100.0, 1)], log_tail=lines)
    d = diagnose(ev)
    assert (d.kind, d.rank) == ("segfault", 1), d
    assert d.summary.startswith("Rank 1 crashed with a segmentation fault (SIGSEGV)")
    assert any("torchrun reported rank 1 (pid 4242) as the first failure" in e for e in d.evidence), d.evidence


def test_a_reported_sigkill_without_samples_is_the_oom_killer_as_a_likelihood(tmp_path: Path) -> None:
    path = _log(tmp_path, TORCHRUN_SIGNAL.format(rank=0, code=-9, signal=9, name="SIGKILL"))
    done = _cli(str(path), "--exit-code", "1", "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)["diagnosis"]
    assert (d["kind"], d["rank"]) == ("killed", 0) and d["summary"] == "Rank 0 was killed by SIGKILL."
    assert "most often the kernel's out-of-memory killer" in d["advice"] and "Killed process 4242" in d["advice"]
    assert "was killed by the kernel" not in d["summary"]


def test_deepspeeds_loss_scale_line_alone_is_named_with_the_keys_to_change(tmp_path: Path) -> None:
    # deepspeed/runtime/fp16/loss_scaler.py raises this Exception when the dynamic scale is at its minimum.
    text = ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1\n"
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
    d = diagnose(Evidence(launcher_returncode=1, log_tail=text.splitlines()))
    assert d.kind == "loss_scale", d
    assert '"bf16"' in d.advice and '"initial_scale_power"' in d.advice and '"loss_scale_window"' in d.advice
    assert any("skipped 2 step(s) on overflow" in e for e in d.evidence)


def test_op_build_failures_at_each_stage_name_the_op_and_what_to_change() -> None:
    cases = {
        "nvcc fatal   : Unsupported gpu architecture 'compute_89'\nninja: build stopped: subcommand failed.":
            ("TORCH_CUDA_ARCH_LIST", None),
        "Building extension module async_io...\n/x/deepspeed_py_aio.h:10:10: fatal error: libaio.h: No such file "
        "or directory\nninja: build stopped: subcommand failed.": ("apt install libaio-dev", "async_io"),
        "Building extension module cpu_adam...\nsubprocess.CalledProcessError: Command '['ninja', '-v']' returned "
        "non-zero exit status 1.": ("", "cpu_adam"),
        "RuntimeError: Error building extension 'fused_adam'": ("", "fused_adam"),
    }
    for text, (advice, op) in cases.items():
        d = diagnose(Evidence(launcher_returncode=1, log_tail=text.splitlines()))
        assert d.kind == "op_build", (text, d)
        assert advice in d.advice if advice else True
        if op:
            assert f"DeepSpeed's {op} op failed to build" in d.summary, d.summary


def test_a_full_disk_names_the_path_and_its_free_space_now(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    path = _log(tmp_path, f"OSError: [Errno 28] No space left on device: '{folder}/global_step100'")
    done = _cli(str(path), "--exit-code", "1")
    assert done.returncode == 0, done.stderr
    assert f"could not write at {folder}/global_step100: no space left on the device" in done.stdout
    assert f"the disk holding {folder}/global_step100 has " in done.stdout and " free now" in done.stdout


def test_a_version_pin_names_the_package_and_the_version() -> None:
    # transformers/utils/versions.py: "{requirement} is required for a normal functioning of this module, but found
    # {pkg}=={got_ver}."
    text = "ImportError: accelerate>=0.21.0 is required for a normal functioning of this module, but found " \
           "accelerate==0.20.3."
    d = diagnose(Evidence(launcher_returncode=1, log_tail=[text]))
    assert d.kind == "package_version" and "python -m pip install 'accelerate>=0.21.0'" in d.advice, d


def test_diagnose_says_what_a_log_alone_cannot_tell_and_refuses_a_missing_file(tmp_path: Path) -> None:
    path = _log(tmp_path, "step 1\nstep 2")
    done = _cli(str(path))
    assert done.returncode == 0, done.stderr
    assert "The log shows no failure (its exit status was not given)." in done.stdout
    assert "the exit status (give it with --exit-code N)" in done.stdout
    missing = _cli(str(tmp_path / "nope.log"))
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert f"{tmp_path / 'nope.log'}: no such file" in missing.stderr
