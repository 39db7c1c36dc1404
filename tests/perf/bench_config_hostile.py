"""Hostile and big config files through the real CLI: wall time, CPU time and peak RSS per case and command.

    .venv/bin/python tests/perf/bench_config_hostile.py          # the whole table (a minute or two)
    .venv/bin/python tests/perf/bench_config_hostile.py --smoke  # one case, 0.05 MB pastes: the table, not a measure

Each row is one `traindeck` subprocess (`config check`, `config fix`, `presets import`) on a generated file
(tests/fixtures/hostile_configs.py); its resources come from os.wait4 on that child alone. Goals (issue 10):
every hostile case refused in one line in < 2 s and < 3 GB; `config fix` on a 7 MB pasted JSON in < 10 s.
Wall time includes the interpreter's start (~0.3 s idle) and whatever else the machine runs: the CPU column
is the child's own user+sys time, the figure to compare across loaded runs. Under --smoke a time or memory over its
budget is printed but leaves the exit code alone (the smoke form checks the path, not the speed); a case not refused
in one line still fails it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for the fixtures when run as a script

from fixtures.hostile_configs import CASES, big_pasted_json, write_case  # noqa: E402

HOSTILE_WALL_S, HOSTILE_RSS_MB, BIG_FIX_S = 2.0, 3 * 1024, 10.0
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None


def run(args: list[str], home: Path) -> tuple[float, float, float, int, str]:
    """(wall s, cpu s, peak RSS MB, exit code, stderr) of one `traindeck` child.

    Peak RSS through /usr/bin/time where there is one: os.wait4's ru_maxrss also counts the memory the child had
    as a fork of this script, before it became the traindeck process."""
    env = dict(os.environ, TRAINDECK_HOME=str(home))
    with tempfile.NamedTemporaryFile("r", suffix=".time") as measured:
        prefix = [GNU_TIME, "-f", "%M %U %S", "-o", measured.name] if GNU_TIME else []
        started = time.perf_counter()
        child = subprocess.Popen([*prefix, sys.executable, "-m", "traindeck", *args], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, env=env, text=True)
        assert child.stderr is not None
        err = child.stderr.read()  # read while waiting: a full pipe would block the child
        _pid, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        if GNU_TIME:
            rss_kb, user, system = measured.read().split()[-3:]
            return wall, float(user) + float(system), int(rss_kb) / 1024, code, err
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, code, err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="one hostile case and 0.05 MB pasted JSON: checks the bench runs end to end")
    args = parser.parse_args()
    cases = list(CASES)[:1] if args.smoke else list(CASES)
    pasted_mb = 0.05 if args.smoke else 7
    rows: list[tuple[str, str, float, float, float, int, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        home = directory / "home"
        files = {name: write_case(directory, name) for name in cases}
        big = directory / "pasted_7mb.json"
        big.write_text(big_pasted_json(pasted_mb), encoding="utf-8")
        few = directory / "mostly_strict_7mb.json"
        few.write_text(big_pasted_json(pasted_mb, slips=False), encoding="utf-8")
        for name, path in files.items():
            for command, argv in (("config check", ["config", "check", str(path)]),
                                  ("config fix", ["config", "fix", str(path), "-o", str(directory / "out")]),
                                  ("presets import", ["presets", "import", str(path), "--name", "bench"])):
                wall, cpu, rss, code, err = run(argv, home)
                lines = err.strip().splitlines()
                verdict = "one line" if len(lines) == 1 and "Traceback" not in err else f"{len(lines)} lines"
                if command == "config check":  # the summary line on stderr; the finding is the one stdout line
                    verdict = "ok" if "Traceback" not in err and code == 1 else f"exit {code}"
                rows.append((name, command, wall, cpu, rss, code, verdict))
        for label, path in (("pasted JSON, 262k slips", big), ("pasted JSON, 3 slips", few)):
            size = path.stat().st_size / 2**20
            for command, argv in ((f"config fix ({size:.1f} MB)", ["config", "fix", str(path), "-o", str(path) + ".o"]),
                                  (f"config check ({size:.1f} MB)", ["config", "check", str(path)])):
                wall, cpu, rss, code, err = run(argv, home)
                rows.append((label, command, wall, cpu, rss, code, f"exit {code}"))

    print(f"{'case':<26} {'command':<24} {'wall s':>7} {'cpu s':>6} {'RSS MB':>7} {'exit':>4}  stderr")
    failures, refusals = [], []
    for name, command, wall, cpu, rss, code, verdict in rows:
        print(f"{name:<26} {command:<24} {wall:7.2f} {cpu:6.2f} {rss:7.0f} {code:>4}  {verdict}")
        big_fix = command.startswith("config fix (")
        if big_fix and wall > BIG_FIX_S:
            failures.append(f"{name} / {command}: {wall:.1f} s > {BIG_FIX_S} s")
        if not name.startswith("pasted") and (wall > HOSTILE_WALL_S or rss > HOSTILE_RSS_MB):
            failures.append(f"{name} / {command}: {wall:.2f} s, {rss:.0f} MB")
        if not name.startswith("pasted") and verdict not in ("ok", "one line"):
            refusals.append(f"{name} / {command}: {verdict}")
    print(f"\nload average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for failure in failures + refusals:
        print(f"OVER BUDGET: {failure}")
    return 1 if refusals or (failures and not args.smoke) else 0


if __name__ == "__main__":
    sys.exit(main())
