"""Every benchmark in tests/perf runs end to end: each bench_*.py's `--smoke` form, as a script, exits 0 and prints
its table.

The benchmarks are scripts that print tables (`make bench`), never imported by the suite, so without this a change
elsewhere can break one unseen. `--smoke` runs a bench's own code path on its smallest sizes (seconds, not
minutes) and leaves its speed budgets out of the exit code: this checks that the bench still runs, not how fast
the machine is. Each runs in a child process, as `make bench` runs it, with a private TRAINDECK_HOME.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import traindeck

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TIMEOUT_S = 120

# bench file -> a header or row label its table always prints.
TABLES = {
    "bench_config_fix.py": "peak RSS MB",
    "bench_diagnose.py": "| log MB | wall s | peak RSS MB | found |",
    "bench_exact_values.py": "sidecar polls: all",
    "bench_config_hostile.py": "wall s",
    "bench_gui_charts.py": "full redraw",
    "bench_gui_configure.py": "median ms",
    "bench_gui_console.py": "catch-up s",
    "bench_gui_history.py": "median ms",
    "bench_gui_launch.py": "longest UI stall",
    "bench_gui_soak.py": "rss MB/h",
    "bench_gui_startup.py": "first paint",
    "bench_leftbehind.py": "measured",
    "bench_logparse.py": "lines/s",
    "bench_monitor.py": "| what | measured | budget |",
    "bench_monitor_cadence.py": "median span ms",
    "bench_queue.py": "NaN line printed",
    "bench_remote_calls.py": "ControlMaster median/best",
    "bench_run_output.py": "run engine output path",
    "bench_step_timing.py": "median step ms, timing on",
    "bench_trial_start.py": "start (s)",
}
# Benches whose smallest form is still minutes of real training: run with the acceptance tests (make
# test-acceptance), not make test.
LONG = {"bench_trial_start.py"}


def _skip_reason(name: str) -> str | None:
    """Why this machine cannot run the bench at all, in the words the suite's own tests skip with."""
    if name == "bench_remote_calls.py":
        from support.sshhelp import _why_not

        why = _why_not()
        return f"remote-machine tests skipped: {why}" if why else None
    return None


def test_every_bench_has_a_smoke_entry() -> None:
    assert sorted(p.name for p in HERE.glob("bench_*.py")) == sorted(TABLES)


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.acceptance] if name in LONG else [])
                                  for name in sorted(TABLES)], ids=lambda name: name.removesuffix(".py"))
def test_bench_smoke(name: str, tmp_path: Path) -> None:
    why = _skip_reason(name)
    if why:
        pytest.skip(why)
    # The child imports the traindeck this test imports (a checkout on PYTHONPATH, or the installed one).
    package_root = str(Path(traindeck.__file__).resolve().parent.parent)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TRAINDECK_HOME=str(tmp_path / "home"),
               TRAINDECK_NO_CLOSE_PROMPT="1",
               PYTHONPATH=os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    # Scratch folders a bench makes and leaves (its runs' logs and stores) land in tmp_path, not /tmp; the remote
    # bench keeps the system's, as its ssh control sockets need a short path.
    if name != "bench_remote_calls.py":
        (tmp_path / "tmp").mkdir()
        env["TMPDIR"] = str(tmp_path / "tmp")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(HERE / name), "--smoke"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S * (5 if name in LONG else 1), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"{name} --smoke ran past {TIMEOUT_S} s; its output so far:\n{out[-3000:]}")
    took = time.monotonic() - started
    output = f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    if name == "bench_remote_calls.py" and "SshdNotStarted" in done.stderr:
        # Its sshd could not start (the port held by another session's sshd, say): a skip, as the fixture does.
        pytest.skip("remote-machine tests skipped: " + done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, f"{name} --smoke exited {done.returncode} after {took:.1f} s\n{output}"
    assert TABLES[name] in done.stdout, f"{name} --smoke printed no table ({TABLES[name]!r} missing)\n{output}"
