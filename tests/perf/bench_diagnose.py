"""`traindeck diagnose` on a big log, as a user runs it: the whole command in a child process, its wall time and
peak RSS (the child's, from getrusage(RUSAGE_CHILDREN)), printed as a table.

    .venv/bin/python tests/perf/bench_diagnose.py            # a 200 MB log: budget 2 s and 200 MB
    .venv/bin/python tests/perf/bench_diagnose.py --mb 1000  # any size
    .venv/bin/python tests/perf/bench_diagnose.py --smoke    # a 5 MB log: the table, not a measure

The log is generated: tqdm redraws ("\\r", a bar per step), HF Trainer dict lines, DeepSpeed INFO lines and rank
tagged output, then at its end a real failure: rank 1's CUDA OOM traceback and torchrun's ChildFailedError table
(the formats of tests/fixtures/logs/public). The diagnosis must find that failure whatever came before it; the
command reads only the log's tail (the last MiB, as the supervisor does), so its time and memory should not grow
with the log.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUDGET_S = 2.0
BUDGET_RSS_MB = 200.0

FAILURE = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/train.py", line 88, in <module>
[rank1]:     loss.backward()
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of \
79.32 GiB of which 1.12 GiB is free. Of the allocated memory 75.10 GiB is allocated by PyTorch.
W1127 10:46:27.101000 4242 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4243 closing signal \
SIGTERM
E1127 10:46:27.402000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 \
(pid: 4244) of binary: /usr/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_10:46:27
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 4244)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def _block(step: int) -> bytes:
    """One step's output: a bar redrawn ten times on one line, a dict line, a DeepSpeed line, tagged rank lines."""
    bar = "".join(f"\r {step % 100:3d}%|{'█' * (i + 1):<10}| {step}/100000 [01:{i:02d}<3:00:00,  2.51it/s]"
                  for i in range(10))
    return (f"{bar}\n{{'loss': {1.0 / (step + 1):.4f}, 'grad_norm': 0.91, 'learning_rate': 2e-05, 'epoch': 0.01}}\n"
            f"[2026-11-27 10:00:{step % 60:02d},000] [INFO] [logging.py:128:log_dist] [Rank 0] step={step}, "
            f"skipped=0, lr=[2e-05], mom=[(0.9, 0.999)]\n"
            f"[rank0]: sample {step}: tokens/s 1234.5\n[rank1]: sample {step}: tokens/s 1230.1\n").encode()


def make_log(path: Path, size_mb: float) -> int:
    target = int(size_mb * 2**20)
    written = 0
    with open(path, "wb") as f:
        step = 0
        while written < target:
            chunk = b"".join(_block(step + i) for i in range(500))
            step += 500
            f.write(chunk)
            written += len(chunk)
        tail = FAILURE.encode()
        f.write(tail)
        written += len(tail)
    return written


def run(size_mb: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as tmp:
        log = Path(tmp) / "job.log"
        size = make_log(log, size_mb)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO.parent), env.get("PYTHONPATH", "")]))
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "traindeck", "diagnose", str(log), "--exit-code", "1", "--json"],
                              capture_output=True, text=True, env=env, timeout=120)
        wall = time.perf_counter() - start
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
        if done.returncode != 0:
            raise SystemExit(f"traindeck diagnose failed: {done.stderr.strip()}")
        d = json.loads(done.stdout)["diagnosis"]
    return {"size_mb": size / 2**20, "wall_s": wall, "rss_mb": rss_mb, "kind": d["kind"], "rank": d["rank"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200.0, help="the log's size in MB (default 200)")
    parser.add_argument("--smoke", action="store_true", help="a 5 MB log, budgets not applied")
    args = parser.parse_args()
    row = run(5.0 if args.smoke else args.mb)
    found = f"{row['kind']} rank {row['rank']}"
    print("| log MB | wall s | peak RSS MB | found |")
    print("| --- | --- | --- | --- |")
    print(f"| {row['size_mb']:.0f} | {row['wall_s']:.2f} | {row['rss_mb']:.0f} | {found} |")
    print(f"budget: wall < {BUDGET_S} s, peak RSS < {BUDGET_RSS_MB:.0f} MB")
    if (row["kind"], row["rank"]) != ("cuda_oom", 1):
        print(f"the failure at the log's end was not found: {found}")
        return 1
    if args.smoke:
        return 0
    over = row["wall_s"] >= BUDGET_S or row["rss_mb"] >= BUDGET_RSS_MB  # type: ignore[operator]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
