"""The run engine's output path under load: prints a table.

    .venv/bin/python tests/perf/bench_run_output.py                 # 3M-line flood (about a minute or two)
    .venv/bin/python tests/perf/bench_run_output.py --flood-lines 500000 --quick
    .venv/bin/python tests/perf/bench_run_output.py --smoke                   # every part, smallest runs (seconds)

Measures, with real supervised runs (plain python launcher, the environment real runs get):
  latency   a job prints a timestamped line every 0.2 s with plain print() and never flushes; how long until the
            line is in output.log, and until its metric is in the run store (p50 / p95 / max)
  flood     a job writes N lines as fast as it can (64 KiB-buffered writes, and unbuffered print() per line):
            its own wall time under the supervisor vs the same job writing to /dev/null; lines kept in output.log;
            then print() again as rank 1 of 2 (RANK/WORLD_SIZE set as a launcher would), where the run's
            sitecustomize tags each line "[rank1]: ": against /dev/null with and without the tags
  foreground  the same flood through `traindeck run` in the foreground (what a user types), its output to
            /dev/null, into `cat > file`, and to a terminal (a pty, read as fast as a terminal would), against
            `python job | cat > file`; goal: within 1.1x of that, every line kept in output.log
  cpu       the supervisor's own CPU time during the runs above and during a quiet training-like run

    .venv/bin/python tests/perf/bench_run_output.py --only foreground     # just the foreground rows
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil

SCRATCH = Path(tempfile.mkdtemp(prefix="traindeck-bench-"))
os.environ["TRAINDECK_HOME"] = str(SCRATCH / "home")

from traindeck.backend.launch.environ import training_env  # noqa: E402
from traindeck.backend.launch.plan import LaunchPlan  # noqa: E402
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402

LATENCY_JOB = textwrap.dedent("""
    import sys, time
    n = int(sys.argv[1])
    time.sleep(1.0)
    for i in range(n):
        print(f"LAT {i} {time.time():.6f}")            # never flushed: PYTHONUNBUFFERED from the run's env
        print(f"{{'bench_seq': {i}, 'step': {i}}}")
        time.sleep(0.2)
""")

FLOOD_JOB = textwrap.dedent("""
    import os, sys, time
    n, mode = int(sys.argv[1]), sys.argv[2]
    pad = "lorem ipsum dolor sit amet, consectetur adipiscing elit"
    t0 = time.perf_counter()
    if mode == "buffered":
        out = open(1, "w", buffering=1 << 16, closefd=False)
        write = out.write
        for i in range(n):
            write(f"line {i:08d} {pad}\\n")
        out.flush()
    else:
        for i in range(n):
            print(f"line {i:08d} {pad}")
    elapsed = time.perf_counter() - t0
    print(f"ELAPSED {elapsed:.6f}", file=sys.stderr, flush=True)
""")

QUIET_JOB = textwrap.dedent("""
    import sys, time
    steps = int(sys.argv[1])
    for step in range(1, steps + 1):
        time.sleep(0.1)
        sys.stderr.write(f"\\rtrain: {100 * step // steps:3d}%|####| {step}/{steps} [00:01<00:01, 10.00it/s]")
        if step % 10 == 0:
            print(f"{{'loss': {1 / step:.4f}, 'learning_rate': 0.001, 'epoch': {step / steps:.2f}}}")
    print("done")
""")


def _script(name: str, text: str) -> Path:
    path = SCRATCH / name
    path.write_text(text)
    return path


RANK_ENV = {"RANK": "1", "WORLD_SIZE": "2"}  # what a launcher gives rank 1 of 2


def _start(script: Path, *args: str, env: dict[str, str] | None = None) -> RunRecord:
    run_dir = new_run_dir()
    plan = LaunchPlan(launcher="python", argv=[sys.executable, str(script), *args], env=training_env(env),
                      cwd=str(SCRATCH))
    return start_run(plan, run_dir, name=script.stem)


class SupervisorCpu(threading.Thread):
    """Samples the supervisor's CPU time until it exits (the last sample is within 50 ms of its end)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.cpu = 0.0
        self.rss = 0
        self.t0 = time.monotonic()
        self.wall = 0.0

    def run(self) -> None:
        while True:
            try:
                times = self.proc.cpu_times()
                if self.proc.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            self.cpu = times.user + times.system
            try:
                self.rss = max(self.rss, self.proc.memory_info().rss)
            except psutil.Error:
                break
            self.wall = time.monotonic() - self.t0
            time.sleep(0.05)


