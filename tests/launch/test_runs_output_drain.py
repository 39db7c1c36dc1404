"""The supervisor's output path (runs/supervisor/output_drain.py) under a flood, with real supervised runs: every line in
output.log in order, parsing sampling the newest output (said once as parse_skipped), the flood's last metric and
progress in the store, also when the flood is "\r" progress-bar redraws with no newline. (Output below the flood mark
is parsed whole: test_runs_supervisor.py.)"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from support.runhelp import start, wait_finished

from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor.output_drain import PARSE_MAX_LAG

FLOOD = textwrap.dedent("""
    import sys
    n = int(sys.argv[1])
    out = open(1, "w", buffering=1 << 16, closefd=False)
    pad = "lorem ipsum dolor sit amet, consectetur adipiscing elit"
    for i in range(n):
        out.write(f"line {i:08d} {pad}\\n")
        if i % 100000 == 99999:
            out.write(f"{{'loss': {1 / (i + 1):.8f}, 'step': {i + 1}}}\\n")
    out.write(f"train: 100%|##########| {n}/{n} [00:01<00:00, 1.00it/s]\\n")
    out.write("{'loss': 0.125, 'step': %d}\\n" % n)
    out.flush()
""")


def _run(tmp_path: Path, lines: int) -> tuple[str, bytes]:
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    run = start([sys.executable, str(script), str(lines)], cwd=tmp_path)
    done = wait_finished(run.id, 300)
    assert done.state == "succeeded", done.diagnosis
    return run.id, Path(done.run_dir, "output.log").read_bytes()


def test_a_flood_keeps_every_line_and_parses_its_newest_output(tmp_path: Path) -> None:
    lines = 1_000_000  # ~70 MiB: many times PARSE_MAX_LAG
    run_id, log = _run(tmp_path, lines)
    assert len(log) > 4 * PARSE_MAX_LAG
    numbers = [int(line.split()[1]) for line in log.splitlines() if line.startswith(b"line ")]
    assert numbers == list(range(lines))  # all kept, in order, none torn
    store = RunStore()
    try:
        assert store.last_metrics(run_id)["loss"] == pytest.approx(0.125)  # the flood's last line was parsed
        record = store.get_run(run_id)
        assert record is not None and record.progress is not None
        assert record.progress["current"] == lines and record.progress["total"] == lines
        skipped = [e.text for e in store.events(run_id) if e.kind == "parse_skipped"]
        # Sampled, not parsed whole: fewer loss values than the ten the flood printed before its last.
        assert len(skipped) == 1 and "all of it is in output.log" in skipped[0]
        assert len(store.metric_series(run_id, "loss")) < 11
    finally:
        store.close()



REDRAWS = textwrap.dedent("""
    import sys
    n = int(sys.argv[1])
    out = open(2, "w", buffering=1 << 16, closefd=False)
    for i in range(1, n + 1):
        out.write(f"\\rtrain: {100 * i // n:3d}%|#####| {i}/{n} [00:01<00:01, 9999.00it/s]")
    out.flush()
""")


def test_a_flood_of_redraws_records_the_last_progress_the_output_reached(tmp_path: Path) -> None:
    # Progress is written to the store at a pace; the redraw the output ended on must still be recorded.
    script = tmp_path / "redraws.py"
    script.write_text(REDRAWS)
    steps = 1_000_000
    run = start([sys.executable, str(script), str(steps)], cwd=tmp_path)
    done = wait_finished(run.id, 120)
    assert done.state == "succeeded", done.diagnosis
    assert done.progress is not None
    assert (done.progress["current"], done.progress["total"]) == (steps, steps)
