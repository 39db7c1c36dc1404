"""What reading what a run leaves behind costs (issue 14), printed as a table; nothing is asserted.

    .venv/bin/python tests/perf/bench_leftbehind.py
    .venv/bin/python tests/perf/bench_leftbehind.py --smoke    # 1 launch, 3 checkpoints, 40 scalars

- the launch's share: writing request.json and starting the sidecar (what launch_run adds to a launch);
- provenance: the sidecar's capture (git, versions from the training interpreter, pip freeze), wall time;
- `runs checkpoints`: a working directory with 200 HF Trainer checkpoints and 5,000 other files;
- TensorBoard: reading 20,000 scalars (4 tags x 5,000 steps) the first time, and a poll with nothing new.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="1 launch, 3 checkpoints and 50 other files, 10 TensorBoard steps: checks the bench runs "
                             "end to end")
    args = parser.parse_args()
    launches, checkpoints, others, steps = (1, 3, 50, 10) if args.smoke else (5, 200, 5000, 5000)
    work = Path(tempfile.mkdtemp(prefix="bench-leftbehind-"))
    os.environ["TRAINDECK_HOME"] = str(work / "home")
    from traindeck.backend.launch.builders import LaunchRequest
    from traindeck.backend.runs.control.resume import save_request
    from traindeck.backend.runs.record.checkpoints import find_checkpoints
    from traindeck.backend.runs.record.layout import create_run_dir
    from traindeck.backend.runs.record.provenance import capture
    from traindeck.backend.runs.record.run_store import RunStore
    from traindeck.backend.runs.supervisor.sidecar import start_sidecar

    rows: list[tuple[str, str]] = []
    script = work / "train.py"
    script.write_text("print('hi')\n")
    store = RunStore()
    launch_costs = []
    for _ in range(launches):
        run_dir = create_run_dir()
        (run_dir.path / "command.json").write_text(json.dumps({"argv": [sys.executable, str(script)],
                                                               "cwd": str(work), "python": sys.executable}))
        t0 = time.perf_counter()
        save_request(run_dir.path, LaunchRequest(script=str(script), cwd=work), preset_name=None)
        start_sidecar(run_dir.path, store.path)  # the run is unknown to the store: it reads once and ends
        launch_costs.append(time.perf_counter() - t0)
    rows.append((f"launch: request.json + start the sidecar ({launches} launches)",
                 f"median {ms(statistics.median(launch_costs))}, max {ms(max(launch_costs))}"))

    t0 = time.perf_counter()
    data = capture(run_dir.path)
    rows.append(("provenance capture (versions + pip freeze of this venv; no git here)",
                 f"{time.perf_counter() - t0:.1f} s ({len(Path(data['packages_file']).read_text().splitlines())} "
                 "packages)"))

    tree = work / "tree"
    for step in range(1, checkpoints + 1):
        folder = tree / "out" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        for name in ("trainer_state.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
            (folder / name).write_bytes(b"x" * 64)
    for i in range(others):
        (tree / "data" / f"d{i // 500}").mkdir(parents=True, exist_ok=True)
        (tree / "data" / f"d{i // 500}" / f"f{i}.txt").write_text("x")
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        found = find_checkpoints([tree])
        times.append(time.perf_counter() - t0)
    rows.append((f"runs checkpoints: {len(found)} checkpoints among {5 * checkpoints + others:,} files",
                 f"median {ms(statistics.median(times))}"))

    logdir = work / "tb"
    subprocess.run([sys.executable, "-c", (
        "import sys\nfrom torch.utils.tensorboard import SummaryWriter\n"
        f"w = SummaryWriter({str(logdir)!r})\n"
        f"for s in range({steps}):\n"
        "    for t in ('train/loss', 'train/lr', 'eval/loss', 'grad_norm'):\n"
        "        w.add_scalar(t, s * 0.001, s)\n"
        "w.close()\n")], check=True)
    from traindeck.backend.runs.record.tensorboard import TensorBoardReader

    t0 = time.perf_counter()
    reader = TensorBoardReader([logdir], since=0.0)
    first = reader.poll(set()).rows
    rows.append((f"TensorBoard: first read of {len(first):,} scalars (import included)",
                 ms(time.perf_counter() - t0)))
    t0 = time.perf_counter()
    again = reader.poll(set()).rows
    rows.append((f"TensorBoard: a poll with nothing new ({len(again)} rows)", ms(time.perf_counter() - t0)))
    store.close()

    width = max(len(what) for what, _ in rows)
    print(f"{'what'.ljust(width)}  measured")
    for what, value in rows:
        print(f"{what.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
