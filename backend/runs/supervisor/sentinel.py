"""The sentinel: a tiny process that outlives a killed supervisor just long enough to end the run's processes.

`python -m traindeck.backend.runs.supervisor.sentinel RUN_ID STORE` is started by the supervisor with stdin on a pipe only
the supervisor writes to. A supervisor that ends normally writes "done" before closing it; if the pipe closes
without it (the supervisor was SIGKILLed, or crashed in C), the sentinel ends every process carrying the run's
marker, marks the run lost and exits. The launcher dies with the supervisor anyway (PR_SET_PDEATHSIG); the
sentinel is for the ranks below it, which torchrun and deepspeed leave behind when their parent vanishes.
"""

from __future__ import annotations

import signal
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m traindeck.backend.runs.supervisor.sentinel RUN_ID STORE", file=sys.stderr)
        return 2
    run_id, store_path = args
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    data = sys.stdin.buffer.read()
    if b"done" in data:
        return 0
    # Imported only now: a sentinel that is never needed stays a few MB of idle interpreter.
    from traindeck.backend.runs.record.run_store import RunStore
    from traindeck.backend.runs.supervisor.liveness import end_lost_run

    with RunStore(store_path) as store:
        end_lost_run(store, run_id, "the supervisor process died (killed or crashed)",
                     report=lambda text: print(f"sentinel: {text}", file=sys.stderr, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
