"""A rank's progress bar through a forwarder of whole lines (pdsh, ssh, srun): the run's sitecustomize sends the
bar's newest redraw as a line of its own, a few a second, which the supervisor reads as the bar redrawn.

The hook's classes are driven directly (with a clock of the test's own), and the hook as a whole in
a child Python started the way a run's processes are (its folder first on PYTHONPATH)."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from support import REPO

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.logparse import ConsoleBuffer, LineAssembler, OutputParser, Progress
from traindeck.backend.nodes.envfile import remote_env
from traindeck.backend.slurm.script import SlurmOptions, batch_script

HOOK_DIR = REPO / "backend" / "launch" / "site_hook"
UP = b"\x1b[A\n"  # what ends a redraw sent as a line


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    # Under a name of its own: imported as `sitecustomize` it would rewire this process's stdout and stderr.
    spec = importlib.util.spec_from_file_location("traindeck_site_hook_under_test", HOOK_DIR / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Wire:
    """A rank's stream as the hook wraps it, into a file (a pipe would block the test's single thread on a long
    line); `now` is the hook's clock, `out()` what was written since its last call."""

    def __init__(self, raw_class: type, rank: str | None = "0") -> None:
        self.now = 0.0
        self._file = tempfile.TemporaryFile()
        kwargs = {"clock": lambda: self.now} if raw_class.__name__ == "_LineForwardedFile" else {}
        self.raw = raw_class(self._file.fileno(), rank, **kwargs)
        self.stream = io.TextIOWrapper(io.BufferedWriter(self.raw), encoding="utf-8", line_buffering=True)
        self._read = 0

    def draw(self, text: str) -> None:  # what tqdm does: "\r" + the bar, then a flush
        self.stream.write("\r" + text)
        self.stream.flush()

    def out(self) -> bytes:
        self.stream.flush()
        data = os.pread(self._file.fileno(), 1 << 24, self._read)
        self._read += len(data)
        return data


def _bar(n: int, total: int = 300) -> str:
    return f"train: {100 * n // total:3d}%|{'#' * (n * 20 // total):<20}| {n}/{total} [00:01<00:02, 99.00it/s]"


def test_a_bar_redrawn_100_times_a_second_goes_out_as_two_lines_a_second_then_its_last_drawing(hook) -> None:
    wire = Wire(hook._LineForwardedFile)
    for n in range(301):  # 3 s of a bar redrawn every 10 ms
        wire.now = n / 100
        wire.draw(_bar(n))
    sent = wire.out()
    # Each line is the newest drawing at that moment: the first at once, then one each LINE_EVERY_S (0.5 s).
    assert sent.split(b"\n")[:-1] == [f"[rank0]: {_bar(n)}\x1b[A".encode() for n in (0, 50, 100, 150, 200, 250, 300)]
    wire.stream.write("\n")  # tqdm's close: the last drawing stays, as a line
    assert wire.out() == f"[rank0]: {_bar(300)}\n".encode()
    # The same writes into a rank's stream where nothing forwards whole lines: no line ends before the close, so a
    # line forwarder would hold the whole bar until then.
    plain = Wire(hook._RankTaggedFile)
    for n in range(301):
        plain.draw(_bar(n))
    assert b"\n" not in plain.out()


def test_the_lines_read_as_the_bar_redrawn_with_node_and_rank_and_the_console_keeps_one(hook) -> None:
    wire = Wire(hook._LineForwardedFile, "1")
    for n in range(301):
        wire.now = n / 100
        wire.draw(_bar(n))
    wire.stream.write("\n")
    sent = wire.out()
    # pdsh puts its host in front of each line it passes on
    assembler = LineAssembler(hosts=("127.0.0.3",))
    lines = assembler.feed(b"".join(b"127.0.0.3: " + line + b"\n" for line in sent.split(b"\n")[:-1]))
    assert [(ln.node, ln.rank, ln.transient) for ln in lines] == [("127.0.0.3", 1, True)] * 7 + [("127.0.0.3", 1, False)]
    parser = OutputParser()
    counts = [item.current for ln in lines for item in parser.feed(ln) if isinstance(item, Progress)]
    assert counts == [0, 50, 100, 150, 200, 250, 300]
    console = ConsoleBuffer()
    console.extend(lines)
    assert console.texts() == [_bar(300)]


