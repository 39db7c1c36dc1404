"""Node tags: pdsh's `HOST: ` in front of a node's lines, then the run's `[rankN]: ` tag, both kept per line."""

from __future__ import annotations

import json
from pathlib import Path

from traindeck.backend.cli.run_follow import line_text
from traindeck.backend.logparse import LineAssembler
from traindeck.backend.runs.follow import LogReader


def test_host_prefixes_of_the_runs_hosts_become_the_lines_node() -> None:
    asm = LineAssembler(hosts=("127.0.0.2", "node-b"))
    lines = asm.feed(b"127.0.0.2: [rank0]: step 5 loss 1.0\nnode-b: [rank1]: Traceback (most recent call last):\n"
                     b"Epoch: 3\nnode-b: pdsh@vm: node-b: ssh exited with exit code 137\n")
    assert [(ln.node, ln.rank, ln.text) for ln in lines] == [
        ("127.0.0.2", 0, "step 5 loss 1.0"),
        ("node-b", 1, "Traceback (most recent call last):"),
        (None, None, "Epoch: 3"),  # not a host of the run: text
        ("node-b", None, "pdsh@vm: node-b: ssh exited with exit code 137"),
    ]
    assert line_text(lines[1]) == "node-b: [rank1]: Traceback (most recent call last):"
    # Without hosts (a one-machine run) nothing changes.
    assert LineAssembler().feed(b"127.0.0.2: x\n")[0].text == "127.0.0.2: x"


def test_a_runs_log_reader_knows_its_hosts_from_nodes_json(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps({"hosts": [{"host": "h1", "slots": 1, "ranks": [0]},
                                                               {"host": "h2", "slots": 1, "ranks": [1]}]}))
    (tmp_path / "output.log").write_bytes(b"h2: [rank1]: hello\nh1: [rank0]: hi\n")
    lines = LogReader(tmp_path / "output.log").read_new()
    assert [(ln.node, ln.rank, ln.text) for ln in lines] == [("h2", 1, "hello"), ("h1", 0, "hi")]