def _wait(store: RunStore, run_id: str, timeout: float = 900) -> RunRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = store.get_run(run_id)
        if record is not None and record.finished:
            return record
        time.sleep(0.05)
    raise TimeoutError(run_id)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_latency(store: RunStore, count: int) -> list[tuple[str, str]]:
    run = _start(_script("latency_job.py", LATENCY_JOB), str(count))
    log = Path(run.run_dir) / "output.log"
    to_log: dict[int, float] = {}
    to_store: dict[int, float] = {}
    written: dict[int, float] = {}
    cpu = SupervisorCpu(run.supervisor_pid or 0)
    cpu.start()
    position = 0
    pending = b""
    last_store_check = 0.0
    while True:
        now = time.time()
        with open(log, "rb") as handle:
            handle.seek(position)
            data = handle.read()
        position += len(data)
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"LAT "):
                _, seq, t = line.split()
                written[int(seq)] = float(t)
                to_log.setdefault(int(seq), now)
        if now - last_store_check > 0.01:
            last_store_check = now
            for step, _t, _value in store.metric_series(run.id, "bench_seq"):
                if step is not None:
                    to_store.setdefault(step, now)
            record = store.get_run(run.id)
            if record is not None and record.finished:
                break
        time.sleep(0.002)
    cpu.join()
    log_lat = [to_log[i] - written[i] for i in written]
    store_lat = [to_store[i] - written[i] for i in written if i in to_store]
    rows = [
        ("latency: line -> output.log", f"p50 {1000 * statistics.median(log_lat):.1f} ms, p95 "
         f"{1000 * _pct(log_lat, 0.95):.1f} ms, max {1000 * max(log_lat):.1f} ms ({len(log_lat)} lines)"),
        ("latency: line -> metric in store", f"p50 {1000 * statistics.median(store_lat):.0f} ms, p95 "
         f"{1000 * _pct(store_lat, 0.95):.0f} ms, max {1000 * max(store_lat):.0f} ms ({len(store_lat)} lines)"),
        ("supervisor CPU, latency job", f"{cpu.cpu:.2f} s over {cpu.wall:.1f} s ({100 * cpu.cpu / cpu.wall:.1f}%)"),
    ]
    return rows


def _baseline(script: Path, lines: int, mode: str, env: dict[str, str] | None = None) -> float:
    import subprocess

    env = training_env(env)
    result = subprocess.run([sys.executable, str(script), str(lines), mode], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, check=True)
    return float(result.stderr.split("ELAPSED")[1].split()[0])


def _piped_to_cat(script: Path, lines: int, mode: str) -> float:
    """The same job with the simplest possible consumer: a pipe into `cat > file`."""
    import subprocess

    target = SCRATCH / "cat.out"
    with open(target, "wb") as sink:
        cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=sink)
        result = subprocess.run([sys.executable, str(script), str(lines), mode], stdout=cat.stdin,
                                stderr=subprocess.PIPE, text=True, env=training_env(), check=True)
        assert cat.stdin is not None
        cat.stdin.close()
        cat.wait()
    target.unlink()
    return float(result.stderr.split("ELAPSED")[1].split()[0])


def bench_flood(store: RunStore, lines: int, mode: str) -> list[tuple[str, str]]:
    script = _script("flood_job.py", FLOOD_JOB)
    baseline = min(_baseline(script, lines, mode) for _ in range(2))
    with_cat = min(_piped_to_cat(script, lines, mode) for _ in range(2))
    run = _start(script, str(lines), mode)
    cpu = SupervisorCpu(run.supervisor_pid or 0)
    cpu.start()
    done = _wait(store, run.id)
    cpu.join()
    data = (Path(done.run_dir) / "output.log").read_bytes()
    supervised = float(data.split(b"ELAPSED")[1].split()[0])
    kept = data.count(b"\nline ") + (1 if data.startswith(b"line ") else 0)
    # Sanity: every line present and in order, none torn.
    first, last = data.find(b"line 00000000 "), data.rfind(b"line %08d " % (lines - 1))
    intact = first >= 0 and last > first and kept == lines
    skipped = [e.text for e in store.events(run.id) if e.kind == "parse_skipped"]
    label = f"flood {lines:,} lines, {'64 KiB writes' if mode == 'buffered' else 'print() per line, unbuffered'}"
    return [
        (label + ": job wall time", f"{supervised:.2f} s supervised vs {baseline:.2f} s to /dev/null "
                                    f"({100 * (supervised / baseline - 1):+.0f}%); piped into `cat > file`: "
                                    f"{with_cat:.2f} s"),
        (label + ": lines kept", f"{kept:,} of {lines:,} ({len(data) / 2**20:.0f} MiB), in order: {intact}"),
        (label + ": supervisor CPU", f"{cpu.cpu:.2f} s over {cpu.wall:.1f} s"
                                     + (f"; {skipped[0]}" if skipped else "; parsed every line")),
    ]


