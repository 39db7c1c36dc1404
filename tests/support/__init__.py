"""What the tests share: where the repository and the fixtures are, and the helpers beside this file (real runs:
runhelp; sshd and the loopback nodes: sshhelp, sshnodes, sshleftover; Slurm: slurmhelp; cgroups: cgrouphelp; Qt
events: qt_events; the interpreter probe: probe_fixture; the frozen app: frozen). tests/ is on sys.path through
pyproject's pytest `pythonpath`, so tests import `support.runhelp` and `fixtures.*` directly."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"


def real_corpus() -> Path | None:
    """The corpus of real configs fetched from public repositories: TRAINDECK_CORPUS, else ../shared/corpus; None
    where neither holds its manifest (the tests that need it skip and say so)."""
    for candidate in (os.environ.get("TRAINDECK_CORPUS"), REPO.parent / "shared" / "corpus"):
        if candidate and (Path(candidate) / "manifest.tsv").is_file():
            return Path(candidate)
    return None
