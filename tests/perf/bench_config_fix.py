"""`config check` and `config fix` on big DeepSpeed JSON files of several shapes, through the real CLI.

    .venv/bin/python tests/perf/bench_config_fix.py          # 7 MB per shape (a minute or so)
    .venv/bin/python tests/perf/bench_config_fix.py --smoke  # 0.05 MB per shape: the table, not a measure

Shapes: many unknown keys at the top level (DeepSpeed ignores them), many unknown keys inside zero_optimization
(DeepSpeed refuses them), nesting a few thousand levels deep (refused by the depth bound), one long list of
numbers, one long list of small mappings, and one unknown section of many small mappings.
Each command is one `python -m traindeck` child, timed whole (interpreter start included); peak RSS comes from
/usr/bin/time where there is one, else os.wait4. Goal: each command on a 7 MB file of any shape in < 5 s.

Correctness, checked at every size: a file with many unknown keys gets its first few listed and the rest in one
"... and N more unknown keys" line (never a line per key), and each command ends with its exit code and summary.
A failed check exits 1; under --smoke a time over budget is printed but leaves the exit code alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BUDGET_S = 5.0
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
# Lines a report of many unknown keys may have about them: the first few listed, then one summary line.
MAX_UNKNOWN_LINES = 25

_HEAD = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": True}}


def _filler(count: int) -> dict[str, str]:
    """`count` keys no description knows and no known key resembles, ~60 bytes a line once indented."""
    return {f"custom_setting_{i:07d}": f"value number {i:07d} of the pile" for i in range(count)}


def top_unknown(size: int) -> str:
    count = max(30, size // 60)
    return json.dumps({**_HEAD, **_filler(count)}, indent=2) + "\n"


def nested_unknown(size: int) -> str:
    count = max(30, size // 64)
    return json.dumps({**_HEAD, "zero_optimization": {"stage": 2, **_filler(count)}}, indent=2) + "\n"


def deep(size: int) -> str:
    """3,000 levels of one unknown key, then a padding value to make up the size."""
    depth = 3000
    pad = max(0, size - depth * 8 - 64)
    return ('{"train_micro_batch_size_per_gpu": 4, "pad": "' + "x" * pad + '", "deep": ' + '{"a": ' * depth + "1"
            + "}" * depth + "}\n")


def long_list(size: int) -> str:
    count = max(10, size // 6)
    return '{"train_micro_batch_size_per_gpu": 4, "layers": [' + ", ".join(["1234"] * count) + "]}\n"


def list_of_mappings(size: int) -> str:
    count = max(10, size // 12)
    return '{"train_micro_batch_size_per_gpu": 4, "layers": [' + ", ".join(f'{{"a": {i % 1000}}}' for i in range(count)) \
        + "]}\n"


def many_mappings(size: int) -> str:
    """One unknown section of many small mappings (a generated per-module table)."""
    count = max(10, size // 30)
    return json.dumps({**_HEAD, "modules": {f"module_{i:07d}": {"a": i} for i in range(count)}}) + "\n"


# shape -> (writer, expects the "... and N more unknown keys" line)
SHAPES: dict[str, tuple[Callable[[int], str], bool]] = {
    "unknown keys, top": (top_unknown, True),
    "unknown keys, nested": (nested_unknown, True),
    "3,000 levels deep": (deep, False),
    "long list": (long_list, False),
    "list of mappings": (list_of_mappings, False),
    "many mappings": (many_mappings, False),
}


def run(args: list[str], home: Path) -> tuple[float, float, int, str, str]:
    """(wall s, peak RSS MB, exit code, stdout, stderr) of one `traindeck` child."""
    env = dict(os.environ, TRAINDECK_HOME=str(home))
    with tempfile.NamedTemporaryFile("r", suffix=".time") as measured:
        prefix = [GNU_TIME, "-f", "%M", "-o", measured.name] if GNU_TIME else []
        started = time.perf_counter()
        done = subprocess.run([*prefix, sys.executable, "-m", "traindeck", *args], env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        if GNU_TIME:
            rss = int(measured.read().split()[-1]) / 1024
        else:  # pragma: no cover - includes the memory of this script the child was forked from
            import resource

            rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return wall, rss, done.returncode, done.stdout, done.stderr


def _verdict(command: str, code: int, out: str, err: str, many_unknown: bool) -> str | None:
    """What is wrong with one command's result, or None."""
    if "Traceback" in err or code not in (0, 1):
        return f"exit {code}: {err.strip().splitlines()[-1:] or ['(no stderr)']}"
    lines = (out + err).splitlines()
    if command == "check" and not (err.strip().splitlines() or [""])[-1].startswith("traindeck: "):
        return "no summary line on stderr"
    if command == "fix" and not err.strip() and not out.strip():
        return "printed nothing"
    if many_unknown:
        about = [line for line in lines if "unknown key" in line]
        summary = [line for line in about if "more unknown keys" in line]
        if command == "check" and len(summary) != 1:
            return f"{len(summary)} '... more unknown keys' lines (expected 1)"
        if len(about) > MAX_UNKNOWN_LINES:
            return f"{len(about)} lines about unknown keys (at most {MAX_UNKNOWN_LINES})"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="0.05 MB per shape: checks the bench runs end to end")
    parser.add_argument("--mb", type=float, default=7.0, help="size of each generated file (default 7)")
    parser.add_argument("--shape", choices=list(SHAPES), action="append", help="only this shape (repeatable)")
    args = parser.parse_args()
    size = int((0.05 if args.smoke else args.mb) * 1024 * 1024)
    rows: list[tuple[str, float, float, float, float, str]] = []
    failures: list[str] = []
    slow: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        home = directory / "home"
        for shape in args.shape or list(SHAPES):
            writer, many_unknown = SHAPES[shape]
            path = directory / (shape.replace(" ", "_").replace(",", "") + ".json")
            path.write_text(writer(size), encoding="utf-8")
            mb = path.stat().st_size / 2**20
            check_s, check_rss, code, out, err = run(["config", "check", str(path)], home)
            problems = [f"config check: {p}" for p in [_verdict("check", code, out, err, many_unknown)] if p]
            fix_s, fix_rss, code, out, err = run(["config", "fix", str(path), "-o", str(path) + ".out"], home)
            problems += [f"config fix: {p}" for p in [_verdict("fix", code, out, err, many_unknown)] if p]
            failures += [f"{shape} / {p}" for p in problems]
            slow += [f"{shape} / config {what}: {took:.1f} s > {BUDGET_S} s"
                     for what, took in (("check", check_s), ("fix", fix_s)) if took > BUDGET_S]
            rows.append((shape, mb, check_s, fix_s, max(check_rss, fix_rss), "FAILED" if problems else "ok"))

    print(f"{'shape':<22} {'size MB':>7} {'check s':>8} {'fix s':>7} {'peak RSS MB':>12}  result")
    for shape, mb, check_s, fix_s, rss, result in rows:
        print(f"{shape:<22} {mb:7.2f} {check_s:8.2f} {fix_s:7.2f} {rss:12.0f}  {result}")
    print(f"\nload average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for line in failures:
        print(f"FAILED: {line}")
    for line in slow:
        print(f"OVER BUDGET: {line}")
    return 1 if failures or (slow and not args.smoke) else 0


if __name__ == "__main__":
    sys.exit(main())
