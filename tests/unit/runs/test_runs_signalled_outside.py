"""A launcher signalled by someone other than traindeck, read from its own lines: DeepSpeed's launch.py
(sigkill_handler) and torch elastic's agent say they received the signal before they end their ranks. Without a
stop request the run is "signalled_from_outside" (never "succeeded", not a rank's failure); with one it is stopped.

The DeepSpeed and torchrun lines are real: DeepSpeed 0.19.8's launcher and torch 2.13's torchrun (Python 3.11) on
this machine's CPU, 2 ranks of tests/fixtures/scripts/behave.py, the launcher sent SIGTERM by pid. The "exits with
return code = 0" after "Killing subprocess" is sigkill_handler's own format (deepspeed/launcher/launch.py) for a
launcher whose last_return_code is 0, which 0.19.8 never sets, so it is written from the source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from traindeck.backend.runs.diagnosis.diagnose import Evidence, ProcessEnd, diagnose, is_success

# DeepSpeed 0.19.8: rank 1 finished (exit 0), then the launcher got SIGTERM while rank 0 trained on.
DEEPSPEED_SIGTERM = """\
[2026-11-27 23:18:47,289] [INFO] [launch.py:245:main] process 11714 spawned with command: ['/work/main/.venv/bin/python', '-u', 'behave.py', '--local_rank=0', '--steps', '2000']
[2026-11-27 23:18:47,300] [INFO] [launch.py:245:main] process 11715 spawned with command: ['/work/main/.venv/bin/python', '-u', 'behave.py', '--local_rank=1', '--steps', '2000']
[rank0]: behave: rank 0 starting
[rank1]: behave: rank 1 starting
[rank0]: train:   0%|#####| 1/2000 [00:01<00:01, 20.00it/s][rank1]: behave: rank 1 done
[rank0]: train:   0%|#####| 2/2000 [00:01<00:01, 20.00it/s][2026-11-27 23:18:48,300] [INFO] [launch.py:285:main] Process 11715 exits successfully.
[rank0]: {'loss': 0.0500, 'learning_rate': 0.001, 'epoch': 0.01}
[2026-11-27 23:18:48,399] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 11714
[2026-11-27 23:18:48,403] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 11715
[2026-11-27 23:18:48,403] [INFO] [launch.py:262:sigkill_handler] Main process received SIGTERM, exiting"""

# sigkill_handler where a rank had returned 0 before the signal: it logs the command's return code and exits with it.
DEEPSPEED_EXIT_0 = """\
[rank0]: behave: rank 0 starting
[2026-11-27 23:18:48,399] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 11714
[2026-11-27 23:18:48,403] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 11715
[2026-11-27 23:18:48,404] [ERROR] [launch.py:259:sigkill_handler] ['/work/main/.venv/bin/python', '-u', 'behave.py', '--local_rank=1', '--steps', '2000'] exits with return code = 0"""

# DeepSpeed's own end of the ranks when one fails by itself: the same handler, called by the launcher, no signal.
DEEPSPEED_RANK_FAILED = """\
[rank1]: behave: rank 1 exits with 7
[2026-11-27 23:18:48,399] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 11714
[2026-11-27 23:18:48,403] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 11715
[2026-11-27 23:18:48,404] [ERROR] [launch.py:259:sigkill_handler] ['/work/main/.venv/bin/python', '-u', 'behave.py', '--local_rank=1', '--steps', '2000'] exits with return code = 7"""

# torchrun (torch 2.13, Python 3.11: the signal is logged by number), its agent's warning glued to a bar redraw.
TORCHRUN_SIGTERM = """\
behave: rank 0 starting
behave: rank 1 starting
train:   4%|#####| 88/2000 [00:01<00:01, 20.00it/s]W1127 23:19:12.569000 11945 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers
W1127 23:19:12.570000 11945 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 11964 closing signal SIGTERM
W1127 23:19:12.572000 11945 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 11965 closing signal SIGTERM
Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 11945 got signal: 15"""


def _diagnose_cli(tmp_path: Path, text: str, *args: str) -> dict:  # type: ignore[type-arg]
    path = tmp_path / "job.log"
    path.write_text(text + "\n")
    done = subprocess.run([sys.executable, "-m", "traindeck", "diagnose", str(path), *args, "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["diagnosis"]  # type: ignore[no-any-return]


def test_diagnose_reads_deepspeeds_sigterm_line_as_a_signal_from_outside(tmp_path: Path) -> None:
    d = _diagnose_cli(tmp_path, DEEPSPEED_SIGTERM, "--exit-code", "1")
    assert d["kind"] == "signalled_from_outside", d
    # A log from anywhere: traindeck did not run it, so "from outside traindeck" would mean nothing there.
    assert d["summary"] == ("The DeepSpeed launcher received SIGTERM and ended its ranks (its 'Main process received "
                            "SIGTERM' line); the run did not finish."), d
    assert d["rank"] is None
    assert d["evidence"][0].endswith("[launch.py:262:sigkill_handler] Main process received SIGTERM, exiting"), d
    # The senders are possibilities, never a fact.
    assert "The log does not say who sent it" in d["advice"] and "another DeepSpeed job's stop" in d["advice"], d
    assert "pkill -f" in d["advice"] and "scheduler" in d["advice"] and "`kill`" in d["advice"]
    assert "Ctrl+C" in d["advice"]
    # Without the exit code the log still tells it.
    assert _diagnose_cli(tmp_path, DEEPSPEED_SIGTERM)["kind"] == "signalled_from_outside"


def test_a_launcher_exiting_0_after_the_handler_is_not_a_success() -> None:
    ends = [ProcessEnd(11715, "rank", 1, 100.0, 0), ProcessEnd(11714, "rank", 0, 101.0, -15),
            ProcessEnd(11700, "launcher", None, 101.5, 0)]
    ev = Evidence(launcher_returncode=0, ends=ends, log_tail=DEEPSPEED_EXIT_0.splitlines())
    assert not is_success(ev)
    d = diagnose(ev)
    assert d.kind == "signalled_from_outside", d
    assert d.summary.startswith("The DeepSpeed launcher received a signal (SIGINT or SIGTERM) from outside traindeck")
    assert "its exit code 0 does not mean the run finished" in d.summary, d
    assert "after the launcher's signal: rank 0 was killed by SIGTERM; rank 1 exited with code 0" in d.evidence, d


def test_a_requested_stop_with_the_same_lines_reads_stopped() -> None:
    ev = Evidence(launcher_returncode=1, log_tail=DEEPSPEED_SIGTERM.splitlines(), stop_requested=True,
                  stop_detail="after SIGTERM")
    assert diagnose(ev).kind == "stopped"
    ev = Evidence(launcher_returncode=0, log_tail=DEEPSPEED_EXIT_0.splitlines(), stop_requested=True)
    assert diagnose(ev).kind == "stopped"


def test_deepspeeds_own_end_of_the_ranks_after_a_failure_is_no_signal() -> None:
    d = diagnose(Evidence(launcher_returncode=7, log_tail=DEEPSPEED_RANK_FAILED.splitlines()))
    assert d.kind == "exit_code" and d.rank == 1, d


def test_a_launcher_killed_itself_is_told_as_its_own_end() -> None:
    # traindeck ends what a SIGKILLed launcher leaves behind: the handler's line then is no outside signal.
    d = diagnose(Evidence(launcher_returncode=-9, log_tail=DEEPSPEED_SIGTERM.splitlines()))
    assert d.kind != "signalled_from_outside", d


def test_diagnose_reads_torchruns_death_signal_line(tmp_path: Path) -> None:
    d = _diagnose_cli(tmp_path, TORCHRUN_SIGTERM, "--exit-code", "1")
    assert d["kind"] == "signalled_from_outside", d
    assert d["summary"].startswith("torchrun received SIGTERM and ended its ranks (its 'Received SIGTERM death "
                                   "signal' line)"), d
    assert d["evidence"][0] == "Received 15 death signal, shutting down workers", d
    assert "SignalException" not in d["summary"]
