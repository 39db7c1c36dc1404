"""Real logs from public issue threads (tests/fixtures/logs/public) replayed through the real supervisor: a script
writes the log's bytes to its stdout and ends as the thread's launcher did (the exit status expected.tsv records),
launched with `traindeck run`; `runs show --json` must then give the diagnosis the log alone gives. One log per
family: loss scale, op build, a launcher's report of a rank killed or crashed, a full disk, a version pin, a
missing module, CUDA OOM, a port in use, an NCCL timeout, DeepSpeed's batch-size check."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import TESTS
from support.runhelp import wait_finished

PUBLIC = TESTS / "fixtures" / "logs" / "public"

REPLAYS = ["firefly_68_loss_scale.log", "dschat_3299_compute_89.log", "dschat_3232_return_code_-9.log",
           "cppo_6_torchrun_sigkill.log", "dsexamples_626_return_code_-11.log", "simpletuner_2353_disk_full.log",
           "wan22_347_peft_pin.log", "landmark_10_missing_peft.log", "llamafactory_9510_cuda_oom_gpu4.log",
           "msswift_3988_port_in_use.log", "llamafactory_6269_nccl_timeout.log", "ds_6914_batch_size_rank0.log",
           "starcoder_77_batch_size_rich.log", "threestudio_369_segfault_tqdm.log"]

# Writes the log's bytes as they are and ends with the launcher's status: a negative one as that signal.
REPLAY = """import os, signal, sys
with open({log!r}, "rb") as f:
    sys.stdout.buffer.write(f.read())
sys.stdout.flush()
code = {code}
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
"""


def _expected() -> dict[str, dict[str, str]]:
    with open(PUBLIC / "expected.tsv", newline="") as f:
        return {row["file"]: row for row in csv.DictReader(f, delimiter="\t")}


def traindeck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_the_supervisor_diagnoses_the_replayed_logs_as_the_log_alone_does(tmp_path: Path) -> None:
    expected = _expected()
    started: dict[str, str] = {}
    for name in REPLAYS:  # all started first, then awaited: the replays run side by side
        row = expected[name]
        script = tmp_path / f"replay_{len(started)}.py"
        script.write_text(REPLAY.format(log=str(PUBLIC / name), code=int(row["exit_code"])))
        result = traindeck("run", "--name", f"replay-{Path(name).stem}", "--detach", str(script), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        started[name] = result.stdout.split()[-1]
    families = set()
    for name, run_id in started.items():
        row = expected[name]
        wait_finished(run_id, 120)
        shown = json.loads(traindeck("runs", "show", run_id, "--json", cwd=tmp_path).stdout)
        d = shown["diagnosis"]
        assert (d["kind"], row["summary"] in d["summary"]) == (row["kind"], True), (name, d)
        if row["rank"] != "-":
            assert d["rank"] == int(row["rank"]), (name, d)
        code = int(row["exit_code"])
        assert shown["exit_code"] == code, (name, shown["exit_code"])
        families.add(d["kind"])
    assert len(families) >= 6


@pytest.mark.parametrize("name", ["dschat_3232_return_code_-9.log"])
def test_the_replayed_log_is_in_the_runs_output_unchanged(tmp_path: Path, name: str) -> None:
    script = tmp_path / "replay.py"
    script.write_text(REPLAY.format(log=str(PUBLIC / name), code=0))
    run_id = traindeck("run", "--name", "replay-bytes", "--detach", str(script), cwd=tmp_path).stdout.split()[-1]
    wait_finished(run_id, 120)
    logs = traindeck("logs", run_id, cwd=tmp_path)
    assert logs.stdout.splitlines() == (PUBLIC / name).read_text().splitlines()