def test_lines_text_around_a_bar_and_a_bar_cleared_for_a_message_go_out_as_they_would_show(hook) -> None:
    wire = Wire(hook._LineForwardedFile)
    wire.stream.write("hello\nEpoch 1: ")
    assert wire.out() == b"[rank0]: hello\n[rank0]: Epoch 1: "
    wire.draw(_bar(1))  # the bar overwrites the text already out, as on a terminal: "\r" then the tagged drawing
    assert wire.out() == b"\r[rank0]: " + _bar(1).encode() + UP
    wire.now = 0.1
    wire.draw(_bar(2))  # within 0.5 s of the last line: held
    assert wire.out() == b""
    # tqdm.write: the bar erased with spaces, the message, its newline, the bar drawn again
    wire.stream.write("\r" + " " * 40 + "\r")
    wire.stream.write("{'loss': 0.5}\n")
    assert wire.out() == b"[rank0]: {'loss': 0.5}\n"
    wire.now = 0.2
    wire.draw(_bar(3))
    assert wire.out() == b""  # still within 0.5 s of the last redraw sent
    wire.now = 0.7
    wire.stream.write("\r\n")  # a newline straight after the "\r": the drawing before it stays
    assert wire.out() == f"[rank0]: {_bar(3)}\n".encode()
    wire.draw(" " * 40)  # tqdm(leave=False) erases its bar: nothing to send, no empty line
    wire.stream.write("\n")
    wire.stream.write("done\n")
    assert wire.out() == b"[rank0]: done\n"


def test_a_drawing_held_when_the_process_ends_is_sent_and_an_untagged_stream_converts_too(hook) -> None:
    wire = Wire(hook._LineForwardedFile, None)
    wire.draw("step 1/9")
    wire.now = 0.2
    wire.draw("step 2/9")
    assert wire.out() == b"step 1/9" + UP
    wire.raw.finish()
    wire.raw.finish()
    assert wire.out() == b"step 2/9" + UP


