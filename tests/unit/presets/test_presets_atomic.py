"""A killed writer never leaves a half-written preset: a real process saving a large preset in a loop is SIGKILLed
at random moments; the file always reads as the old or the new preset, and no temporary file shows up as a preset.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from traindeck.backend.core import paths
from traindeck.backend.presets import BUILTIN_NAMES, list_presets, read_preset_file

WRITER = textwrap.dedent("""
    import os, sys, time
    import traindeck.backend.core.fileio as fileio
    from traindeck.backend.presets import Preset, save_preset

    if sys.argv[2] == "slow-disk":
        # A slow disk: fsync takes a while, so the complete temporary file sits there before the rename and a
        # kill aimed at it is sure to land mid-save. The saving code itself is unchanged.
        real_fsync = os.fsync
        def slow_fsync(fd):
            time.sleep(0.3)
            real_fsync(fd)
        fileio.os.fsync = slow_fsync

    def big(tag):
        # ~100 KB of YAML: long enough a write that random kills land in one (slow-disk rounds make sure)
        return {f"layer_{i}": {"note": tag * 120, "values": [i, i + 1, i + 2]} for i in range(600)}

    versions = [Preset(name="big", launcher="deepspeed", description=f"version {tag}",
                       deepspeed={"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}},
                       extra={"payload": big(tag), "tag": tag}) for tag in ("A", "B")]
    i = int(sys.argv[1])  # which version is saved first
    while True:
        save_preset(versions[i % 2], overwrite=True)
        i += 1
        print(i, flush=True)
""")


def _expected(tag: str) -> dict:
    return {f"layer_{i}": {"note": tag * 120, "values": [i, i + 1, i + 2]} for i in range(600)}


def _kill_when_a_write_is_under_way(directory: Path, pid: int, deadline: float) -> bool:
    """SIGKILL `pid` the moment a temporary file (a save between mkstemp and rename) appears; False if none did."""
    before = set(os.listdir(directory))  # earlier rounds' leftovers do not count
    while time.monotonic() < deadline:
        if any(name.startswith(".big.yaml.") and name not in before for name in os.listdir(directory)):
            os.kill(pid, signal.SIGKILL)
            return True
    os.kill(pid, signal.SIGKILL)
    return False


def test_sigkilled_writer_leaves_the_old_or_the_new_preset(tmp_path: Path):
    rng = random.Random(20261121)
    env = dict(os.environ)  # TRAINDECK_HOME from the fixture: the writer saves into this test's home
    directory = paths.presets_dir()
    target = directory / "big.yaml"
    expected = {"A": _expected("A"), "B": _expected("B")}
    tags_seen: list[str] = []
    mid_write = 0
    for round_ in range(12):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(round_ // 2 % 2),
                                   "slow-disk" if round_ % 4 == 3 else "normal"], env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout is not None
            first = writer.stdout.readline()  # at least one completed save
            assert first.strip(), "the writer died before saving once"
            if round_ % 2:
                # Aimed: while the temporary file is being written (and fsynced) or just before the rename.
                mid_write += _kill_when_a_write_is_under_way(directory, writer.pid, time.monotonic() + 20)
            else:
                time.sleep(rng.uniform(0.0, 1.0))  # anywhere in the save cycle
                os.kill(writer.pid, signal.SIGKILL)
        finally:
            writer.kill()
            writer.communicate(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        preset = read_preset_file(target)  # parses, and is exactly one of the two versions
        tag = preset.extra["tag"]
        assert preset.description == f"version {tag}" and preset.extra["payload"] == expected[tag]
        tags_seen.append(tag)
        assert [p.name for p in list_presets()] == list(BUILTIN_NAMES) + ["big"]
        assert [p.name for p in directory.iterdir() if not p.name.startswith(".")] == ["big.yaml"]
    leftovers = [p.name for p in directory.iterdir() if p.name.startswith(".")]
    assert all(name.startswith(".big.yaml.") and name.endswith(".tmp") for name in leftovers)
    assert mid_write >= 3, "the aimed kills never caught a write in progress"
    assert len(leftovers) >= 3  # at least the slow-disk kills interrupted saves; their leftovers stay hidden
    print(f"\n12 SIGKILLs ({mid_write} during a write): the preset read back whole every time "
          f"(versions {''.join(tags_seen)}); {len(leftovers)} hidden temp file(s) left, none listed as a preset")