def _foreground(script: Path, lines: int, sink: str) -> tuple[float, float, int, bool]:
    """`traindeck run SCRIPT LINES buffered` in the foreground, its stdout to `sink` (devnull | cat | pty); returns
    (the job's own wall time, the command's wall time, lines in output.log, whether it said it skipped)."""
    import pty
    import subprocess

    argv = [sys.executable, "-m", "traindeck", "run", "--name", "foreground-flood", str(script), str(lines),
            "buffered"]
    err = SCRATCH / "foreground.err"
    t0 = time.monotonic()
    with open(err, "w") as err_file:
        if sink == "detached":  # nothing follows the run: the supervisor's own cost
            out = subprocess.run([*argv[:4], "--detach", *argv[4:]], stdout=subprocess.PIPE, stderr=err_file,
                                 check=True, cwd=SCRATCH, text=True)
            store = RunStore()
            _wait(store, out.stdout.split()[-1])
            store.close()
        elif sink == "devnull":
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=err_file, check=True, cwd=SCRATCH)
        elif sink == "cat":
            with open(SCRATCH / "fg.out", "wb") as out:
                cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=out)
                subprocess.run(argv, stdout=cat.stdin, stderr=err_file, check=True, cwd=SCRATCH)
                assert cat.stdin is not None
                cat.stdin.close()
                cat.wait()
            (SCRATCH / "fg.out").unlink()
        else:  # a terminal: the pty's other side is read (and dropped) as fast as it comes
            leader, follower = pty.openpty()
            proc = subprocess.Popen(argv, stdout=follower, stderr=err_file, cwd=SCRATCH)
            os.close(follower)
            while True:
                try:
                    if not os.read(leader, 1 << 16):
                        break
                except OSError:
                    break
            proc.wait()
            os.close(leader)
    wall = time.monotonic() - t0
    store = RunStore()
    record = store.list_runs()[0]
    store.close()
    assert record.name == "foreground-flood" and record.state == "succeeded", (record.name, record.state)
    data = (Path(record.run_dir) / "output.log").read_bytes()
    job = float(data.split(b"ELAPSED")[1].split()[0])
    kept = data.count(b"\nline ") + (1 if data.startswith(b"line ") else 0)
    return job, wall, kept, "skipped" in err.read_text()


def bench_foreground(lines: int, repeat: int = 3) -> list[tuple[str, str]]:
    """Rounds of: the reference, then each way of running it; each run is compared with the reference of its own
    round (a shared machine's load drifts within minutes), and the best and median of those ratios reported."""
    script = _script("flood_job.py", FLOOD_JOB)
    sinks = (("detached", "--detach, nothing following"), ("devnull", "stdout to /dev/null"),
             ("cat", "stdout into `cat > file`"), ("pty", "on a terminal (pty)"))
    # `traindeck run` asks the interpreter what it has (importing torch, cached afterwards): asked once here with
    # a patient timeout, so that on a loaded machine the first round does not fail on the probe's 60 s limit.
    from traindeck.backend.launch.probe import probe_environment

    probe_environment(sys.executable, timeout=900)
    references: list[float] = []
    results: dict[str, list[tuple[float, float, int, bool]]] = {sink: [] for sink, _ in sinks}
    for _ in range(repeat):
        references.append(_piped_to_cat(script, lines, "buffered"))
        for sink, _label in sinks:
            results[sink].append(_foreground(script, lines, sink))
    rows = [(f"foreground `traindeck run`, flood {lines:,} lines: reference",
             f"`python job | cat > file`: {', '.join(f'{r:.2f}' for r in references)} s ({repeat} rounds)")]
    for sink, label in sinks:
        ratios = [r[0] / ref for r, ref in zip(results[sink], references, strict=True)]
        kept = min(r[2] for r in results[sink])
        rows.append((f"foreground `traindeck run`, flood {lines:,} lines: {label}",
                     f"job {', '.join(f'{r[0]:.2f}' for r in results[sink])} s = x{min(ratios):.2f} best, "
                     f"x{statistics.median(ratios):.2f} median of its round's reference (goal <= x1.1); "
                     f"output.log {kept:,} of {lines:,} lines in every run; said it skipped: "
                     f"{sum(r[3] for r in results[sink])} of {repeat}"))
    return rows


