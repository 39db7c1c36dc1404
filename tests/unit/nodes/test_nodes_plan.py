"""Multi-node launch plans (no process started): hostfile reading and writing with line-numbered errors, the
runner's options (--master_addr always the first host, --ssh_port), what environment reaches the other nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.nodes.envfile import ENV_FILE
from traindeck.backend.nodes.hostfile import Host, HostfileError, read_hostfile, write_hostfile
from traindeck.backend.nodes.node_plan import NODES_FILE


def test_hostfile_problems_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text("# cluster\nnode1 slots=8\n\nnode2 slots=zero\nnode3\nnode1 slots=2\nno;de slots=1\n")
    with pytest.raises(HostfileError) as caught:
        read_hostfile(path)
    assert caught.value.problems == [
        f"{path}, line 4: slots: 'zero' is not a whole number of 1 or more",
        f"{path}, line 5: expected 'HOST slots=N', got 'node3'",
        f"{path}, line 6: host node1 is already on line 2",
        f"{path}, line 7: host 'no;de' is not a host name or address",
    ]


def test_hostfile_round_trip_is_atomic_and_refuses_what_it_could_not_read(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    write_hostfile(path, [Host("10.0.0.1", 4), Host("node-b", 2)])
    assert path.read_text() == "10.0.0.1 slots=4\nnode-b slots=2\n"
    assert [(h.name, h.slots, h.line) for h in read_hostfile(path)] == [("10.0.0.1", 4, 1), ("node-b", 2, 2)]
    with pytest.raises(HostfileError):
        write_hostfile(path, [Host("a b", 1)])
    assert path.read_text() == "10.0.0.1 slots=4\nnode-b slots=2\n"  # untouched


def test_a_hostfile_plan_names_the_first_host_as_master_and_carries_only_safe_variables(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.2 slots=2\n127.0.0.3 slots=1\n")
    run_dir = tmp_path / "runs" / "20261124-050000-abcd"
    plan = build_plan(LaunchRequest(script="train.py", launcher="deepspeed", cwd=tmp_path, hostfile=hostfile,
                                    ssh_port=2222, env={"MY_SETTING": "a b", "HF_TOKEN": "hf_" + "x" * 34,
                                                        "WEIRD": 'say "hi"'}),
                      run_dir, is_port_busy=lambda p: False, free_port=lambda: 29511)
    assert plan.errors == [], plan.errors
    argv = plan.argv[plan.argv.index("deepspeed.launcher.runner") + 1:]
    assert argv == ["--master_port", "29511", "--hostfile", str(hostfile), "--master_addr", "127.0.0.2",
                    "--no_ssh_check", "--ssh_port", "2222", "train.py"]
    assert plan.nproc == 3  # every host's slots
    env_file = plan.files[ENV_FILE]
    assert "TRAINDECK_RUN_ID=20261124-050000-abcd\n" in env_file and "MY_SETTING=a b\n" in env_file
    assert "HF_TOKEN" not in env_file and "hf_" not in env_file and "WEIRD" not in env_file
    assert plan.env["DS_ENV_FILE"] == str(run_dir / ENV_FILE)
    assert any(w.startswith("HF_TOKEN not sent to the other nodes") for w in plan.warnings), plan.warnings
    assert any(w.startswith("WEIRD is not sent") for w in plan.warnings), plan.warnings
    nodes = json.loads(plan.files[NODES_FILE])
    assert nodes["hosts"] == [{"host": "127.0.0.2", "slots": 2, "ranks": [0, 1]},
                              {"host": "127.0.0.3", "slots": 1, "ranks": [2]}]


def test_a_bad_hostfile_stops_the_plan_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.2 slots=1\n127.0.0.3 slots=-1\n")
    plan = build_plan(LaunchRequest(script="train.py", launcher="deepspeed", cwd=tmp_path, hostfile=hostfile),
                      tmp_path / "run", is_port_busy=lambda p: False, free_port=lambda: 29511)
    assert plan.errors == [f"{hostfile}, line 2: slots: '-1' is not a whole number of 1 or more"]
