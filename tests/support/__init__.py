"""What the tests share: where the repository and the fixtures are, and the helpers beside this file (real runs:
runhelp; sshd and the loopback nodes: sshhelp, sshnodes, sshleftover; Slurm: slurmhelp; cgroups: cgrouphelp; Qt
events: qt_events; the interpreter probe: probe_fixture; the frozen app: frozen). tests/ is on sys.path through
pyproject's pytest `pythonpath`, so tests import `support.runhelp` and `fixtures.*` directly."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
