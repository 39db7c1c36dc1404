"""The per-node agent cut off from its watch: whether it learns it from stdin's end or from a write that fails first,
it ends the run's processes on its node, those it had not yet reported too."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import traindeck.backend.nodes.agent as agent_module

AGENT = Path(agent_module.__file__)


def test_an_agent_whose_channel_back_is_gone_ends_the_ranks_it_had_not_reported() -> None:
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env={**os.environ, "TRAINDECK_RUN_ID": "cut-run", "RANK": "1"})
    try:
        read, write = os.pipe()
        os.close(read)  # the ssh channel back is gone before the agent's first line
        agent = subprocess.Popen([sys.executable, str(AGENT), "cut-run", "1", "1"], stdin=subprocess.PIPE,
                                 stdout=write, stderr=subprocess.PIPE)
        os.close(write)
        # stdin stays open: the failed write alone tells the agent that its watch is over.
        deadline = time.monotonic() + 30
        while rank.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rank.poll() is not None, "the agent left the rank running"
        assert agent.wait(timeout=30) == 0, agent.stderr.read() if agent.stderr else ""
        agent.stdin.close()  # type: ignore[union-attr]
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()