def bench_rank_tags(store: RunStore, lines: int) -> list[tuple[str, str]]:
    script = _script("flood_job.py", FLOOD_JOB)
    untagged = min(_baseline(script, lines, "print", {**RANK_ENV, "TRAINDECK_RANK_TAGS": "0"}) for _ in range(2))
    tagged = min(_baseline(script, lines, "print", RANK_ENV) for _ in range(2))
    done = _wait(store, _start(script, str(lines), "print", env=RANK_ENV).id)
    data = (Path(done.run_dir) / "output.log").read_bytes()
    supervised = float(data.split(b"ELAPSED")[1].split()[0])
    kept = data.count(b"[rank1]: line ")
    label = f"flood {lines:,} lines, print() per line as rank 1 of 2"
    return [
        (label + ": job wall time", f"{supervised:.2f} s supervised; to /dev/null {tagged:.2f} s tagged vs "
                                    f"{untagged:.2f} s untagged ({1e6 * (tagged - untagged) / lines:.1f} us a line)"),
        (label + ": lines kept", f"{kept:,} of {lines:,}, every one tagged: {kept == lines}"),
    ]


def bench_quiet(store: RunStore, steps: int) -> list[tuple[str, str]]:
    run = _start(_script("quiet_job.py", QUIET_JOB), str(steps))
    cpu = SupervisorCpu(run.supervisor_pid or 0)
    cpu.start()
    done = _wait(store, run.id)
    cpu.join()
    assert done.state == "succeeded", done.diagnosis
    return [("supervisor CPU, training-like run (tqdm + dict lines, resource recorder)",
             f"{cpu.cpu:.2f} s over {cpu.wall:.1f} s ({100 * cpu.cpu / cpu.wall:.1f}% of one core), "
             f"peak RSS {cpu.rss / 2**20:.0f} MiB")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood-lines", type=int, default=3_000_000)
    parser.add_argument("--print-lines", type=int, default=1_000_000)
    parser.add_argument("--latency-lines", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="smaller quiet run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the foreground comparison")
    parser.add_argument("--only", choices=("latency", "flood", "foreground", "tags", "quiet"), action="append",
                        help="run only these parts (repeatable)")
    parser.add_argument("--smoke", action="store_true",
                        help="--quick on the smallest runs (2,000-line floods, 3 latency lines, one foreground "
                             "round, 10 quiet steps): checks the bench runs end to end, measures nothing")
    args = parser.parse_args()
    quiet_steps = 100 if args.quick else 300
    if args.smoke:
        args.flood_lines, args.print_lines, args.latency_lines, args.rounds = 2_000, 2_000, 3, 1
        quiet_steps = 10
    store = RunStore()
    rows: list[tuple[str, str]] = []
    wanted = set(args.only or ("latency", "flood", "foreground", "tags", "quiet"))
    if "latency" in wanted:
        rows += bench_latency(store, args.latency_lines)
    if "flood" in wanted:
        rows += bench_flood(store, args.flood_lines, "buffered")
        rows += bench_flood(store, args.print_lines, "print")
    if "foreground" in wanted:
        rows += bench_foreground(args.flood_lines, args.rounds)
    if "tags" in wanted:
        rows += bench_rank_tags(store, args.print_lines)
    if "quiet" in wanted:
        rows += bench_quiet(store, quiet_steps)
    width = max(len(name) for name, _ in rows)
    print(f"run engine output path ({psutil.cpu_count()} CPUs, python {sys.version.split()[0]})")
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
