"""`traindeck monitor`: live host, GPU and run-process samples, for people on SSH, as nvitop shows them for traindeck.

Without --run every live run the run store knows (whoever started it: the dashboard, `traindeck run`, the queue) is
listed with its processes: run, rank, PID, CPU %, RSS and GPU memory where NVML tells it; runs that start or end
while it watches come and go. With --run one run's process tree, in more detail.

On a terminal the screen is redrawn in place, like top and nvitop: the alternate screen (the shell's screen comes
back on exit), each frame written from the top-left corner, every line cleared to its end and the rest of the
screen below the frame cleared, lines cut to the terminal's width and the frame to its height (a line that wraps or
a frame that scrolls would leave the next frame drawn off its place). Piped or with --json, one block (or JSON line)
per sample, as a log reads; what does not change between samples (no GPU, the driver's versions) is said once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from typing import Any, TextIO

from traindeck.backend.cli import UserError
from traindeck.backend.core import format_size

ORDER = 40


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "monitor",
        help="print live CPU, RAM, disk, network, GPU samples and every live run's processes",
        description="Print a resource sample every --interval seconds until Ctrl+C (or once with --once): the host, "
                    "the GPUs, and the processes of every live run (run, rank, PID, CPU %, RSS, GPU memory), "
                    "whoever started it. On a terminal the screen is redrawn in place; piped, one block a sample.",
    )
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (0.1-5, default 1)")
    p.add_argument("--once", action="store_true", help="print one sample and exit")
    p.add_argument("--json", action="store_true", help="one JSON object per sample and line")
    p.add_argument("--run", metavar="ID", help="show this run's process tree in detail instead of every live run's processes (its id, a unique part of it "
                        "or its name, as for `runs show`; or a PID)")
    p.add_argument("--processes", action="store_true",
                   help="also list the machine's busiest processes (CPU, RSS, GPU memory, run), every 2 s at most")
    p.set_defaults(handler=_run)


# The terminal's control sequences (ECMA-48 / xterm): what top and nvitop draw with.
ALT_SCREEN_ON, ALT_SCREEN_OFF = "\x1b[?1049h", "\x1b[?1049l"
CURSOR_HIDE, CURSOR_SHOW = "\x1b[?25l", "\x1b[?25h"
HOME, CLEAR_LINE_END, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"


class Screen:
    """Frames drawn in place on a terminal (`in_place`), or printed one after the other (a pipe, a file)."""

    def __init__(self, out: TextIO, in_place: bool) -> None:
        self.out = out
        self.in_place = in_place

    def __enter__(self) -> Screen:
        if self.in_place:
            self.out.write(ALT_SCREEN_ON + CURSOR_HIDE)
            self.out.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.in_place:
            self.out.write(CURSOR_SHOW + ALT_SCREEN_OFF)
            self.out.flush()

    def rows_left(self, text: str) -> int | None:
        """Lines the terminal has below `text` (None: not a terminal, no limit)."""
        if not self.in_place:
            return None
        return max(0, shutil.get_terminal_size().lines - len(text.splitlines()))

    def draw(self, text: str) -> None:
        if not self.in_place:
            self.out.write(text + "\n")
            self.out.flush()
            return
        size = shutil.get_terminal_size()
        lines = [line[: size.columns] for line in text.splitlines()[: size.lines]]
        # Home, each line then cleared to its end (a shorter line than last frame's), then everything below cleared.
        self.out.write(HOME + "".join(line + CLEAR_LINE_END + "\n" for line in lines[:-1])
                       + (lines[-1] + CLEAR_LINE_END if lines else "") + CLEAR_BELOW)
        self.out.flush()


def _run(args: argparse.Namespace) -> int:
    from traindeck.backend.monitor import ResourceSampler, check_interval

    try:
        interval = check_interval(args.interval)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    from traindeck.backend.monitor import MACHINE_EVERY_S

    root_pid = _launcher_pid(args.run) if args.run else None
    live = None if args.run else LiveRuns()
    sampler = ResourceSampler(root_pid, interval_s=interval, runs=live)
    in_place = sys.stdout.isatty() and not args.json and not args.once
    machine = None
    machine_at = -float("inf")
    said: tuple[object, ...] | None = None  # the unchanging lines last printed (a pipe gets them once)
    with sampler, Screen(sys.stdout, in_place) as screen, (live or _Nothing()):
        if args.processes:
            sampler.machine.sample()  # the first reading, that CPU % is measured against
        # Rates and CPU % need two readings: wait a moment after the first (and for the first PCIe reading).
        sampler.gpus.wait_for_pcie(timeout=1.0)
        next_at = time.monotonic() + min(interval, 0.5) if args.once else time.monotonic() + interval
        try:
            while True:
                time.sleep(max(0.0, next_at - time.monotonic()))
                due = args.processes and time.monotonic() - machine_at >= MACHINE_EVERY_S - interval / 2
                if due:
                    machine_at = time.monotonic()
                sample = sampler.sample(machine=due)
                machine = sample.machine or machine  # between snapshots, the last one is shown again
                if args.json:
                    data = sample.to_json_dict()
                    if live is not None:
                        data["runs"] = live.to_json(sample)
                    screen.draw(json.dumps(data, separators=(",", ":")))
                else:
                    unchanging = (sample.gpu_error, tuple(sorted((sample.gpu_versions or {}).items())))
                    text = format_sample(sample, unchanging=in_place or unchanging != said)
                    said = unchanging
                    if live is not None:
                        left = screen.rows_left(text)
                        text += "\n" + format_runs(sample, live, None if left is None or args.processes
                                                     else left)
                    if args.processes and machine is not None:
                        left = screen.rows_left(text)
                        text += "\n" + format_machine(machine, 20 if left is None else left)
                    screen.draw(text)
                if args.once:
                    return 0
                next_at += interval
        except KeyboardInterrupt:
            if not in_place:
                raise
            return 0  # Ctrl+C ends a full-screen view, as it ends top


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class LiveRuns:
    """The runs the store has running, read again at every sample (runs start and end while one watches): for the
    sampler {run id: launcher PID}, and each run's name. A run whose supervisor is gone is left out (marked lost
    when the store is opened; one that dies while watched is left out at once); a run not started yet is
    `starting`."""

    def __init__(self) -> None:
        from traindeck.backend.cli.run_lookup import open_store

        self.store = open_store()
        self.names: dict[str, str] = {}
        self.starting: list[str] = []

    def __enter__(self) -> LiveRuns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()

    def __call__(self) -> dict[str, int]:
        from traindeck.backend.runs import supervisor_alive

        records = [r for r in self.store.list_runs(state="running") if supervisor_alive(r)]
        self.names = {r.id: r.name or r.id for r in records}
        self.starting = sorted(r.id for r in records if r.launcher_pid is None)
        return {r.id: int(r.launcher_pid) for r in records if r.launcher_pid is not None}

    def to_json(self, sample: Any) -> list[dict[str, Any]]:
        """`runs` of the --json line: each live run with its name, launcher PID (None: starting) and processes."""
        import dataclasses

        out = [{"run_id": r.run_id, "name": self.names.get(r.run_id or ""), "root_pid": r.root_pid,
                "processes": [dataclasses.asdict(p) for p in r.processes]} for r in sample.runs]
        out += [{"run_id": run_id, "name": self.names.get(run_id), "root_pid": None, "processes": []}
                for run_id in self.starting]
        return out


def _launcher_pid(text: str) -> int:
    """The launcher PID of the run `text` names (as every run command reads it: id, unique prefix, suffix or
    name); a number that names no run is taken as a PID."""
    from traindeck.backend.cli.run_lookup import AmbiguousRun, open_store, resolve_run

    store = open_store()
    try:
        record = resolve_run(store, text)
    except AmbiguousRun:
        raise
    except UserError:
        if text.isdigit():
            return int(text)
        raise
    finally:
        store.close()
    if record.finished:
        raise UserError(f"run {record.id} has ended ({record.state}); its recorded samples: traindeck runs show "
                        f"{record.id}")
    if record.launcher_pid is None:
        raise UserError(f"run {record.id} has no launcher process yet; try again in a moment")
    return int(record.launcher_pid)


# --- the human table ---


def _size(value: float | None) -> str:
    return "-" if value is None else format_size(value)


def _rate(value: float | None) -> str:
    return "-" if value is None else format_size(value) + "/s"


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, fmt) + suffix


def format_sample(sample: Any, unchanging: bool = True) -> str:
    """A compact, fixed-layout text block for one `ResourceSample`; without `unchanging`, the lines that do not
    change from one sample to the next (no GPU and why, the driver's versions) are left out."""
    host = sample.host
    lines = [
        f"{time.strftime('%H:%M:%S', time.localtime(sample.t))}  "
        f"CPU {_num(host.cpu_percent, '5.1f', '%')} ({len(host.per_core_percent)} cores)  "
        f"RAM {format_size(host.ram_used_bytes)} used / {format_size(host.ram_total_bytes)}, "
        f"{format_size(host.ram_available_bytes)} available  swap {format_size(host.swap_used_bytes)}  "
        f"disk r {_rate(host.disk_read_bytes_per_s)} w {_rate(host.disk_write_bytes_per_s)}  "
        f"net rx {_rate(host.net_rx_bytes_per_s)} tx {_rate(host.net_tx_bytes_per_s)}"
    ]
    for path, device in host.watched_devices:
        disk = host.disk(device)
        lines.append(
            f"  {path} on {device}: r {_rate(disk.read_bytes_per_s if disk else None)} "
            f"w {_rate(disk.write_bytes_per_s if disk else None)}"
        )
    if sample.gpu_error and unchanging:
        lines.append(f"  GPUs: none ({sample.gpu_error})")
    versions = getattr(sample, "gpu_versions", None) or {}
    if versions and unchanging:
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    for g in sample.gpus:
        if g.error is not None:  # a GPU NVML could not read at all (no permission, lost)
            lines.append(f"  GPU{g.index} {g.name or '?'}: {g.error}")
            continue
        processes = f"unknown ({g.processes_unknown})" if g.processes_unknown else str(len(g.processes))
        lines.append(
            f"  GPU{g.index} {g.name or '?'}: util {_num(g.utilization_percent, '3.0f', '%')}  "
            f"mem {format_size(g.memory_used_bytes)} / {format_size(g.memory_total_bytes)}  "
            f"power {_num(g.power_w, '.0f')}/{_num(g.power_limit_w, '.0f')} W  {_num(g.temperature_c, '.0f', ' C')}  "
            f"SM {_num(g.sm_clock_mhz, 'd', ' MHz')}  PCIe H2D {_rate(g.pcie_h2d_bytes_per_s)} "
            f"D2H {_rate(g.pcie_d2h_bytes_per_s)}{' (est.)' if g.pcie_source == 'sampled' else ''}  "
            f"processes {processes}"
        )
    run = sample.run
    if run is not None:
        if not run.processes:
            lines.append(f"  run: launcher PID {run.root_pid} is not running")
        else:
            lines.append(f"  {'PID':>7} {'ROLE':8} {'RANK':>4} {'CPU%':>6} {'RSS':>10} {'LOCKED':>10} {'GPU MEM':>10}  COMMAND")
            for p in run.processes:
                lines.append(
                    f"  {p.pid:>7} {p.role:8} {'-' if p.rank is None else p.rank:>4} {_num(p.cpu_percent, '6.1f'):>6} "
                    f"{format_size(p.rss_bytes):>10} {format_size(p.locked_bytes):>10} {format_size(p.gpu_memory_bytes):>10}  "
                    f"{p.cmdline[:70]}"
                )
            lines.append(
                f"  ranks: {len(run.ranks)}  RSS {format_size(run.ranks_rss_bytes)} (largest {format_size(run.max_rank_rss_bytes)})  "
                f"CPU {run.ranks_cpu_percent:.0f}%"
                + (f"  launcher RSS {format_size(run.launcher_rss_bytes)}" if run.launcher_rss_bytes is not None else "")
            )
    return "\n".join(lines)


def format_runs(sample: Any, live: LiveRuns, rows: int | None = None) -> str:
    """Every live run's processes, one line each, a run's together (launcher first, then its ranks in order), in at
    most `rows` lines (None: all); a header comes first. GPU memory is "-" where NVML cannot tell."""
    from traindeck.backend.monitor import short_command

    count = len(sample.runs) + len(live.starting)
    if not count:
        return "  runs: none running (traindeck runs list shows the others)"
    lines = [f"  {'RUN':24} {'RANK':>8} {'PID':>7} {'CPU%':>6} {'RSS':>10} {'GPU MEM':>10}  COMMAND"
             f"   ({count} live run{'s' if count != 1 else ''})"]
    order = {"launcher": 0, "rank": 1, "helper": 2}
    for run in sample.runs:
        label = _run_label(run.run_id, live.names.get(run.run_id, ""))
        if not run.processes:
            lines.append(f"  {label:24} {'':>8} {run.root_pid:>7}  (launcher not running)")
        for p in sorted(run.processes, key=lambda p: (order.get(p.role, 3), -1 if p.rank is None else p.rank, p.pid)):
            rank = p.role if p.rank is None else str(p.rank)
            lines.append(f"  {label:24} {rank:>8} {p.pid:>7} {_num(p.cpu_percent, '6.1f'):>6} "
                         f"{_size(p.rss_bytes):>10} {_size(p.gpu_memory_bytes):>10}  {short_command(p.cmdline.split())[:70]}")
    for run_id in live.starting:
        lines.append(f"  {_run_label(run_id, live.names.get(run_id, '')):24} {'':>8} {'-':>7}  (starting)")
    if rows is not None and len(lines) > rows:
        cut = max(1, rows - 1)
        lines = lines[:cut] + [f"  ... {len(lines) - cut} more lines (a taller terminal shows them)"][: max(0, rows - cut)]
    return "\n".join(lines)


def _run_label(run_id: str | None, name: str) -> str:
    """The run's name and its id's random suffix (its first characters are only its date): `behave ·4bd2`."""
    run_id = run_id or "?"
    if not name or name == run_id:
        return run_id[:24]
    if len(name) > 18:  # cut in the middle: runs of one preset differ at the end (`-2`, `-3`)
        name = name[:8] + "…" + name[-9:]
    return f"{name} ·{run_id[-4:]}"


def format_machine(machine: Any, rows: int) -> str:
    """The machine's busiest processes (by CPU, then RSS) in at most `rows` lines, a header included."""
    if rows < 2:
        return ""
    busiest = sorted(machine.processes, key=lambda p: (-(p.cpu_percent or 0.0), -(p.rss_bytes or 0)))
    lines = [f"  {'PID':>7} {'USER':10} {'CPU%':>6} {'RSS':>10} {'GPU MEM':>10} {'RUN':20}  COMMAND"
             f"   ({len(machine.processes)} processes)"]
    for p in busiest[: rows - 1]:
        lines.append(f"  {p.pid:>7} {p.user[:10]:10} {_num(p.cpu_percent, '6.1f'):>6} {format_size(p.rss_bytes):>10} "
                     f"{format_size(p.gpu_memory_bytes) if p.gpu_memory_bytes is not None else '':>10} "
                     f"{p.run_id or '':20}  {p.cmdline}")
    return "\n".join(lines)
