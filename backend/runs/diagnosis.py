"""Why a run ended the way it did, in one plain sentence with the evidence behind it.

Pure functions over an `Evidence` record collected by the supervisor (exit statuses of the launcher and of each
rank, the tail of the log, OOM-kill counters, memory high-water marks); nothing here touches the system, so every
rule is unit-tested with hand-made evidence.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ProcessEnd:
    """How one process of the run ended, as far as we could see."""

    pid: int
    role: str  # "launcher" | "rank" | "helper"
    rank: int | None
    t: float  # when we noticed (wall clock)
    returncode: int | None  # negative = killed by that signal; None = ended unseen (not our child, reaped by its parent)


@dataclass
class Evidence:
    launcher_returncode: int | None
    ends: list[ProcessEnd] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)
    stop_requested: bool = False
    stop_detail: str = ""  # "gracefully after SIGINT" | "after SIGTERM" | "with SIGKILL"
    oom_kills_during_run: int | None = None  # delta of the kernel/cgroup counters; None = not readable
    kernel_oom_pids: dict[int, str] = field(default_factory=dict)  # kmsg lines naming our pids
    kernel_log_readable: bool = False  # then a kill of ours would be in kernel_oom_pids; counters are not needed
    peak_rank_rss: int | None = None  # bytes, all ranks together, highest seen
    total_ram: int | None = None
    min_available_ram: int | None = None
    start_error: str | None = None  # the launcher could not be started at all
    supervisor_lost: bool = False
    # What the run was launched with, so advice fits it (backend/runs/settings.py): "port_fixed" (bool: the user
    # chose the port), "train_batch_size" (the DeepSpeed config's value, "auto" included).
    settings: dict[str, Any] = field(default_factory=dict)
    # Where the ranks were when the run stalled, if it was still stalled at its end (backend/runs/stacks.py).
    stall_stacks: str = ""


@dataclass(frozen=True)
class Diagnosis:
    summary: str  # one plain sentence
    kind: str  # see KINDS
    rank: int | None = None
    evidence: list[str] = field(default_factory=list)
    advice: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


KINDS = (
    "succeeded", "stopped", "start_failed", "lost", "host_oom", "cuda_oom", "collective_timeout", "port_in_use",
    "missing_module", "deepspeed_batch_size", "config_error", "exception", "killed", "exit_code",
)

_CUDA_OOM = re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"
                       r"|HIP out of memory|XPU out of memory")
_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|NCCL (?:communicator|operation).*timed? ?out"
                      r"|ProcessGroupNCCL.*[Tt]imeout|\[Gloo\].*[Tt]imed? ?out|gloo.*Timed out|DistStoreError.*[Tt]imeout"
                      r"|Timed out (?:after|waiting).*(?:store|rendezvous|clients)|Socket Timeout|NCCL_TIMEOUT"
                      r"|wait timeout after \d+ms")
_PORT = re.compile(r"EADDRINUSE|[Aa]ddress already in use|server socket has failed to (?:listen|bind)"
                   r"|errno: 98")
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_DS_BATCH = re.compile(r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size"
                       r"[^\n]*")
_CONFIG = re.compile(r"(?:pydantic(?:_core)?\.)?(?:_core\.)?ValidationError: \d+ validation errors? for \w+"
                     r"|\d+ validation errors? for DeepSpeed\w*"
                     r"|json\.decoder\.JSONDecodeError: .*|yaml\.\w+\.\w+Error: .*"
                     r"|(?:ValueError|KeyError|TypeError|AssertionError): .*(?:config|deepspeed_config|zero_optimization"
                     r"|accelerate).*")
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]: )?(?P<name>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit))"
                        r"(?::\s*(?P<message>.*))?$")


def _find(pattern: re.Pattern[str], lines: list[str]) -> tuple[int, str] | None:
    """The last line matching (index, line)."""
    for index in range(len(lines) - 1, -1, -1):
        if pattern.search(lines[index]):
            return index, lines[index]
    return None


def _rank_of_line(line: str) -> int | None:
    match = re.match(r"^\[rank(\d+)\]:", line)
    return int(match.group(1)) if match else None


def _ended(code: int | None) -> str:
    if code is None:
        return "ended (exit status not seen)"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def first_failure(ends: list[ProcessEnd]) -> ProcessEnd | None:
    """The rank that ended badly first (else the first rank that ended at all before the launcher did)."""
    ranks = sorted((e for e in ends if e.role == "rank"), key=lambda e: e.t)
    for end in ranks:
        if end.returncode not in (0, None):
            return end
    launcher_t = next((e.t for e in ends if e.role == "launcher"), None)
    for end in ranks:
        if end.returncode is None and (launcher_t is None or end.t <= launcher_t):
            return end
    return None


_DS_RETURN_CODE = re.compile(r"exits with return code = (-?\d+)")
_TORCHRUN_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)")


def fill_unseen_codes(ends: list[ProcessEnd], lines: list[str]) -> list[ProcessEnd]:
    """Ranks whose exit status we could not see, completed from what their launcher logged.

    torchrun names the pid with its exit code; DeepSpeed's launch.py logs only the code of the first process that
    failed (after which it ends the others), so that code goes to the rank seen ending first.
    """
    by_pid = {int(m.group(2)): int(m.group(1)) for line in lines for m in _TORCHRUN_EXIT.finditer(line)}
    ds_codes = [int(m.group(1)) for line in lines for m in _DS_RETURN_CODE.finditer(line)]
    ranks = sorted((e for e in ends if e.role == "rank"), key=lambda e: e.t)
    first_unseen = ranks[0].pid if ranks and ranks[0].returncode is None else None
    filled = []
    for end in ends:
        if end.role == "rank" and end.returncode is None:
            if end.pid in by_pid:
                end = replace(end, returncode=by_pid[end.pid])
            elif end.pid == first_unseen and ds_codes and ds_codes[-1] != 0:
                end = replace(end, returncode=ds_codes[-1])
        filled.append(end)
    return filled


def diagnose(ev: Evidence) -> Diagnosis:
    """The most specific explanation the evidence supports, most telling causes first."""
    lines = ev.log_tail
    facts: list[str] = []
    ev = replace(ev, ends=fill_unseen_codes(ev.ends, lines))
    first = first_failure(ev.ends)
    if first is not None:
        facts.append(f"rank {first.rank} (pid {first.pid}) {_ended(first.returncode)} at "
                     f"{time.strftime('%H:%M:%S', time.localtime(first.t))}, before the other ranks")
    if ev.launcher_returncode is not None:
        facts.append(f"the launcher {_ended(ev.launcher_returncode)}")
    rank = first.rank if first is not None else None
    if ev.stall_stacks:
        facts.append(f"stalled; the ranks' stacks then: {ev.stall_stacks}")

    if ev.start_error:
        return Diagnosis(f"The launcher could not be started: {ev.start_error}.", "start_failed",
                         evidence=[ev.start_error], advice="Check the Python interpreter and the launcher command.")
    if ev.supervisor_lost:
        return Diagnosis("The run's supervisor process died, so the run was ended and marked lost.", "lost",
                         evidence=facts)
    if ev.stop_requested:
        detail = f" {ev.stop_detail}" if ev.stop_detail else ""
        hung = f" while stalled: {ev.stall_stacks}" if ev.stall_stacks else ""
        return Diagnosis(f"Stopped on request{detail}{hung}.", "stopped", evidence=facts)

    killed = [e for e in ev.ends if e.returncode == -signal.SIGKILL]
    oom_pids = [e for e in ev.ends if e.pid in ev.kernel_oom_pids]
    if oom_pids:
        end = oom_pids[0]
        return Diagnosis(
            f"Rank {end.rank} was killed by the kernel's out-of-memory killer: the host ran out of RAM.", "host_oom",
            rank=end.rank, evidence=[ev.kernel_oom_pids[end.pid], *facts],
            advice="Offloading (optimizer/parameters to CPU) uses host RAM: offload less, lower the batch size, "
                   "use fewer ranks per host, or add RAM/swap.")
    low_memory = (ev.min_available_ram is not None and ev.total_ram
                  and ev.min_available_ram < 0.05 * ev.total_ram)
    near_total = (ev.peak_rank_rss is not None and ev.total_ram and ev.peak_rank_rss > 0.85 * ev.total_ram)
    sigkill_rank = (first is not None and first.returncode == -signal.SIGKILL) or bool(killed) or any(
        re.search(r"return code = -9\b|exit ?code:? -9\b|Signal 9 \(SIGKILL\)", line) for line in lines[-50:])
    # Host-wide counters also count other programs' OOM kills: only used when the kernel log cannot tell.
    counted = bool(ev.oom_kills_during_run) and not ev.kernel_log_readable
    if sigkill_rank and (counted or low_memory or near_total):
        evidence = list(facts)
        if counted:
            evidence.append(f"the kernel counted {ev.oom_kills_during_run} OOM kill(s) during the run")
        if low_memory and ev.min_available_ram is not None and ev.total_ram:
            evidence.append(f"available host RAM fell to {_gib(ev.min_available_ram)} of {_gib(ev.total_ram)}")
        if near_total and ev.peak_rank_rss is not None and ev.total_ram:
            evidence.append(f"the ranks used up to {_gib(ev.peak_rank_rss)} of {_gib(ev.total_ram)} RAM together")
        who = f"Rank {rank}" if rank is not None else "A rank"
        return Diagnosis(f"{who} was killed (SIGKILL) when the host ran out of memory (out-of-memory kill).",
                         "host_oom", rank=rank, evidence=evidence,
                         advice="Offloading uses host RAM: offload less, lower the batch size, use fewer ranks, "
                                "or add RAM/swap.")

    for kind, pattern, summary, advice in (
        ("cuda_oom", _CUDA_OOM, "ran out of GPU memory (CUDA out of memory)",
         "Lower the micro-batch size, enable activation checkpointing, or use a higher ZeRO stage / offload."),
        ("deepspeed_batch_size", _DS_BATCH,
         "stopped on DeepSpeed's batch-size check: train_batch_size must equal micro-batch x gradient accumulation"
         " x world size", "Fix train_batch_size (or set it to \"auto\" with the HF Trainer) for this world size."),
        ("port_in_use", _PORT, "could not open its rendezvous port: the address is already in use",
         "Another job holds the port: leave the port unset so traindeck picks a free one, or stop the other job."),
        ("collective_timeout", _TIMEOUT, "timed out in a collective operation (NCCL/gloo): another rank stopped "
         "answering", "Look at the rank that ended first or hung; raise the timeout only if a step is truly slow."),
    ):
        hit = _find(pattern, lines)
        if hit:
            line_rank = _rank_of_line(hit[1])
            who_rank = line_rank if line_rank is not None else rank
            who = f"Rank {who_rank}" if who_rank is not None else "The run"
            return Diagnosis(f"{who} {summary}.", kind, rank=who_rank, evidence=[hit[1].strip(), *facts],
                             advice=_fitting_advice(kind, advice, ev.settings))

    missing = _find(_MISSING, lines)
    if missing:
        match = _MISSING.search(missing[1])
        assert match is not None
        name = match.group(1)
        return Diagnosis(f"The training Python has no module named '{name}'.", "missing_module",
                         rank=_rank_of_line(missing[1]), evidence=[missing[1].strip(), *facts],
                         advice=f"Install it into the training interpreter (python -m pip install "
                                f"{name.split('.')[0]}) or choose another one with --python.")
    config = _find(_CONFIG, lines)
    if config:
        return Diagnosis("The run stopped on a configuration error.", "config_error", rank=_rank_of_line(config[1]),
                         evidence=[config[1].strip(), *_following(lines, config[0]), *facts],
                         advice="Check the config with `traindeck config check`.")

    exception = _last_exception(lines)
    if first is not None and first.returncode is not None and first.returncode < 0:
        how = _ended(first.returncode)
        return Diagnosis(f"Rank {first.rank} {how}; the other ranks were ended after it.", "killed", rank=first.rank,
                         evidence=facts + ([exception] if exception else []),
                         advice="Something outside the job sent the signal (a user, a scheduler, the OOM killer "
                                "when its log is not readable)." if first.returncode == -signal.SIGKILL else "")
    if exception:
        who_rank = _rank_of_line(exception)
        if who_rank is None:
            who_rank = rank
        who = f"Rank {who_rank}" if who_rank is not None else "The script"
        text = re.sub(r"^\[rank\d+\]: ", "", exception)
        return Diagnosis(f"{who} raised {text}".rstrip(".") + ".", "exception", rank=who_rank,
                         evidence=[exception, *facts])
    code = ev.launcher_returncode
    if first is not None and first.returncode not in (None, 0):
        return Diagnosis(f"Rank {first.rank} {_ended(first.returncode)}.", "exit_code", rank=first.rank,
                         evidence=facts)
    if code is not None and code < 0:
        return Diagnosis(f"The launcher {_ended(code)}.", "killed", evidence=facts)
    if code not in (None, 0):
        return Diagnosis(f"The run {_ended(code)}.", "exit_code", evidence=facts)
    if first is not None:
        return Diagnosis(f"Rank {first.rank} ended before the others without a visible error.", "exit_code",
                         rank=first.rank, evidence=facts)
    return Diagnosis("The run finished successfully.", "succeeded", evidence=facts)


def _fitting_advice(kind: str, advice: str, settings: dict[str, Any]) -> str:
    """The advice for `kind`, worded for what the run was launched with: never "set it to auto" for a value that
    already is "auto", never "leave the port unset" when traindeck picked it."""
    if kind == "deepspeed_batch_size" and settings.get("train_batch_size") == "auto":
        return ("train_batch_size is \"auto\", which only the HF Trainer / accelerate fill in; DeepSpeed dropped it to "
                "its default here. Set it to micro-batch x gradient accumulation x world size, or remove it.")
    if kind == "port_in_use" and settings.get("port_fixed") is False:
        return ("traindeck picked a free port, but another process took it before the launcher listened on it "
                "(or a second rendezvous of the job uses it): start the run again.")
    return advice


def _following(lines: list[str], index: int, count: int = 3) -> list[str]:
    return [line.strip() for line in lines[index + 1:index + 1 + count] if line.strip()]


def _last_exception(lines: list[str]) -> str | None:
    """The last `SomethingError: message` line of a traceback, skipping launcher noise after it."""
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index].strip()
        match = _EXCEPTION.match(line)
        if match and match["name"] not in ("SystemExit",) and "subprocess.CalledProcessError" not in line:
            return line
    return None


def is_success(ev: Evidence) -> bool:
    """True when the launcher and every rank we saw end exited with 0 and nobody asked to stop."""
    if ev.stop_requested or ev.start_error or ev.supervisor_lost:
        return False
    if ev.launcher_returncode != 0:
        return False
    return all(e.returncode in (0, None) for e in ev.ends if e.role == "rank")


def stall_threshold(step_times: list[float], minimum_s: float = 120.0, factor: float = 10.0) -> float:
    """How long output and progress may stop before the run counts as stalled: max(minimum, factor x median step)."""
    if not step_times:
        return minimum_s
    ordered = sorted(step_times)
    median = ordered[len(ordered) // 2]
    return max(minimum_s, factor * median)
