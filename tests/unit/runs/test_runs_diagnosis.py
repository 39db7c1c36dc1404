"""Diagnosis rules over hand-made evidence (no processes): each kind of ending, and which rank went first."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from traindeck.backend.runs.diagnosis.diagnose import (
    Evidence,
    ProcessEnd,
    diagnose,
    first_failure,
    is_success,
    stall_threshold,
)
from traindeck.backend.runs.diagnosis.evidence import log_tail

GiB = 2**30


def ends(*items: tuple[int | None, int | None, float]) -> list[ProcessEnd]:
    """(rank, returncode, t) per rank; the launcher ends last with code 1."""
    out = [ProcessEnd(1000 + i, "rank", rank, t, code) for i, (rank, code, t) in enumerate(items)]
    out.append(ProcessEnd(999, "launcher", None, 100.0, 1))
    return out


def test_first_failure_is_the_earliest_bad_rank_not_the_first_listed() -> None:
    found = first_failure(ends((0, -15, 12.0), (1, -9, 10.0), (2, 0, 5.0)))
    assert found is not None and found.rank == 1 and found.returncode == -9


def test_host_oom_from_kernel_log_names_the_rank() -> None:
    ev = Evidence(1, ends=ends((0, -15, 12.0), (1, -9, 10.0)),
                  kernel_oom_pids={1001: "Out of memory: Killed process 1001 (python) total-vm:..."})
    d = diagnose(ev)
    assert d.kind == "host_oom" and d.rank == 1
    assert "out-of-memory killer" in d.summary and d.evidence[0].startswith("Out of memory: Killed process 1001")


def test_host_oom_from_counters_when_the_kernel_log_is_unreadable() -> None:
    ev = Evidence(1, ends=ends((0, -15, 12.0), (1, -9, 10.0)), oom_kills_during_run=1)
    d = diagnose(ev)
    assert d.kind == "host_oom" and d.rank == 1
    assert "the kernel counted 1 OOM kill(s) during the run" in d.evidence


def test_host_oom_from_memory_peaks_against_ram() -> None:
    ev = Evidence(1, ends=ends((0, -15, 12.0), (1, -9, 10.0)), peak_rank_rss=int(21.5 * GiB), total_ram=23 * GiB,
                  min_available_ram=int(0.2 * GiB))
    d = diagnose(ev)
    assert d.kind == "host_oom"
    assert any("available host RAM fell to 0.2 GiB of 23.0 GiB" in e for e in d.evidence)


def test_sigkill_with_plenty_of_memory_is_not_called_oom() -> None:
    ev = Evidence(1, ends=ends((0, -15, 12.0), (1, -9, 10.0)), peak_rank_rss=2 * GiB, total_ram=64 * GiB,
                  min_available_ram=40 * GiB, oom_kills_during_run=0)
    d = diagnose(ev)
    assert d.kind == "killed" and d.rank == 1 and "SIGKILL" in d.summary


@pytest.mark.parametrize(("line", "kind"), [
    ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity "
     "of 79.15 GiB", "cuda_oom"),
    ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom"),
    ("[rank0]:[E1121 10:00:00.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600005 milliseconds before timing out.",
     "collective_timeout"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
     "for recv operation to complete", "collective_timeout"),
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use", "port_in_use"),
    ("[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
     "micro_batch_per_gpu * gradient_acc_step * world_size 16 != 4 * 1 * 1", "deepspeed_batch_size"),
    ("ModuleNotFoundError: No module named 'flash_attn'", "missing_module"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig", "config_error"),
    ("json.decoder.JSONDecodeError: Expecting ',' delimiter: line 3 column 5 (char 40)", "config_error"),
])
def test_log_messages_name_the_cause(line: str, kind: str) -> None:
    ev = Evidence(1, ends=ends((0, -15, 12.0), (1, 1, 10.0)),
                  log_tail=["step 10", "Traceback (most recent call last):", line, "[launch.py] exits with code 1"])
    d = diagnose(ev)
    assert d.kind == kind, d
    assert line.strip() in d.evidence
    assert d.summary.endswith(".") and "\n" not in d.summary


def test_rank_tag_on_the_message_wins_over_exit_order() -> None:
    ev = Evidence(1, ends=ends((0, 1, 10.0), (1, 1, 11.0)),
                  log_tail=["[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB"])
    assert diagnose(ev).rank == 1


def test_missing_module_names_it_and_how_to_install() -> None:
    d = diagnose(Evidence(1, log_tail=["ModuleNotFoundError: No module named 'flash_attn.ops'"]))
    assert d.summary == "The training Python has no module named 'flash_attn.ops'."
    assert "pip install flash_attn" in d.advice


def test_plain_exception_is_quoted() -> None:
    d = diagnose(Evidence(1, log_tail=["Traceback (most recent call last):", '  File "t.py", line 3',
                                       "ValueError: bad shape (3, 4)"]))
    assert d.kind == "exception" and d.summary == "The script raised ValueError: bad shape (3, 4)."


def test_exit_code_without_message() -> None:
    d = diagnose(Evidence(3, ends=[ProcessEnd(5, "launcher", None, 1.0, 3)], log_tail=["working", "done?"]))
    assert d.kind == "exit_code" and d.summary == "The run exited with code 3."


def test_launcher_killed_by_signal() -> None:
    d = diagnose(Evidence(-signal.SIGKILL, ends=[ProcessEnd(5, "launcher", None, 1.0, -9)]))
    assert d.kind == "killed" and d.summary == "The launcher was killed by SIGKILL."


def test_stopped_start_failed_lost_and_success() -> None:
    assert diagnose(Evidence(-2, stop_requested=True, stop_detail="gracefully (SIGINT)")).summary == \
        "Stopped on request gracefully (SIGINT)."
    assert diagnose(Evidence(None, start_error="No such file or directory: /x/python")).kind == "start_failed"
    assert diagnose(Evidence(None, supervisor_lost=True)).kind == "lost"
    ok = Evidence(0, ends=[ProcessEnd(1, "rank", 0, 1.0, 0), ProcessEnd(2, "launcher", None, 2.0, 0)])
    assert is_success(ok) and diagnose(ok).kind == "succeeded"



def test_a_requested_stop_is_told_as_the_users_stop_and_blames_no_rank() -> None:
    # The stop's signal reaches rank 0 first by chance: that is the stop at work, not rank 0 failing.
    requested = 1_700_000_000.0
    ev = Evidence(-2, ends=ends((0, -2, 10.0), (1, -2, 10.5)), stop_requested=True,
                  stop_detail="gracefully (SIGINT)", stop_requested_at=requested)
    d = diagnose(ev)
    when = time.strftime("%H:%M:%S", time.localtime(requested))
    assert d.kind == "stopped" and d.rank is None
    assert d.summary == f"Stopped on request gracefully (SIGINT), requested at {when}."
    assert not any("before the other ranks" in fact for fact in d.evidence), d.evidence
    assert any("after the stop request" in fact and "rank 0" in fact and "rank 1" in fact for fact in d.evidence)


def test_launcher_zero_with_a_failed_rank_is_not_success() -> None:
    # deepspeed's runner exits 0 when launch.py was killed by a signal; the rank's own status tells the truth.
    ev = Evidence(0, ends=[ProcessEnd(1, "rank", 1, 1.0, -9), ProcessEnd(2, "launcher", None, 2.0, 0)])
    assert not is_success(ev)
    assert diagnose(ev).kind == "killed"


def test_stall_threshold() -> None:
    assert stall_threshold([]) == 120.0
    assert stall_threshold([0.5, 0.6, 0.4]) == 120.0
    assert stall_threshold([30.0, 31.0, 29.0]) == 300.0
    assert stall_threshold([2.0], minimum_s=1.0) == 20.0


def test_unseen_rank_status_is_taken_from_the_launchers_log() -> None:
    unseen = [ProcessEnd(11, "rank", 1, 10.0, None), ProcessEnd(10, "rank", 0, 11.0, None),
              ProcessEnd(9, "launcher", None, 12.0, 1)]
    ds = diagnose(Evidence(1, ends=unseen, log_tail=[
        "[launch.py:259:sigkill_handler] ['python', '-u', 't.py', '--local_rank=1'] exits with return code = -9"]))
    assert ds.kind == "killed" and ds.rank == 1 and "SIGKILL" in ds.summary
    torchrun = diagnose(Evidence(1, ends=unseen, log_tail=["  exitcode  : -15 (pid: 10)", "  exitcode  : 7 (pid: 11)"]))
    assert torchrun.rank == 1 and torchrun.summary == "Rank 1 exited with code 7."


def test_torchruns_first_observed_failure_wins_over_a_sibling_seen_ending_first() -> None:
    # torchrun reaped rank 1 (exit 1) at once and then ended rank 0 (SIGTERM); the supervisor found rank 0's zombie
    # in the same scan that noticed rank 1 gone, so rank 0 looks first. torchrun's report says which failed first.
    seen = [ProcessEnd(10, "rank", 0, 10.0, -15), ProcessEnd(11, "rank", 1, 10.001, None),
            ProcessEnd(9, "launcher", None, 12.0, 1)]
    report = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "Failures:", "[1]:",
              "  rank      : 0 (local_rank: 0)", "  exitcode  : -15 (pid: 10)  (SIGTERM)",
              "Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-27_16:23:55",
              "  rank      : 1 (local_rank: 1)", "  exitcode  : 1 (pid: 11) ", "  error_file: <N/A>",
              "[rank1]: RuntimeError: boom on rank 1"]
    d = diagnose(Evidence(1, ends=seen, log_tail=report))
    assert d.rank == 1 and d.kind == "exception", d
    assert diagnose(Evidence(1, ends=seen, log_tail=report[:5])).rank == 0  # without the report: the order seen


def test_counters_are_ignored_when_the_kernel_log_shows_the_kill_was_not_ours() -> None:
    ev = Evidence(1, ends=ends((0, -15, 12.0), (1, -9, 10.0)), oom_kills_during_run=1, kernel_log_readable=True,
                  total_ram=64 * GiB, min_available_ram=30 * GiB)
    assert diagnose(ev).kind == "killed"


def test_an_error_line_cut_by_another_ranks_bar_redraw_is_still_read(tmp_path: Path) -> None:
    # What the CI log showed once: rank 1's OOM message, then rank 0's "\r" bar redraw before rank 1's newline
    # (`python -u` writes them separately). The tail must keep the message, or the run reads as a bare exit 1.
    log = tmp_path / "output.log"
    log.write_bytes(b"behave: rank 1 starting\r train:   2%|#| 4/200 [00:01<00:01, 20.00it/s]Traceback (most recent "
                    b"call last):\n  File \"train.py\", line 1, in <module>\ntorch.OutOfMemoryError: CUDA out of "
                    b"memory. Tried to allocate 20.00 MiB.\rtrain:   3%|#| 6/200 [00:01<00:01, 20.00it/s]\n"
                    b"[launch.py:259:sigkill_handler] ['python', 'b.py', '--local_rank=1'] exits with return code = 1\n")
    tail = log_tail(log)
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB." in tail
    d = diagnose(Evidence(1, ends=ends((1, 1, 10.0), (0, -15, 11.0)), log_tail=tail))
    assert d.kind == "cuda_oom" and d.rank == 1, d
