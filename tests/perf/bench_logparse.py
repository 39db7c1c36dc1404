"""Throughput of the log parsers on realistic output: prints a table (MB/s, lines/s).

    .venv/bin/python tests/perf/bench_logparse.py              # 1M lines per corpus (a few minutes)
    .venv/bin/python tests/perf/bench_logparse.py --lines 200000
    .venv/bin/python tests/perf/bench_logparse.py --smoke           # 500 lines, once: the table, not a measure

Corpora are built from the captured fixtures in tests/fixtures/logs (real tqdm, HF Trainer, DeepSpeed, accelerate
and torchrun output), repeated and mixed:
  flood        `line 123: lorem ipsum ...` (what a print flood looks like; ~70 bytes a line)
  log-text     fixture lines that carry no progress or metric (warnings, DeepSpeed INFO lines and its config dump
               with lines up to 1.8 kB, tracebacks, ...), uniformly drawn: ~92 bytes a line
  mixed        what a training run prints: ~70% ordinary text, ~15% tqdm redraws ("\\r"), dict, DeepSpeed,
               loss and report lines; ANSI colour on some lines
  bars         only tqdm redraws (a script that redraws its bar with mininterval=0)
  loss-lines   only "Step 10/100 | loss: 0.532 | lr: 1e-4"-style lines (the generic heuristic's full path)
The supervisor's real flood test (3M lines through the pipe) is the run engine's benchmark; this one measures
the parsing it adds: LineAssembler on 64 KiB chunks, OutputParser per line, and both together.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "logs"

try:
    from traindeck.backend.logparse import LineAssembler, OutputParser
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(HERE.parents[2]))
    from traindeck.backend.logparse import LineAssembler, OutputParser

CHUNK = 64 * 1024


def _fixture_lines() -> tuple[list[str], list[str]]:
    """(ordinary lines, lines that carry something) from the captured fixtures, decoded like the assembler does."""
    ordinary, rich = [], []
    for path in sorted(FIXTURES.glob("*.raw")):
        asm = LineAssembler()
        lines = asm.feed(path.read_bytes()) + asm.flush()
        for ln in lines:
            if not ln.text.strip():
                continue
            parser = OutputParser(clock=lambda: 0.0)  # fresh: nothing held back, nothing remembered
            found = parser.feed(ln, 0.0) + parser.flush()
            (rich if found else ordinary).append(ln.text)
    return ordinary, rich


def build_corpora(n: int, seed: int = 0) -> dict[str, bytes]:
    rnd = random.Random(seed)
    ordinary, _ = _fixture_lines()
    out: dict[str, bytes] = {}

    out["flood"] = "".join(f"line {i}: lorem ipsum dolor sit amet, consectetur adipiscing elit\n" for i in range(n)).encode()
    out["log-text"] = ("\n".join(rnd.choice(ordinary) for _ in range(n)) + "\n").encode()

    def bar(i: int, total: int) -> str:
        pct = 100 * i // total
        fill = "█" * (pct // 10) + " " * (10 - pct // 10)
        return f"\r{pct:3d}%|{fill}| {i}/{total} [00:{i % 60:02d}<01:{(total - i) % 60:02d},  {3 + i % 7}.{i % 100:02d}it/s, loss={1 / (i + 1):.3g}]"

    parts: list[str] = []
    step = 0
    total = max(1, n // 10)
    count = 0
    while count < n:
        r = rnd.random()
        if r < 0.70:
            line = rnd.choice(ordinary)
            if rnd.random() < 0.1:
                line = f"\x1b[33m{line}\x1b[0m"
            parts.append(line + "\n")
        elif r < 0.85:
            step += 1
            parts.append(bar(step, total))  # a redraw: terminated by the next "\r" or "\n"
        elif r < 0.89:
            parts.append(f"\n{{'loss': '{1 / (step + 1):.4g}', 'grad_norm': '1.23', 'learning_rate': '5e-05', 'epoch': '0.5'}}\n")
        elif r < 0.93:
            parts.append(f"[2026-11-21 17:26:06,122] [INFO] [logging.py:123:log_dist] [Rank 0] step={step}, skipped=0, lr=[0.0005], mom=[(0.9, 0.999)]\n")
        elif r < 0.97:
            parts.append(f"Step {step}/{total} | loss: {1 / (step + 1):.4f} | lr: 1e-4\n")
        else:
            parts.append(f'@traindeck {{"kind":"metrics","step":{step},"values":{{"loss":0.5}},"v":1,"t":{1e9 + step}}}\n')
        count += 1
    out["mixed"] = "".join(parts).encode()

    out["bars"] = ("".join(bar(i % total + 1, total) for i in range(n)) + "\n").encode()
    out["loss-lines"] = ("".join(f"Step {i}/{n} | loss: {1 / (i + 1):.4f} | lr: 1e-4\n" for i in range(n))).encode()
    return out


# CPU time of this process: on a shared machine wall time also counts the other processes' turns.
clock = time.process_time


def bench_assembler(data: bytes) -> tuple[float, int]:
    asm = LineAssembler()
    t0 = clock()
    count = 0
    for i in range(0, len(data), CHUNK):
        count += len(asm.feed(data[i:i + CHUNK]))
    count += len(asm.flush())
    return clock() - t0, count


def bench_parser(lines: list) -> float:
    parser = OutputParser(clock=lambda: 0.0)
    feed = parser.feed
    t0 = clock()
    for ln in lines:
        feed(ln, 0.0)
    parser.flush()
    return clock() - t0


def run(n: int, repeat: int = 3) -> list[tuple[str, str, float, float, int]]:
    rows = []
    for name, data in build_corpora(n).items():
        asm = LineAssembler()
        lines = asm.feed(data) + asm.flush()
        t_asm, count = min((bench_assembler(data) for _ in range(repeat)), key=lambda r: r[0])
        t_par = min(bench_parser(lines) for _ in range(repeat))
        mb = len(data) / 1e6
        rows.append((name, "LineAssembler", mb / t_asm, count / t_asm, count))
        rows.append((name, "OutputParser", mb / t_par, len(lines) / t_par, len(lines)))
        rows.append((name, "both", mb / (t_asm + t_par), count / (t_asm + t_par), count))
    return rows


def print_table(rows: list[tuple[str, str, float, float, int]]) -> None:
    print(f"\n{'corpus':<12} {'stage':<14} {'MB/s':>9} {'lines/s':>12} {'lines':>10}")
    for corpus, stage, mbs, lps, count in rows:
        print(f"{corpus:<12} {stage:<14} {mbs:>9.1f} {lps:>12,.0f} {count:>10,}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines per corpus")
    ap.add_argument("--repeat", type=int, default=3, help="best of N (CPU time)")
    ap.add_argument("--smoke", action="store_true",
                    help="500 lines per corpus, once: checks the bench runs end to end, measures nothing")
    args = ap.parse_args(argv)
    if args.smoke:
        args.lines, args.repeat = 500, 1
    ref = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
    print(f"python {sys.version.split()[0]}, {args.lines:,} lines per corpus, {CHUNK // 1024} KiB chunks, "
          f"best of {args.repeat} (CPU time); machine speed: sum(range(1000)) = {ref:.1f} us")
    print_table(run(args.lines, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
