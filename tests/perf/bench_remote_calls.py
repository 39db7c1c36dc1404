"""What one call to a remote traindeck costs, with and without the dashboard's persistent ssh connection.

    .venv/bin/python tests/perf/bench_remote_calls.py          # root and openssh-server: a real sshd on 127.0.0.4:2224
    .venv/bin/python tests/perf/bench_remote_calls.py --smoke  # one call of each kind

Rows: a fresh `ssh` per call (TCP, key exchange, authentication each time) against calls through the ControlMaster
(backend/remote/session.py), for `true` (ssh alone), `traindeck --version` and `runs list --json` (ssh plus the
remote traindeck's start). Median and best of N calls, wall time; on a loaded machine compare the columns, not
the absolute figures.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for the sshd helper

from support.sshhelp import running_sshd  # noqa: E402

from traindeck.backend.remote.session import Session  # noqa: E402
from traindeck.backend.remote.ssh import Target, remote_command, ssh_argv  # noqa: E402

N = 5


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=120)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=N, help="calls of each kind, with and without the connection")
    parser.add_argument("--smoke", action="store_true", help="one call of each kind: checks the bench runs end to end")
    args = parser.parse_args()
    calls = 1 if args.smoke else args.calls
    with running_sshd() as remote:
        target = Target(remote.host, remote.traindeck, str(remote.ssh_config))
        session = Session(target)
        started = time.perf_counter()
        session.open()
        opened = time.perf_counter() - started
        rows = []
        try:
            for label, args in (("true (ssh alone)", None), ("traindeck --version", ["--version"]),
                                ("traindeck runs list --json", ["runs", "list", "--json"])):
                command = "true" if args is None else remote_command(target, args, end_with_stdin=False)
                fresh = [timed(ssh_argv(target, command)) for _ in range(calls)]
                kept = [timed(ssh_argv(target, command, control_path=session.control)) for _ in range(calls)]
                rows.append((label, fresh, kept))
        finally:
            session.close()
    print(f"connect (ControlMaster up + traindeck --version there): {opened * 1000:.0f} ms")
    print(f"{'call':30} {'fresh ssh median/best':>24} {'ControlMaster median/best':>28}")
    for label, fresh, kept in rows:
        print(f"{label:30} {statistics.median(fresh) * 1000:>14.0f} / {min(fresh) * 1000:>5.0f} ms"
              f" {statistics.median(kept) * 1000:>18.0f} / {min(kept) * 1000:>5.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
