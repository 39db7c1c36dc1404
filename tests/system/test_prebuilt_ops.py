"""`make setup` builds the DeepSpeed ops runs load (backend/launch/prebuild_ops.py), so no run and no test compiles
one side by side with another: CI once spent 14 minutes compiling async_io inside the ZeRO-Infinity test beside
another test's fused_adam build, and three acceptance tests ran out of time. Run again against the set-up's folder,
the prebuild finds every op already built, and says so, op by op."""

from __future__ import annotations

import os
import re
import sys

import pytest

from traindeck.backend.launch.builders import LIBAIO_HEADER
from traindeck.backend.launch.prebuild_ops import ALREADY_BUILT_S, prebuild

pytestmark = pytest.mark.train
pytest.importorskip("deepspeed", reason="needs the train extra")


@pytest.mark.timeout(400)
def test_setup_left_every_op_a_run_loads_built(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)  # the set-up's own folder for this interpreter
    # Built ops load in seconds; an op the set-up left unbuilt would compile for minutes: the build is cut short
    # (ninja and its compilers with it, its lock cleared) and the test fails.
    code = prebuild(sys.executable, timeout_s=300)
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    ready = dict(re.findall(r"^  (\w+) ready in (\d+) s", said.out, flags=re.M))
    expected = {"cpu_adam", "deepspeed_shm_comm", "fused_adam"}  # on DeepSpeed's CPU accelerator (no GPU here)
    if os.path.exists(LIBAIO_HEADER):
        expected.add("async_io")
    else:
        assert "async_io: skipped, cannot build here (no libaio headers)" in said.out, said.out
    assert set(ready) == expected, said.out + said.err
    slow = {op: seconds for op, seconds in ready.items() if int(seconds) >= ALREADY_BUILT_S}
    assert not slow, f"built now, not by the set-up: {slow}\n{said.out}"
    assert said.out.count("(already built)") == len(expected), said.out
