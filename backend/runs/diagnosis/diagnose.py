"""Why a run ended the way it did, in one plain sentence with the evidence behind it.

Pure functions over an `Evidence` record collected by the supervisor (exit statuses of the launcher and of each
rank, the tail of the log, OOM-kill counters, the ranks' cgroup memory limit, memory high-water marks); nothing
here touches the system, so every rule is unit-tested with hand-made evidence.

First failure wins: the run is explained by the rank that ended first and by that rank's own output (its lines
carry "[rankN]: " tags); what the other ranks and the launcher said after it (a peer lost, a collective timed
out, SIGTERM from the launcher) is listed as follow-ons, never as the cause. A launcher that logs receiving a
signal nobody asked traindeck to send (no stop requested) explains the run itself: it ended its ranks, so none of
them is blamed, and the run is no success whatever the launcher's exit code.

One decision table (which rank, which cause, which follow-ons) read top to bottom; the
failure patterns (failures.py), evidence (evidence.py) and kinds (kinds.py) live in modules of their own.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from traindeck.backend.core import format_bytes
from traindeck.backend.logparse.op_build import op_display_name
from traindeck.backend.runs.diagnosis import failures, launcher_reports
from traindeck.backend.runs.diagnosis.cgroups import MemoryLimit
from traindeck.backend.runs.diagnosis.collectives import divergence_in
from traindeck.backend.runs.diagnosis.failures import ErrorLine
from traindeck.backend.runs.diagnosis.kinds import KINDS, DiagnosisKind, MemoryKind  # noqa: F401  (KINDS: re-exported)


@dataclass(frozen=True)
class ProcessEnd:
    """How one process of the run ended, as far as we could see."""

    pid: int
    role: str  # "launcher" | "rank" | "helper"
    rank: int | None
    t: float  # when we noticed (wall clock)
    returncode: int | None  # negative = killed by that signal; None = ended unseen (not our child, reaped by its parent)
    reported: str = ""  # not seen ending: the launcher that reported it in the log ("torchrun", ...)


@dataclass
class Evidence:
    launcher_returncode: int | None
    ends: list[ProcessEnd] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)
    stop_requested: bool = False
    stop_detail: str = ""  # "gracefully after SIGINT" | "after SIGTERM" | "with SIGKILL"
    stop_requested_at: float | None = None  # wall clock of the stop request, where the request recorded it
    stop_reason: str = ""  # why the stop was asked for, where not by a user ("measured by trial ID (...)")
    oom_kills_during_run: int | None = None  # delta of the kernel/cgroup counters; None = not readable
    kernel_oom_pids: dict[int, str] = field(default_factory=dict)  # kmsg lines naming our pids
    kernel_log_readable: bool = False  # then a kill of ours would be in kernel_oom_pids; counters are not needed
    peak_rank_rss: int | None = None  # bytes, all ranks together, highest seen
    total_ram: int | None = None
    min_available_ram: int | None = None
    start_error: str | None = None  # the launcher could not be started at all
    supervisor_lost: bool = False
    memory_limit: MemoryLimit | None = None  # the ranks' cgroup and its limit, where readable
    cgroup_oom_kills_during_run: int | None = None  # delta of that cgroup's own OOM-kill counter
    # What the run was launched with, so advice fits it (backend/runs/record/launch_settings.py): "port_fixed" (bool: the user
    # chose the port), "launcher" (its name), "train_batch_size" (the DeepSpeed config's value, "auto" included).
    settings: dict[str, Any] = field(default_factory=dict)
    # Where the ranks were when the run stalled, if it was still stalled at its end (backend/runs/diagnosis/stacks.py).
    stall_stacks: str = ""
    # A batch scheduler's account of the job's end (scheduler_end.py; Slurm runs): evidence, or a whole diagnosis.
    scheduler_end: dict[str, Any] = field(default_factory=dict)
    # Free bytes now of the disks the log says were full ({path named in the error: bytes}; evidence.free_space).
    free_space: dict[str, int] = field(default_factory=dict)
    # Nothing but the log is known (`traindeck diagnose`): no process was seen, no memory sampled.
    log_only: bool = False
    # XID errors on the run's GPUs while it ran ([{"gpu", "xid", "t", "source"[, "text"]}]; "gpu" an index, or a bus
    # id the kernel log names that NVML did not list): from NVML's event set or the driver's kernel-log lines.
    gpu_xids: list[dict[str, Any]] = field(default_factory=list)


def evidence_to_json(ev: Evidence) -> dict[str, Any]:
    """The evidence as the supervisor keeps it next to the log (the log tail left out: output.log has it all)."""
    data = asdict(ev)
    data.pop("log_tail", None)
    data["kernel_oom_pids"] = {str(pid): text for pid, text in ev.kernel_oom_pids.items()}
    return data


def evidence_from_json(data: dict[str, Any], log_tail: list[str]) -> Evidence:
    """Evidence written by evidence_to_json, with the log tail read again (replays of recorded runs)."""
    fields = dict(data)
    fields["ends"] = [ProcessEnd(**end) for end in fields.get("ends", [])]
    fields["kernel_oom_pids"] = {int(pid): text for pid, text in (fields.get("kernel_oom_pids") or {}).items()}
    if fields.get("memory_limit") is not None:
        fields["memory_limit"] = MemoryLimit(**fields["memory_limit"])
    return Evidence(**fields, log_tail=log_tail)


@dataclass(frozen=True)
class Diagnosis:
    summary: str  # one plain sentence
    kind: DiagnosisKind
    rank: int | None = None
    evidence: list[str] = field(default_factory=list)
    advice: str = ""
    follow_ons: list[str] = field(default_factory=list)  # what failed after the cause, because of it
    memory: MemoryKind = ""  # which memory ran out: "host" (RAM), "cgroup" (the run's limit), "cuda"; "" = not memory
    node: str = ""  # multi-node runs: the host the blamed rank ran on (backend/runs/supervisor/node_diagnosis.py)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# Which memory ran out (the "memory" field), in words for `runs show` and the Runs page.
MEMORY_WORDS = {"host": "host RAM", "cgroup": "the run's cgroup memory limit", "cuda": "GPU memory"}



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


def first_failure(ends: list[ProcessEnd], root_pid: int | None = None) -> ProcessEnd | None:
    """The rank that ended badly first (else the first rank that ended at all before the launcher did).

    `root_pid`: the rank the launcher itself saw failing first (torchrun's root cause). The launcher reaps its
    ranks, so one it reaped at once is noticed gone only in the scan that finds a sibling it then ended: that
    sibling would look first."""
    ranks = sorted((e for e in ends if e.role == "rank"), key=lambda e: e.t)
    root = next((e for e in ranks if e.pid == root_pid and e.returncode not in (0, None)), None)
    if root is not None:
        return root
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


def with_reported_ends(ends: list[ProcessEnd], reports: list[launcher_reports.RankReport]) -> list[ProcessEnd]:
    """The ranks the launchers' reports in the log name (launcher_reports.py) and the supervisor did not see end,
    added as reported ends: the rank named as the first failure first. A launcher that relays a rank's death and
    exits 1 is then not the end that explains the run."""
    if not reports:
        return ends
    seen = {e.rank for e in ends if e.role == "rank" and e.returncode is not None}
    first = launcher_reports.first_reported(reports)
    ordered = ([first] if first is not None else []) + [r for r in reports if r is not first]
    times = [e.t for e in ends]
    start = (min(times) - 1.0) if times else 0.0
    added: list[ProcessEnd] = []
    for i, report in enumerate(ordered):
        if report.rank in seen or any(e.rank == report.rank for e in added):
            continue
        added.append(ProcessEnd(report.pid or 0, "rank", report.rank, start + i * 1e-3, report.exitcode,
                                reported=report.launcher))
    unseen = {e.rank for e in added}
    return [e for e in ends if not (e.role == "rank" and e.rank in unseen and e.returncode is None)] + added


@dataclass(frozen=True)
class _Blame:
    rank: int | None
    error: ErrorLine | None  # the cause in that rank's own lines (None: it printed none)
    tagged: bool  # the error line carried the rank's tag
    note: str = ""  # why the rank that ended first is not the one blamed
    witness: tuple[int, ErrorLine] | None = None  # a later rank's consequence, when the blamed one printed nothing


def _ordered_ranks(ends: list[ProcessEnd], own: dict[int, list[str]]) -> list[int]:
    """Ranks in the order they ended (bad ends first among equals), then those never seen ending."""
    seen: list[int] = []
    for end in sorted((e for e in ends if e.role == "rank" and e.rank is not None), key=lambda e: e.t):
        assert end.rank is not None
        if end.rank not in seen:
            seen.append(end.rank)
    return seen + sorted(r for r in own if r not in seen)


def _blame(first: ProcessEnd | None, ends: list[ProcessEnd], lines: list[str],
           own: dict[int, list[str]], positions: dict[int, list[int]]) -> _Blame:
    if not own:  # no rank tags (one process, or tags off): the whole log speaks for the run
        rank = first.rank if first is not None else None
        return _Blame(rank, failures.cause(lines) or failures.consequence(lines), False)
    if first is not None and first.rank is not None:
        error = failures.cause(own.get(first.rank, []))
        if error is not None:
            return _Blame(first.rank, error, True)
        # The first rank printed no cause. A signal (SIGKILL, ...) ended it: that is the cause, whatever the others
        # printed after. An exit code without a message: the rank whose own error says why is the better witness.
        if first.returncode is None or first.returncode >= 0:
            for rank in _ordered_ranks(ends, own):
                other = failures.cause(own.get(rank, []))
                if rank != first.rank and other is not None:
                    return _Blame(rank, other, True, f"rank {first.rank} ended first ({_ended(first.returncode)}) "
                                                     "without printing an error of its own")
        mine = failures.consequence(own.get(first.rank, []))
        witness = None
        if mine is None:
            witness = next(((r, e) for r in _ordered_ranks(ends, own)
                            if r != first.rank and (e := failures.consequence(own.get(r, []))) is not None), None)
        return _Blame(first.rank, mine, True, witness=witness)
    # Nobody seen ending: the earliest cause in the log, else the earliest consequence.
    causes = [(positions[r][e.index], r, e) for r in own if (e := failures.cause(own[r])) is not None]
    if not causes:
        causes = [(positions[r][e.index], r, e) for r in own if (e := failures.consequence(own[r])) is not None]
    if causes:
        _pos, rank, error = min(causes, key=lambda c: c[0])
        return _Blame(rank, error, True)
    untagged = [line for line in lines if failures.rank_of_line(line) is None]
    return _Blame(None, failures.cause(untagged) or failures.consequence(untagged), False)


def _split(lines: list[str]) -> tuple[dict[int, list[str]], dict[int, list[int]]]:
    own: dict[int, list[str]] = {}
    positions: dict[int, list[int]] = {}
    for index, line in enumerate(lines):
        rank = failures.rank_of_line(line)
        if rank is not None:
            own.setdefault(rank, []).append(re.sub(r"^\[rank\d+\]:\s?", "", line))
            positions.setdefault(rank, []).append(index)
    return own, positions


def _follow_ons(blamed: int | None, ends: list[ProcessEnd], lines: list[str], own: dict[int, list[str]]) -> list[str]:
    """What the other ranks and the launcher did after the blamed rank failed: consequences, not causes."""
    items: list[str] = []
    end_of: dict[int | None, ProcessEnd] = {}
    for end in sorted((e for e in ends if e.role == "rank" and e.rank is not None), key=lambda e: e.t):
        end_of.setdefault(end.rank, end)
    blamed_end = end_of.get(blamed)
    for rank in _ordered_ranks(ends, own):
        if rank == blamed:
            continue
        said = failures.consequence(own.get(rank, [])) or failures.cause(own.get(rank, []))
        ended = end_of.get(rank)
        how = ""
        if ended is not None and ended.returncode not in (0, None):
            how = _ended(ended.returncode)
            if blamed_end is not None and ended.t >= blamed_end.t and not (ended.reported or blamed_end.reported):
                how += f" {ended.t - blamed_end.t:.1f} s after rank {blamed} ended"
            if ended.returncode in (-signal.SIGTERM, -signal.SIGKILL) and said is None:
                how += " (the launcher ends the other ranks when one fails)"
        if said is not None:
            items.append(f"rank {rank}: {said.text}" + (f" ({how})" if how else ""))
        elif how:
            items.append(f"rank {rank} {how}")
    if own:  # the launcher's own summary of the failure (untagged lines)
        untagged = [line for line in lines if failures.rank_of_line(line) is None]
        summary = failures.consequence(untagged)
        if summary is not None:
            items.append(f"launcher: {summary.text}")
    return items


def _silent_survivors(rank: int | None, ends: list[ProcessEnd], own: dict[int, list[str]]) -> list[int]:
    """Ranks that outlived `rank` and printed no error of their own: after a collective timeout, the suspects."""
    mine = next((e for e in sorted(ends, key=lambda e: e.t) if e.role == "rank" and e.rank == rank), None)
    if mine is None or not own:
        return []
    return sorted({e.rank for e in ends if e.role == "rank" and e.rank is not None and e.rank != rank
                   and e.t > mine.t and failures.cause(own.get(e.rank, [])) is None
                   and failures.consequence(own.get(e.rank, [])) is None})


def _who(rank: int | None, default: str = "The run") -> str:
    return f"Rank {rank}" if rank is not None else default


def _limit_text(limit: MemoryLimit) -> str:
    assert limit.limit_bytes is not None
    return f"{_gib(limit.limit_bytes)}, set by {limit.owner}"


def _memory_kill(ev: Evidence, blame: _Blame, first: ProcessEnd | None, facts: list[str],
                 follow_ons: list[str]) -> Diagnosis | None:
    """An OOM kill: named by the kernel log, or a SIGKILL with counters or memory peaks pointing at memory. Tells the
    run's cgroup limit from the host's RAM."""
    limit = ev.memory_limit if ev.memory_limit is not None and ev.memory_limit.limit_bytes else None
    oom_pids = [e for e in sorted(ev.ends, key=lambda e: e.t) if e.pid in ev.kernel_oom_pids]
    blamed_end = next((e for e in sorted(ev.ends, key=lambda e: e.t) if e.role == "rank" and e.rank == blame.rank),
                      None)
    if oom_pids and blame.error is not None and not blame.error.consequence and blame.rank != oom_pids[0].rank \
            and blamed_end is not None and blamed_end.t < oom_pids[0].t:
        # Another rank had already failed by itself: the later OOM kill is one more thing that went wrong after.
        follow_ons.append(f"rank {oom_pids[0].rank}: {ev.kernel_oom_pids[oom_pids[0].pid]}")
        return None
    if oom_pids:
        end = oom_pids[0]
        message = ev.kernel_oom_pids[end.pid]
        in_cgroup = "Memory cgroup out of memory" in message or "oom_memcg=" in message
        return _oom(end.rank, in_cgroup, limit, [message, *facts], follow_ons, by_kernel=True)
    sigkill = (first is not None and first.returncode == -signal.SIGKILL) or any(
        e.returncode == -signal.SIGKILL for e in ev.ends) or any(
        re.search(r"return code = -9\b|exit ?code:? -9\b|Signal 9 \(SIGKILL\)", line) for line in ev.log_tail[-50:])
    if not sigkill or (blame.error is not None and not blame.error.consequence):
        return None
    evidence = list(facts)
    cgroup_counted = bool(ev.cgroup_oom_kills_during_run) and not ev.kernel_log_readable
    # Host-wide counters also count other programs' OOM kills: only used when the kernel log cannot tell.
    counted = bool(ev.oom_kills_during_run) and not ev.kernel_log_readable
    near_limit = (limit is not None and limit.limit_bytes and ev.peak_rank_rss is not None
                  and ev.peak_rank_rss > 0.85 * limit.limit_bytes)
    if limit is not None and (cgroup_counted or near_limit):
        if cgroup_counted:
            evidence.append(f"the run's cgroup counted {ev.cgroup_oom_kills_during_run} OOM kill(s) during the run")
        if near_limit and ev.peak_rank_rss is not None and limit.limit_bytes:
            evidence.append(f"the ranks used up to {_gib(ev.peak_rank_rss)} of the {_gib(limit.limit_bytes)} limit")
        return _oom(blame.rank, True, limit, evidence, follow_ons, by_kernel=False)
    low_memory = (ev.min_available_ram is not None and ev.total_ram
                  and ev.min_available_ram < 0.05 * ev.total_ram)
    near_total = (ev.peak_rank_rss is not None and ev.total_ram and ev.peak_rank_rss > 0.85 * ev.total_ram)
    if not (counted or low_memory or near_total):
        return None
    if counted:
        evidence.append(f"the kernel counted {ev.oom_kills_during_run} OOM kill(s) during the run")
    if low_memory and ev.min_available_ram is not None and ev.total_ram:
        evidence.append(f"available host RAM fell to {_gib(ev.min_available_ram)} of {_gib(ev.total_ram)}")
    if near_total and ev.peak_rank_rss is not None and ev.total_ram:
        evidence.append(f"the ranks used up to {_gib(ev.peak_rank_rss)} of {_gib(ev.total_ram)} RAM together")
    return _oom(blame.rank, False, limit, evidence, follow_ons, by_kernel=False)


def _oom(rank: int | None, in_cgroup: bool, limit: MemoryLimit | None, evidence: list[str], follow_ons: list[str],
         by_kernel: bool) -> Diagnosis:
    who = _who(rank, "A rank")
    if in_cgroup:
        where = f" ({_limit_text(limit)})" if limit is not None else ""
        if limit is not None:
            evidence.append(f"the run's cgroup {limit.cgroup} is limited to {_limit_text(limit)}")
        killer = "the kernel's out-of-memory killer" if by_kernel else "SIGKILL"
        return Diagnosis(
            f"{who} was killed by {killer} at the run's memory limit{where}, not because the host ran out of RAM.",
            "cgroup_oom", rank=rank, evidence=evidence, follow_ons=follow_ons, memory="cgroup",
            advice="Raise the memory limit: ask the scheduler for more (Slurm --mem / --mem-per-cpu), give the "
                   "container more (--memory), or raise the unit's MemoryMax=; or make the job fit it: offload less, "
                   "lower the batch size, use fewer ranks.")
    if by_kernel:
        summary = f"{who} was killed by the kernel's out-of-memory killer: the host ran out of RAM."
    else:
        summary = f"{who} was killed (SIGKILL) when the host ran out of memory (out-of-memory kill)."
    return Diagnosis(summary, "host_oom", rank=rank, evidence=evidence, follow_ons=follow_ons, memory="host",
                     advice="Offloading (optimizer/parameters to CPU) uses host RAM: offload less, lower the batch "
                            "size, use fewer ranks per host, or add RAM/swap.")


# What NVIDIA's XID catalogue says the common ones mean (docs.nvidia.com/deploy/xid-errors).
XID_MEANINGS = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "the GPU stopped processing",
    48: "double-bit ECC error", 61: "internal micro-controller breakpoint", 62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping", 64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error", 79: "the GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}
_XID_ECC = {48, 63, 64, 92, 94, 95}


def diagnose(ev: Evidence) -> Diagnosis:
    """The most specific explanation the evidence supports for the rank that failed first; a GPU's XID error
    during a run that did not end well is said with it (the hardware or its driver failed under the run)."""
    made = _diagnose(ev)
    if not ev.gpu_xids or made.kind in ("succeeded", "stopped"):
        return made
    said = [f"GPU {x['gpu']} reported XID {x['xid']}" + (f" ({XID_MEANINGS[x['xid']]})" if x['xid'] in XID_MEANINGS
                                                          else "") for x in ev.gpu_xids]
    lines = [f"{text} at {time.strftime('%H:%M:%S', time.localtime(x['t']))}"
             + (f" (kernel log: {x['text']})" if x.get("text") else "")
             for text, x in zip(said, ev.gpu_xids, strict=True)]
    xids = {int(x["xid"]) for x in ev.gpu_xids}
    if 79 in xids:
        advice = ("The GPU fell off the bus: check its power and seating, and the kernel log (dmesg) for its Xid "
                  "lines; it is back only after a reboot.")
    elif xids & _XID_ECC:
        advice = ("The GPU's memory reported errors: `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` shows them; "
                  "a pending row remap or page retirement takes effect after a GPU reset (nvidia-smi -r) or reboot.")
    else:
        advice = "Look the XID up in NVIDIA's XID catalogue and read the kernel log (dmesg) around that time."
    return replace(made, summary=made.summary.rstrip(".") + f"; {'; '.join(said)} during the run.",
                   evidence=[*lines, *made.evidence], advice=f"{advice} {made.advice}".strip())


def _diagnose(ev: Evidence) -> Diagnosis:
    lines = ev.log_tail
    facts: list[str] = []
    reports = launcher_reports.rank_reports(lines)
    ev = replace(ev, ends=with_reported_ends(fill_unseen_codes(ev.ends, lines), reports))
    root = next((r for r in reports if r.root), None)  # the rank torchrun saw fail first
    first = first_failure(ev.ends, root.pid if root is not None else None)
    signalled = signalled_from_outside(ev)
    if ev.stop_requested or signalled is not None:
        # The stop's signals reach the ranks in no set order: which one ended first says nothing about a cause.
        ranks = sorted((e for e in ev.ends if e.role == "rank" and e.rank is not None), key=lambda e: e.rank or 0)
        after = "the stop request" if ev.stop_requested else "the launcher's signal"
        if ranks:
            facts.append(f"after {after}: " + "; ".join(f"rank {e.rank} {_ended(e.returncode)}" for e in ranks))
    elif first is not None and first.reported:
        pid = f" (pid {first.pid})" if first.pid else ""
        facts.append(f"{first.reported} reported rank {first.rank}{pid} as the first failure: it "
                     f"{_ended(first.returncode)}")
    elif first is not None:
        facts.append(f"rank {first.rank} (pid {first.pid}) {_ended(first.returncode)} at "
                     f"{time.strftime('%H:%M:%S', time.localtime(first.t))}, before the other ranks")
    if ev.launcher_returncode is not None:
        facts.append(f"the launcher {_ended(ev.launcher_returncode)}")
    if ev.stall_stacks:
        facts.append(f"stalled; the ranks' stacks then: {ev.stall_stacks}")

    facts[:0] = [str(line) for line in ev.scheduler_end.get("evidence") or []]
    if ev.start_error:
        return Diagnosis(f"The launcher could not be started: {ev.start_error}.", "start_failed",
                         evidence=[ev.start_error], advice="Check the Python interpreter and the launcher command.")
    if ev.supervisor_lost:
        return Diagnosis("The run's supervisor process died, so the run was ended and marked lost.", "lost",
                         evidence=facts)
    if ev.stop_requested:
        detail = f" {ev.stop_detail}" if ev.stop_detail else ""
        hung = f" while stalled: {ev.stall_stacks}" if ev.stall_stacks else ""
        when = f", requested at {time.strftime('%H:%M:%S', time.localtime(ev.stop_requested_at))}" \
            if ev.stop_requested_at is not None else ""
        hung = "," + hung if hung and when else hung
        if ev.stop_reason:  # stopped by traindeck for a reason of its own (a trial's measured candidate): no failure
            reason = ev.stop_reason[:1].upper() + ev.stop_reason[1:]
            return Diagnosis(f"{reason}; stopped{detail}{when}{hung}.", "stopped", evidence=facts)
        return Diagnosis(f"Stopped on request{detail}{when}{hung}.", "stopped", evidence=facts)
    scheduled = _scheduler_diagnosis(ev.scheduler_end, facts)
    if scheduled is not None:
        return scheduled
    if signalled is not None:
        return _signalled(signalled, ev, facts)

    own, positions = _split(lines)
    blame = _blame(first, ev.ends, lines, own, positions)
    if blame.note:
        facts.insert(0, blame.note)
    follow_ons = _follow_ons(blame.rank, ev.ends, lines, own) if own else []
    killed = _memory_kill(ev, blame, first, facts, follow_ons)
    if killed is not None:
        return killed
    error = blame.error
    def verbatim(rank: int | None, found: ErrorLine) -> str:  # the log's own line, tag and all
        if rank is not None and rank in positions and 0 <= found.index < len(positions[rank]):
            return lines[positions[rank][found.index]].strip()
        return found.text

    quoted = [verbatim(blame.rank, error) if blame.tagged else error.text] if error is not None else []
    rank = blame.rank

    if error is not None and not error.consequence:
        made = _from_cause(error, rank, quoted + facts, lines if not blame.tagged else own.get(rank or 0, []), ev)
        if made is not None:
            return replace(made, follow_ons=follow_ons)

    blamed_end = next((e for e in sorted(ev.ends, key=lambda e: e.t) if e.role == "rank" and e.rank == rank), first)
    if blamed_end is not None and blamed_end.returncode is not None and blamed_end.returncode < 0:
        how = _ended(blamed_end.returncode)
        silent = "" if error is not None else " without printing an error of its own"
        others = "; the other ranks were ended after it" if len({e.rank for e in ev.ends if e.role == "rank"}) > 1 \
            else ""
        if blamed_end.returncode == -signal.SIGSEGV:
            return Diagnosis(f"Rank {blamed_end.rank} crashed with a segmentation fault (SIGSEGV) in native code"
                             f"{others}.", "segfault", rank=blamed_end.rank,
                             evidence=quoted + _crash_stack(own.get(blamed_end.rank or 0, lines)) + facts,
                             follow_ons=follow_ons)
        return Diagnosis(f"Rank {blamed_end.rank} {how}{silent}{others}.", "killed",
                         rank=blamed_end.rank, evidence=quoted + facts, follow_ons=follow_ons,
                         advice=_sigkill_advice(ev, blamed_end) if blamed_end.returncode == -signal.SIGKILL else "")
    if error is None and blame.witness is not None and blame.witness[1].kind in ("collective_timeout", "peer_lost"):
        # The first rank said nothing; what a later rank saw is the best description of the failure.
        other, seen = blame.witness
        what = "timed out in a collective operation (NCCL/gloo)" if seen.kind == "collective_timeout" else \
            "lost its connection to it (NCCL/gloo)"
        how = _ended(blamed_end.returncode) if blamed_end is not None else "ended"
        return Diagnosis(f"{_who(rank)} {how} first without printing an error of its own; rank {other} then {what}.",
                         "collective_timeout" if seen.kind == "collective_timeout" else "peer_lost", rank=rank,
                         evidence=[verbatim(other, seen), *facts],
                         follow_ons=follow_ons,
                         advice="The first rank's end is the cause: look at its output and at the kernel log "
                                "(dmesg) for why it stopped.")
    if error is not None and error.kind in ("collective_timeout", "peer_lost"):
        if rank is None and (named := _NCCL_RANK.search(error.text)) is not None:
            rank = int(named.group(1))  # untagged lines: the rank ProcessGroupNCCL names in its own message
        who = _who(rank)
        if error.kind == "collective_timeout":
            summary = f"{who} timed out in a collective operation (NCCL/gloo): another rank stopped answering."
            # The collectives ledger of the stall before it (collectives.py) names the rank that never arrived.
            ledger = divergence_in(ev.stall_stacks)
            if ledger:
                summary = f"{summary[:-1]}; when the run stalled, {ledger}."
            survivors = _silent_survivors(rank, ev.ends, own)
            if survivors:
                quoted.append(f"rank(s) {', '.join(map(str, survivors))} printed no error and were still running "
                              f"when rank {rank} timed out: the likely one(s) that stopped answering (hung or slow)")
            advice = ("Look at the rank that ended first or hung (`traindeck stacks` shows where each rank waits); raise "
                      "the timeout only if a step is truly slow: init_process_group(timeout=...), "
                      "deepspeed.init_distributed(timeout=...) or accelerate's InitProcessGroupKwargs(timeout=...).")
        else:
            summary = f"{who} lost its connection to another rank (NCCL/gloo): that rank crashed or was killed first."
            advice = "Look for the rank that ended first: its own output or the kernel log says why it went."
        return Diagnosis(summary, error.kind, rank=rank, evidence=quoted + facts, advice=advice,
                         follow_ons=follow_ons)
    code = ev.launcher_returncode
    if blamed_end is not None and blamed_end.returncode not in (None, 0):
        return Diagnosis(f"Rank {blamed_end.rank} {_ended(blamed_end.returncode)}.", "exit_code", rank=blamed_end.rank,
                         evidence=[f"rank {blamed_end.rank} printed no error of its own", *facts] if own else facts,
                         follow_ons=follow_ons)
    if code is not None and code < 0:
        return Diagnosis(f"The launcher {_ended(code)}.", "killed", evidence=facts, follow_ons=follow_ons)
    if code not in (None, 0):
        return Diagnosis(f"The run {_ended(code)}.", "exit_code", evidence=quoted + facts, follow_ons=follow_ons)
    if first is not None:
        return Diagnosis(f"Rank {first.rank} ended before the others without a visible error.", "exit_code",
                         rank=first.rank, evidence=facts, follow_ons=follow_ons)
    return Diagnosis("The run finished successfully.", "succeeded", evidence=facts)


_NCCL_RANK = re.compile(r"^\[[EWI][\d :.]*ProcessGroupNCCL\.cpp:\d+\] \[(?:PG [^\]]*?)?Rank (\d+)\]")


def _sigkill_advice(ev: Evidence, end: ProcessEnd) -> str:
    """Who sends a SIGKILL nobody asked for, as far as the evidence goes: a likelihood, said as one."""
    pid = f" {end.pid}" if end.pid else ""
    if ev.min_available_ram is None and ev.peak_rank_rss is None:
        return ("An unexplained SIGKILL is most often the kernel's out-of-memory killer; no memory was sampled to "
                f"tell: look for \"Killed process{pid}\" in `dmesg` or `journalctl -k` on its host. Otherwise a user, "
                "a scheduler or a container runtime sent it.")
    low = f" (available RAM fell to {_gib(ev.min_available_ram)} at its lowest)" if ev.min_available_ram else ""
    return (f"Host memory was not near full when it was killed{low}: a user, a scheduler or a container runtime "
            "most likely sent it; `dmesg` names the kernel's own kills.")


_FRAME = re.compile(r'^\s*File "[^"]+", line \d+ in \S+')


def _crash_stack(lines: list[str], count: int = 4) -> list[str]:
    """The innermost Python frames faulthandler printed at a crash ("Fatal Python error: Segmentation fault")."""
    for index in range(len(lines) - 1, -1, -1):
        if "Fatal Python error" in lines[index]:
            return [line.strip() for line in lines[index + 1:index + 12] if _FRAME.match(line)][:count]
    return []


def _from_cause(error: ErrorLine, rank: int | None, evidence: list[str], own_lines: list[str],
                ev: Evidence) -> Diagnosis | None:
    """The diagnosis for an error a rank (or the script) printed itself."""
    who = _who(rank)
    kind = error.kind
    if kind == "cuda_oom":
        device = failures.cuda_device(error.text)
        return Diagnosis(f"{who} ran out of GPU memory{f' on {device}' if device else ''} (CUDA out of memory).",
                         "cuda_oom", rank=rank, evidence=evidence, memory="cuda",
                         advice="Lower the micro-batch size, enable activation checkpointing, or use a higher ZeRO "
                                "stage / offload.")
    if kind == "cpu_alloc":
        wanted = failures.wanted_bytes(error.text)
        size = f" of {_gib(wanted)}" if wanted else ""
        limit = ev.memory_limit if ev.memory_limit is not None and ev.memory_limit.limit_bytes else None
        if limit is not None:
            evidence = [*evidence, f"the run's cgroup {limit.cgroup} is limited to {_limit_text(limit)}"]
        advice = ("Host memory (RAM, or a limit on the process: ulimit -v, the run's cgroup) could not hold it: lower "
                  "the batch size, offload less, use fewer ranks per host")
        advice += f", or raise the limit set by {limit.owner}." if limit is not None else "."
        return Diagnosis(f"{who} ran out of host memory: the CPU allocator refused an allocation{size}.",
                         "cpu_alloc", rank=rank, evidence=evidence, memory="host", advice=advice)
    if kind == "deepspeed_batch_size":
        return Diagnosis(f"{who} stopped on DeepSpeed's batch-size check: train_batch_size must equal micro-batch x "
                         "gradient accumulation x world size.", kind, rank=rank, evidence=evidence,
                         advice=_fitting_advice(kind, "Fix train_batch_size (or set it to \"auto\" with the HF "
                                                      "Trainer) for this world size.", ev.settings))
    if kind == "port_in_use":
        port = failures.port_named([*own_lines[-200:], error.text])
        settings = dict(ev.settings)
        if port is not None and settings.get("master_port") not in (None, port):
            settings["port_fixed_elsewhere"] = port
        return Diagnosis(f"{who} could not open its rendezvous port{f' {port}' if port else ''}: the address is "
                         "already in use.", kind, rank=rank,
                         evidence=evidence, advice=_fitting_advice(
                             kind, "Another job holds the port: leave the port unset so traindeck picks a free one, "
                                   "or stop the other job.", settings))
    if kind == "local_rank_arg":
        return _local_rank_arg(error, rank, evidence, ev)
    if kind == "missing_module":
        match = failures.MISSING.search(error.text)
        assert match is not None
        name = match.group(1)
        return Diagnosis(f"The training Python has no module named '{name}'.", kind, rank=rank, evidence=evidence,
                         advice=f"Install it into the training interpreter (python -m pip install "
                                f"{name.split('.')[0]}) or choose another one with --python.")
    if kind == "config_error":
        return Diagnosis("The run stopped on a configuration error.", kind, rank=rank,
                         evidence=[evidence[0], *_following(own_lines, error.index), *evidence[1:]],
                         advice="Check the config with `traindeck config check`.")
    if kind == "loss_scale":
        overflows = sum(1 for line in own_lines if "OVERFLOW!" in line)
        if overflows:
            evidence = [*evidence, f"DeepSpeed skipped {overflows} step(s) on overflow before it (\"OVERFLOW!\" lines)"]
        return Diagnosis(f"{who} stopped: DeepSpeed's fp16 loss scale fell to its minimum (the loss overflowed at "
                         "every scale).", kind, rank=rank, evidence=evidence,
                         advice="Train in bf16 (\"bf16\": {\"enabled\": true}, Ampere GPUs or newer) instead of fp16; "
                                "in fp16, keep \"loss_scale\": 0 (dynamic), lower \"initial_scale_power\", raise "
                                "\"hysteresis\" and \"loss_scale_window\", or lower the learning rate if the loss "
                                "diverged.")
    if kind == "op_build":
        return _op_build(error, rank, evidence, own_lines)
    if kind == "disk_full":
        path = failures.full_path(error.text)
        free = ev.free_space.get(path) if path else None
        if path and free is not None:
            evidence = [*evidence, f"the disk holding {path} has {format_bytes(free)} free now"]
        where = f" at {path}" if path else ""
        return Diagnosis(f"{who} could not write{where}: no space left on the device.", kind, rank=rank,
                         evidence=evidence,
                         advice=(f"Free space on the disk holding {path}, or point the run's output there elsewhere "
                                 "(its output or checkpoint folder); keep fewer checkpoints (e.g. save_total_limit)."
                                 if path else "Free space on the disk the run writes its output and checkpoints to."))
    if kind == "package_version":
        return _package_version(error, rank, evidence)
    if kind == "segfault":
        return Diagnosis(f"{who} crashed with a segmentation fault (SIGSEGV) in native code.", kind, rank=rank,
                         evidence=[*evidence, *_crash_stack(own_lines)])
    if kind == "exception":
        return Diagnosis(f"{_who(rank, 'The script')} raised {error.text}".rstrip(".") + ".", "exception", rank=rank,
                         evidence=evidence)
    return None


_OP_NAME = re.compile(r"Error building extension '(\w+)'|Building extension module (\w+)|"
                      r"Loading extension module (\w+)|DTORCH_EXTENSION_NAME=(\w+)|Unable to pre-compile (\w+)")
# DeepSpeed's own ops (deepspeed/ops/op_builder): a build of one of these is DeepSpeed's even where the log never
# names DeepSpeed; any other extension (a package's own CUDA code) is named as itself.
_DEEPSPEED_OPS = frozenset({
    "async_io", "cpu_adagrad", "cpu_adam", "cpu_lion", "deepspeed_shm_comm", "evoformer_attn", "fp_quantizer",
    "fused_adam", "fused_lamb", "fused_lion", "gds", "inference_core_ops", "quantizer", "ragged_device_ops",
    "ragged_ops", "random_ltd", "sparse_attn", "spatial_inference", "stochastic_transformer", "transformer",
    "transformer_inference", "utils"})
_DISABLE_OP = re.compile(r"One can disable (\w+) with (DS_BUILD_\w+)=0")
_INSTALLING = re.compile(r"setup\.py|egg_info|Building wheel|bdist_wheel|pip-install|Building deepspeed wheel")
_WINDOWS_PATH = re.compile(r"\b[A-Z]:\\\w")
_ARCH = re.compile(r"Unsupported gpu architecture 'compute_(\d+)'")
_HEADER = re.compile(r"fatal error: ([\w/.+-]+\.h(?:pp)?): No such file or directory")
_GCC_MAX = re.compile(r"unsupported GNU version! gcc versions later than (\d+) are not supported")
_COMPILER_ERROR = re.compile(r"\berror\b:|nvcc fatal|fatal error:")


def _op_build(error: ErrorLine, rank: int | None, evidence: list[str], lines: list[str]) -> Diagnosis:
    """An op that failed to build, at whatever stage the log stops: the op, the compiler's first error, and what to
    change for the causes that say themselves (architecture, headers, CUDA_HOME, the compiler's version)."""
    text = "\n".join(lines)
    names = [next(g for g in m.groups() if g) for m in _OP_NAME.finditer(text)]
    op = names[-1] if names else ""
    first_error = next((line.strip() for line in lines if _COMPILER_ERROR.search(line)
                        and "Error building extension" not in line), "")
    if first_error and first_error not in evidence:
        evidence = [evidence[0], f"the first compiler error: {first_error}", *evidence[1:]]
    advice = ""
    if (arch := _ARCH.search(text)) is not None:
        advice = (f"This CUDA toolkit's nvcc does not know compute_{arch.group(1)}: install the CUDA toolkit torch "
                  "was built with (torch.version.cuda) or a newer one, or set TORCH_CUDA_ARCH_LIST to architectures "
                  "this nvcc knows.")
    elif (gcc := _GCC_MAX.search(text)) is not None:
        advice = (f"This CUDA toolkit takes gcc {gcc.group(1)} at most: install it and set CC=gcc-{gcc.group(1)} "
                  f"CXX=g++-{gcc.group(1)} for the build.")
    elif "requires the dev libaio .so object and headers" in text or "aio.lib" in text:
        # DeepSpeed's prebuild found no libaio (its own warning says so); Windows has no libaio at all.
        install = "" if _WINDOWS_PATH.search(text) else "install libaio's headers (apt install libaio-dev), or "
        disable = _DISABLE_OP.search(text)
        flag = disable.group(2) if disable is not None else "DS_BUILD_AIO"
        advice = (f"The async_io op (NVMe offload) needs libaio: {install}leave the op out of the build with "
                  f"{flag}=0.")
    elif (header := _HEADER.search(text)) is not None:
        name = header.group(1).rsplit("/", 1)[-1]
        if name in ("libaio.h", "aio.h"):
            advice = "Install libaio's headers for the async_io op (NVMe offload): apt install libaio-dev."
        elif name.startswith(("cuda", "cusparse", "cublas", "curand", "cufft", "nccl", "cudnn")):
            advice = (f"{name} is part of the CUDA toolkit: set CUDA_HOME to a full toolkit (with include/), the "
                      "version torch was built with (torch.version.cuda).")
        elif name == "Python.h":
            advice = "Install the training Python's headers (e.g. apt install python3-dev)."
    elif "CUDA_HOME" in text or "MissingCUDAException" in text or "No CUDA runtime is found" in text:
        advice = ("Set CUDA_HOME to the CUDA toolkit (e.g. /usr/local/cuda) of the version torch was built with "
                  "(torch.version.cuda), so nvcc is found.")
    if not op:
        what = "An op (a compiled extension)"
    elif op_display_name(op) in _DEEPSPEED_OPS or f"deepspeed/ops/csrc/{op}" in text:
        what = f"DeepSpeed's {op_display_name(op)} op"
    else:
        what = f"The {op} extension (compiled code)"
    if _INSTALLING.search(text):  # pip / setup.py building the ops ahead of use
        return Diagnosis(f"{what} failed to build, so the package could not be installed.", "op_build", rank=rank,
                         evidence=evidence, advice=advice)
    return Diagnosis(f"{what} failed to build, so {_who(rank).lower() if rank is not None else 'the run'} could "
                     "not start training.", "op_build", rank=rank, evidence=evidence, advice=advice)


# Where the log shows which launcher added the argument: DeepSpeed's launch.py/runner.py log lines, torch's launch.py.
_DEEPSPEED_LAUNCHER = re.compile(r"\[launch\.py:\d+:main\]|\[runner\.py:\d+:main\]|deepspeed\.launcher\.|"
                                 r"\[launch\.py:\d+:sigkill_handler\]")
_TORCH_LAUNCH = re.compile(r"torch[./]distributed[./]launch\b")


def _local_rank_arg(error: ErrorLine, rank: int | None, evidence: list[str], ev: Evidence) -> Diagnosis:
    """A rank stopped at its first line on the --local_rank=N argument its launcher adds: the script's parser, or the
    Python interpreter itself when the launcher ran `python` as a command, does not take it."""
    refused = failures.local_rank_refused(error.text)
    assert refused is not None
    quoted, parser = refused
    # The flag with its value left open: the error quoted may be another rank's than the one blamed.
    spelled = "--local-rank" if "--local-rank" in quoted else "--local_rank"
    arg = f"{spelled}=N"
    deepspeed = ev.settings.get("launcher") == "deepspeed" or any(_DEEPSPEED_LAUNCHER.search(line)
                                                                   for line in ev.log_tail)
    if deepspeed:
        launcher = "the deepspeed launcher"
    elif spelled == "--local-rank" or any(_TORCH_LAUNCH.search(line) for line in ev.log_tail):
        launcher = "torch.distributed.launch"
    else:
        launcher = "its launcher (the deepspeed launcher, or torch.distributed.launch)"
    # Launchers that give the rank in the LOCAL_RANK variable only; a deepspeed command line can leave it out.
    instead = ("launch it with torchrun or accelerate, which pass the rank in the LOCAL_RANK variable only"
               + ("" if launcher == "torch.distributed.launch" else
                  " (a deepspeed command line leaves it out with --no_local_rank)"))
    if parser == "python":
        summary = (f"{_who(rank)} stopped at once: Python itself refused {arg}, which {launcher} puts right after "
                   "the command it runs (unknown option).")
        advice = ("A command is started as `COMMAND --local_rank=N ARGS`, so `python -c ...` or `python -m ...` as a "
                  "command never starts: choose Script or Module instead (traindeck run SCRIPT / -m MODULE), which "
                  "the launcher starts with the training Python, or the torchrun launcher, which passes the rank in "
                  "the LOCAL_RANK variable only.")
    else:
        if parser == "HfArgumentParser":
            accept = ("give one of the HfArgumentParser's dataclasses a local_rank: int = -1 field "
                      "(TrainingArguments has one)")
        elif spelled == "--local_rank":
            accept = 'parser.add_argument("--local_rank", type=int, default=-1)'
        else:
            accept = 'parser.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=-1)'
        summary = (f"{_who(rank)} stopped at once: the script's argument parser does not accept {arg}, which "
                   f"{launcher} passes to the script.")
        advice = f"Make the script accept it: {accept}; or {instead}."
    return Diagnosis(summary, "local_rank_arg", rank=rank, evidence=evidence, advice=advice)


def _package_version(error: ErrorLine, rank: int | None, evidence: list[str]) -> Diagnosis:
    match = failures.PACKAGE_VERSION.search(error.text)
    assert match is not None
    if match.group("want"):
        want, found = match.group("want"), match.group("found")
        package = found.split("==")[0]
        return Diagnosis(f"The training Python has {found.replace('==', ' ')}; the code needs {want}.",
                         "package_version", rank=rank, evidence=evidence,
                         advice=f"Install it into the training interpreter: python -m pip install '{want}'.")
    if match.group("pkg"):
        want = f"{match.group('pkg')}{match.group('spec')}"
        return Diagnosis(f"The training Python has {match.group('pkg')} {match.group('have2')}; the code needs "
                         f"{want}.", "package_version", rank=rank, evidence=evidence,
                         advice=f"Install it into the training interpreter: python -m pip install '{want}'.")
    if match.group("have"):
        return Diagnosis(f"An installed package conflicts with what the code requires ({match.group('have')} is "
                         "installed).", "package_version", rank=rank, evidence=evidence,
                         advice=f"Install the version the requirement names in place of {match.group('have')}.")
    name, module = match.group("name"), match.group("module")
    package = module.split(".")[0]
    if "(unknown location)" in error.text:
        # Python found a folder named after the package but no package in it (a namespace package): the package is
        # missing from this interpreter or a folder of that name shadows it.
        return Diagnosis(f"{module} has no '{name}': '{package}' resolves to a folder without the package (unknown "
                         "location).", "package_version", rank=rank, evidence=evidence,
                         advice=f"Install {package} into the training interpreter (python -m pip install {package}), "
                                f"or rename the folder named {package} in the working directory or on PYTHONPATH.")
    return Diagnosis(f"{module} has no '{name}': the installed {package} is not the version the code was written "
                     "for.", "package_version", rank=rank, evidence=evidence,
                     advice=f"Install the {package} version the script or its framework pins (its requirements name "
                            f"it; `python -m pip show {package}` shows the one installed).")


def _fitting_advice(kind: str, advice: str, settings: dict[str, Any]) -> str:
    """The advice for `kind`, worded for what the run was launched with: never "set it to auto" for a value that
    already is "auto", never "leave the port unset" when traindeck picked it."""
    if kind == "deepspeed_batch_size" and settings.get("train_batch_size") == "auto":
        return ("train_batch_size is \"auto\", which only the HF Trainer / accelerate fill in; DeepSpeed dropped it to "
                "its default here. Set it to micro-batch x gradient accumulation x world size, or remove it.")
    if kind == "port_in_use" and "port_fixed_elsewhere" in settings:
        return (f"Port {settings['port_fixed_elsewhere']} is not the one traindeck chose ({settings['master_port']}): "
                "the script or its launcher arguments fix it (e.g. --master_port, MASTER_PORT, init_method): remove "
                "that so the chosen free port is used, or stop the job that holds it.")
    if kind == "port_in_use" and settings.get("port_fixed") is False:
        return ("traindeck picked a free port, but another process took it before the launcher listened on it "
                "(or a second rendezvous of the job uses it): start the run again.")
    return advice


def _following(lines: list[str], index: int, count: int = 3) -> list[str]:
    return [line.strip() for line in lines[index + 1:index + 1 + count] if line.strip()]


def _scheduler_diagnosis(end: dict[str, Any], facts: list[str]) -> Diagnosis | None:
    """The scheduler's own explanation (out of memory at the job's limit, time limit, node failure), when it gave
    one: its words beat a guess from the log, where the job was simply killed."""
    kind = next((k for k in KINDS if k == end.get("kind")), None)
    memory: MemoryKind = next((m for m in ("host", "cgroup", "cuda") if m == end.get("memory")), "")
    if not end.get("summary") or kind is None:
        return None
    return Diagnosis(str(end["summary"]), kind, evidence=facts, advice=str(end.get("advice") or ""), memory=memory)


def signalled_from_outside(ev: Evidence) -> launcher_reports.LauncherSignal | None:
    """The launcher's own line saying it received a signal that traindeck did not send: no stop was requested
    (traindeck's stops, a user's or its own, are always requested first), and the launcher was not itself killed
    by a signal (then its end is the story, and traindeck may have ended what it left behind)."""
    if ev.stop_requested or (ev.launcher_returncode is not None and ev.launcher_returncode < 0):
        return None
    return launcher_reports.launcher_signal(ev.log_tail)


def _signalled(said: launcher_reports.LauncherSignal, ev: Evidence, facts: list[str]) -> Diagnosis:
    """A launcher signalled from outside traindeck: it ended its ranks itself, so no rank's end is a cause; the
    senders are named as what they may have been, never as fact."""
    what = said.signal or "a signal (SIGINT or SIGTERM)"
    zero = " (its exit code 0 does not mean the run finished)" if ev.launcher_returncode == 0 else ""
    if said.launcher == "The DeepSpeed launcher":
        senders = ("another DeepSpeed job's stop on this machine (DeepSpeed's own stop runs `pkill -f` on every "
                   "launcher of the same Python command, this run's included), a scheduler ending or preempting the "
                   "job, or a user's `kill`")
    else:
        senders = ("a scheduler ending or preempting the job, a script that ends processes by name (`pkill -f`), or "
                   "a user's `kill`")
    if ev.log_only:  # a log from anywhere: nothing says whether a person stopped it on purpose
        return Diagnosis(
            f"{said.launcher} received {what} and ended its ranks ({said.said}); the run did not finish{zero}.",
            "signalled_from_outside", evidence=[said.line, *facts],
            advice=f"The log does not say who sent it: a Ctrl+C or a stop by the person who ran it, or {senders}.")
    return Diagnosis(
        f"{said.launcher} received {what} from outside traindeck and ended its ranks ({said.said}); the run did not "
        f"finish{zero}.", "signalled_from_outside", evidence=[said.line, *facts],
        advice=f"traindeck did not send it and cannot tell who did. It may have been {senders}: look at what else "
               "ran on this host at that time. Runs stopped through traindeck (`traindeck stop`) read stopped.")


def is_success(ev: Evidence) -> bool:
    """True when the launcher and every rank we saw end exited with 0, nobody asked to stop, and the launcher did not
    log a signal from outside (DeepSpeed's launcher can exit 0 after one, when a rank had already returned)."""
    if ev.stop_requested or ev.start_error or ev.supervisor_lost:
        return False
    if signalled_from_outside(ev) is not None:
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
