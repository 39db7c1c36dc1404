"""Node tags: pdsh's `HOST: ` in front of a node's lines, then the run's `[rankN]: ` tag, both kept per line."""

from __future__ import annotations

import json
from pathlib import Path

from traindeck.backend.cli.run_follow import line_text
from traindeck.backend.logparse import LineAssembler
from traindeck.backend.runs.record.log_follow import LogReader


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


def test_runs_show_reads_per_node_hosts_ranks_and_peaks(tmp_path: Path) -> None:
    from traindeck.backend.runs.control.node_report import node_text, nodes_summary

    assert nodes_summary(tmp_path) is None  # one machine: no `nodes`
    (tmp_path / "nodes.json").write_text(json.dumps({"hosts": [{"host": "h1", "slots": 1, "ranks": [0]},
                                                               {"host": "h2", "slots": 1, "ranks": [1]}]}))
    (tmp_path / "nodes_state.json").write_text(json.dumps({"nodes": [
        {"host": "h2", "peaks": {"ranks_rss_bytes": 2**30, "ram_used_bytes": 3 * 2**30, "ram_total_bytes": 8 * 2**30,
                                 "cpu_percent": 87.0}, "reachable": False, "unreachable": "ssh exit 255",
         "ended": {"1": 1.0}}]}))
    nodes = nodes_summary(tmp_path)
    assert nodes is not None and [n["host"] for n in nodes] == ["h1", "h2"]
    assert nodes[0]["peaks"] == {} and nodes[1]["ended_ranks"] == [1]
    assert node_text(nodes[1]) == ("h2  ranks 1: peak ranks RSS 1.00 GiB, peak RAM used 3.00 GiB of 8.00 GiB, "
                                   "peak CPU 87%; UNREACHABLE (ssh exit 255)")
