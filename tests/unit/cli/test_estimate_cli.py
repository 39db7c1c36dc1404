"""`traindeck estimate` and `traindeck advise` as a user runs them: output, JSON keys, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import FIXTURES

ROW_KEYS = {
    "strategy", "zero_stage", "offload_optimizer", "offload_param", "gpu_bytes_per_device", "cpu_bytes_per_node",
    "activation_bytes_per_device", "gpu_total_bytes_per_device", "fits",
}
MACHINE = ["--no-detect", "--gpus-per-node", "1", "--gpu-mem", "80", "--host-mem", "256"]


def traindeck(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=timeout
    )


def test_estimate_json_rows():
    result = traindeck("estimate", "--params", "7B", "--largest-layer", "131072000", *MACHINE, "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert isinstance(rows, list) and len(rows) >= 10
    for row in rows:
        assert ROW_KEYS <= row.keys()
        assert row["offload_optimizer"] in ("none", "cpu", "nvme") and row["offload_param"] in ("none", "cpu", "nvme")
        assert row["fits"] in (True, False)
    by = {r["strategy"]: r for r in rows}
    # DeepSpeed's arithmetic, one GPU: ZeRO-2 2 + 18 bytes/param; with offload 2 on the GPU, 16 x 1.5 on the host.
    assert by["zero2"]["gpu_bytes_per_device"] == 20 * 7_000_000_000
    assert by["zero2+opt-cpu"]["cpu_bytes_per_node"] == 7_000_000_000 * 16 * 1.5
    # ZeRO-3 with both offloads and zero_init: 4 x largest layer on the GPU, 18 x 1.5 per param on the host.
    assert by["zero3+opt-cpu+param-cpu"]["gpu_bytes_per_device"] == 4 * 131_072_000
    assert by["zero3+opt-cpu+param-cpu"]["cpu_bytes_per_node"] == 7_000_000_000 * 18 * 1.5
    assert by["zero3+opt-nvme+param-nvme"]["offload_param"] == "nvme"
    assert {"fsdp-shard-grad-op", "fsdp-full-shard", "fsdp-full-shard+offload"} <= by.keys()


def test_estimate_table_says_what_it_assumed():
    result = traindeck("estimate", "--params", "1.5B", *MACHINE)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "largest layer not given: assumed the embedding" in out
    # 1.5B, one 80 GiB GPU: 16 x 1.5e9 = 22.4 GiB of model states, so plain data parallel fits.
    plain = next(line for line in out.splitlines() if line.startswith("plain data parallel"))
    assert plain.split()[-1] == "fits" and " 22.4 " in plain
    assert "verdict" in out.splitlines()[out.splitlines().index(plain) - 2]


def test_estimate_from_a_model_config():
    pytest.importorskip("transformers")
    result = traindeck("estimate", "--model-config", str(FIXTURES / "models" / "gpt2-small"), *MACHINE)
    assert result.returncode == 0, result.stderr
    assert "124.4M params" in result.stdout and "tied embeddings" in result.stdout
    assert "GPT2LMHeadModel" in result.stdout
    assert "sequence 1024" in result.stdout  # capped at GPT-2's n_positions


def test_advise_json_and_exit_codes():
    result = traindeck("advise", "--params", "7B", "--largest-layer", "131M", *MACHINE, "--json")
    assert result.returncode == 0, result.stderr
    advice = json.loads(result.stdout)
    assert ROW_KEYS | {"reason", "preset"} <= advice.keys()
    assert advice["strategy"] == "zero2+opt-cpu" and advice["preset"] == "zero2-offload" and advice["fits"] is True
    assert [r["strategy"] for r in advice["rejected"]] == ["dp", "zero1", "zero2"]

    text = traindeck("advise", "--params", "125M", *MACHINE)
    assert text.returncode == 0 and "preset single-process" in text.stdout

    nothing = traindeck("advise", "--params", "70B", "--no-detect", "--gpu-mem", "8", "--host-mem", "16",
                        "--disk-free", "100", "--json")
    assert nothing.returncode == 1
    assert json.loads(nothing.stdout)["preset"] is None


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["estimate", "--params", "abc"], "--params: cannot read 'abc'"),
        (["estimate", "--params", "0"], "--params: must be at least 1"),
        (["estimate", "--params", "1B", "--gpus-per-node", "x"], "--gpus-per-node"),
        (["estimate", "--params", "1B", "--gpu-mem", "lots"], "--gpu-mem: cannot read"),
        (["estimate", "--params", "1B", "--largest-layer", "2B"], "larger than --params"),
        (["estimate"], "one of the arguments --params --model-config is required"),
        (["estimate", "--params", "1B", "--model-config", "x.json"], "not allowed with argument"),
        (["estimate", "--model-config", "/nonexistent/config.json"], "model config not found"),
        (["advise", "--params", "1B", "--no-detect"], "GPU memory unknown"),
        (["advise", "--params", "1B", "--precision", "fp8"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line(args, fragment):
    result = traindeck(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traindeck: "), result.stderr
    assert fragment in lines[0]