def _child(tmp_path: Path, **env: str) -> bytes:
    """What a run's Python prints, started with the hook: a bar drawn twice, 0.6 s apart, left without a newline."""
    script = tmp_path / "bar.py"
    script.write_text("import sys, time\nsys.stderr.write('\\rstep 1'); sys.stderr.flush(); time.sleep(0.6)\n"
                      "sys.stderr.write('\\rstep 2'); sys.stderr.flush()\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINDECK_", "RANK", "WORLD_SIZE"))}
    done = subprocess.run([sys.executable, str(script)], env={**base, "PYTHONPATH": str(HOOK_DIR), **env},
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_the_hook_converts_where_the_run_says_a_line_forwarder_is_and_nowhere_else(tmp_path: Path) -> None:
    rank = {"RANK": "0", "WORLD_SIZE": "2"}
    assert _child(tmp_path, **rank) == b"\r[rank0]: step 1\r[rank0]: step 2"  # one machine: the pipe takes "\r"
    assert _child(tmp_path, TRAINDECK_LINE_FORWARDER="1", **rank) == b"[rank0]: step 1" + UP + b"[rank0]: step 2" + UP
    # the run's first Python (a script under srun), not a rank: converted, untagged
    assert _child(tmp_path, TRAINDECK_LINE_FORWARDER="1") == b"step 1" + UP + b"step 2" + UP
    # a Python started by it (it inherits the marker): as it writes
    assert _child(tmp_path, TRAINDECK_LINE_FORWARDER="1", TRAINDECK_LINE_FORWARDER_PID="1") == b"\rstep 1\rstep 2"


def test_the_multi_node_paths_set_the_forwarder_variable_and_the_one_machine_path_does_not(tmp_path: Path) -> None:
    text, _ = remote_env("run-1", {}, {}, str(tmp_path), home=str(tmp_path))
    assert "TRAINDECK_LINE_FORWARDER=1\n" in text
    text, _ = remote_env("run-1", {"TRAINDECK_LINE_FORWARDER": "0"}, {}, str(tmp_path), home=str(tmp_path))
    assert "TRAINDECK_LINE_FORWARDER=0\n" in text and "TRAINDECK_LINE_FORWARDER=1" not in text
    (tmp_path / "train.py").write_text("")
    plan = build_plan(LaunchRequest(script="train.py", launcher="deepspeed", cwd=tmp_path), tmp_path / "run",
                      is_port_busy=lambda p: False, free_port=lambda: 29511)
    assert "TRAINDECK_LINE_FORWARDER" not in plan.env
    script = batch_script(plan, SlurmOptions(nodes=2), tmp_path / "run", "run-1", "job")
    export = 'export TRAINDECK_LINE_FORWARDER="${TRAINDECK_LINE_FORWARDER:-1}"\n'
    assert export in script and script.index(export) < script.index("srun --")


def test_text_that_keeps_growing_after_a_bar_without_a_newline_is_held_no_longer_than_drawing_max(hook) -> None:
    wire = Wire(hook._LineForwardedFile)
    wire.draw(_bar(1))
    wire.out()
    for _ in range(2 * hook.DRAWING_MAX // 1000):
        wire.stream.write("." * 1000)  # progress dots, never a newline
        wire.stream.flush()
    first, rest = wire.out().split(b"\n")
    # Past DRAWING_MAX the bar and the dots so far go out as a line; the dots after it go out as they come.
    assert first.startswith(b"[rank0]: " + _bar(1).encode() + b"...") and len(first) <= hook.DRAWING_MAX + 1100
    assert rest.startswith(b"[rank0]: ...") and len(first) + len(rest) == 2 * hook.DRAWING_MAX // 1000 * 1000 + len(
        f"[rank0]: {_bar(1)}[rank0]: ")


@pytest.mark.parametrize(("launcher", "machines", "forwarded"), [
    ("pdsh", 2, True), (None, 2, True), ("openmpi", 2, True), ("standard", 2, False), ("pdsh", 1, False)])
def test_an_accelerate_deepspeed_config_on_several_machines_sets_the_forwarder_variable(
        tmp_path: Path, launcher: str | None, machines: int, forwarded: bool) -> None:
    # accelerate starts DeepSpeed's multi-node runner, whose forwarder passes whole lines only; accelerate copies
    # the launch environment to every node (.deepspeed_env), so the variable reaches the ranks there.
    ds = {"zero_stage": 2, **({"deepspeed_multinode_launcher": launcher} if launcher else {})}
    config = tmp_path / "accelerate.yaml"
    config.write_text(yaml.safe_dump({"distributed_type": "DEEPSPEED", "num_machines": machines, "num_processes": 2,
                                      "machine_rank": 0, "main_process_ip": "127.0.0.2", "main_process_port": 29600,
                                      "deepspeed_config": ds}))
    (tmp_path / "train.py").write_text("")
    plan = build_plan(LaunchRequest(script="train.py", launcher="accelerate", config_file=config, cwd=tmp_path),
                      tmp_path / "run", is_port_busy=lambda p: False, free_port=lambda: 29511)
    assert plan.env.get("TRAINDECK_LINE_FORWARDER") == ("1" if forwarded else None)
    own = build_plan(LaunchRequest(script="train.py", launcher="accelerate", config_file=config, cwd=tmp_path,
                                   env={"TRAINDECK_LINE_FORWARDER": "0"}), tmp_path / "run2",
                     is_port_busy=lambda p: False, free_port=lambda: 29512)
    assert own.env.get("TRAINDECK_LINE_FORWARDER") == "0"  # the user's own value stays
