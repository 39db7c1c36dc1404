"""The GPU acceptance check (tests/gpu/), on a machine without a GPU: acceptance.sh says so in one line, exits 0
and writes nothing; the parts that need no GPU (the table, the verdicts over the commands' JSON, the parsers, the
time limits, the wheels and the size of what travels) work on the shapes the real commands print."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from support import REPO

REPO = REPO
GPU = REPO / "tests" / "gpu"
SCRIPT = GPU / "acceptance.sh"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


check = _load("gpu_check")
prepare = _load("prepare")
probe = _load("gpu_probe")


# ---- acceptance.sh without a GPU --------------------------------------------------------------------------------
def _git_status() -> str:
    """Every changed, new and ignored file of the checkout ("" outside a git checkout)."""
    if not (REPO / ".git").exists():
        return ""
    return subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored"], capture_output=True,
                          text=True, check=True).stdout


def _fake(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


NO_GPU_CASES = {
    # This machine as it is (skipped where nvidia-smi exists: there the real check would run).
    "no nvidia-smi on PATH": lambda tmp: {},
    "nvidia-smi named but absent": lambda tmp: {"TRAINDECK_GPU_NVIDIA_SMI": str(tmp / "no-such-nvidia-smi")},
    "nvidia-smi lists no GPU": lambda tmp: {"TRAINDECK_GPU_NVIDIA_SMI": _fake(tmp / "smi", "exit 9")},
    "torch sees no CUDA": lambda tmp: {"TRAINDECK_GPU_NVIDIA_SMI": _fake(tmp / "smi", "echo 'GPU 0: fake'"),
                                       "TRAINDECK_GPU_PYTHON": _fake(tmp / "python", "exit 1")},
}


@pytest.mark.parametrize("case", list(NO_GPU_CASES))
def test_without_a_gpu_acceptance_says_so_in_one_line_and_touches_nothing(case: str, tmp_path: Path) -> None:
    if case == "no nvidia-smi on PATH" and shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: the check would really run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out, home, tmp = tmp_path / "out", tmp_path / "home", tmp_path / "tmp"
    for folder in (out, home, tmp):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINDECK_GPU_")}
    env.update(OUT=str(out), HOME=str(home), TMPDIR=str(tmp), **NO_GPU_CASES[case](bin_dir))
    before = _git_status()
    done = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: no NVIDIA GPU here ("), done.stdout
    assert lines[0].endswith("): nothing to check")
    assert done.stderr == ""
    assert [list(f.iterdir()) for f in (out, home, tmp)] == [[], [], []]
    assert _git_status() == before


def test_without_a_gpu_the_steps_driver_also_says_what_it_would_run(tmp_path: Path) -> None:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    for folder in (out, tmp):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINDECK_GPU_")}
    env.update(OUT=str(out), TMPDIR=str(tmp), TRAINDECK_GPU_DRIVER="steps_check.py", TRAINDECK_GPU_BUDGET_S="410",
               TRAINDECK_GPU_NVIDIA_SMI=str(tmp_path / "no-such-nvidia-smi"))
    before = _git_status()
    done = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("gpu-check: no NVIDIA GPU here ("), done.stdout
    plan = lines[1]
    assert plan.startswith("gpu-check: on a GPU, steps_check.py would run 4 rows ("), plan
    for row in ("overhead_gpu up to ", "fsdp2 up to ", "offload up to ", "overhead_offload up to ", "of the 410 s budget",
                "gpu-steps.md"):
        assert row in plan, (row, plan)
    assert [list(f.iterdir()) for f in (out, tmp)] == [[], []]
    assert _git_status() == before


def test_the_steps_drivers_rows_fit_its_budget_with_the_clean_up_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gpu_check", check)  # as the script finds it beside itself
    steps = _load("steps_check")
    # acceptance.sh gives the driver the budget less 10 s; the runner keeps 20 s back for the clean-up.
    expected = sum(needs for _what, needs in steps.ROWS.values()) + sum(steps.PLAN_S.values())
    assert expected <= 410 - 10 - check.Runner(Path("unused"), 0.0).reserve, expected
    for key, (_what, needs) in steps.ROWS.items():  # a row's runs fit the seconds it waits for before it starts
        assert needs >= {"overhead_gpu": 2 * steps.LIMITS["gpu"], "fsdp2": steps.LIMITS["fsdp2"],
                         "offload": steps.LIMITS["offload"], "overhead_offload": steps.LIMITS["offload_off"]}[key]


def test_the_steps_driver_writes_every_row_in_one_line_whatever_fails(tmp_path: Path) -> None:
    # traindeck cannot keep runs (its home is under a file): each row fails at its first command and says why in
    # one line; the next row still runs; the table is written and the driver exits 1, well before its deadline.
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    (tmp_path / "file").write_text("")
    env = {**os.environ, "TRAINDECK_HOME": str(tmp_path / "file" / "home"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO.parent), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(GPU / "steps_check.py"), "--out", str(out), "--work", str(work),
                           "--deadline", str(time.time() + 400)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    table = (out / "gpu-steps.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 4, table
    for row in rows:
        assert row.count("|") == 4 and "| FAIL |" in row, row
    assert sum("exited with 70: traindeck: internal error (NotADirectoryError" in row for row in rows) == 3, table
    assert "not run: the offloaded run with step timing gave no step times" in rows[3], rows[3]
    assert "Seconds per row: overhead_gpu" in table


def test_the_steps_driver_skips_the_rows_it_has_no_time_for_or_was_not_asked_for(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    argv = [sys.executable, str(GPU / "steps_check.py"), "--out", str(out), "--work", str(work), "--deadline",
            str(time.time() + 60)]
    bad = subprocess.run(argv, cwd=tmp_path, env={**os.environ, "TRAINDECK_GPU_ROWS": "fsdp2,fsdp3"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "TRAINDECK_GPU_ROWS: unknown rows fsdp3 (the rows: overhead_gpu, fsdp2," in \
        bad.stderr, bad.stderr
    done = subprocess.run(argv, cwd=tmp_path, env={**os.environ, "TRAINDECK_GPU_ROWS": "fsdp2,offload"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    table = (out / "gpu-steps.md").read_text()
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| step") or
            line.startswith("| ZeRO")}
    assert [("| INFO | not asked for" in row, "s of the time budget left, the row needs about" in row)
            for row in rows.values()] == [(True, False), (False, True), (False, True), (True, False)], table


def test_acceptance_script_is_clean_bash() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


# ---- the table --------------------------------------------------------------------------------------------------
def test_table_cells_stay_on_one_line_with_pipes_escaped() -> None:
    table = check.markdown_table([check.Row("a | b", "PASS", "x\ny  |z")])
    assert table.splitlines() == ["| check | result | figures |", "| --- | --- | --- |", "| a \\| b | PASS | x y \\|z |"]


def test_report_starts_with_every_row_not_reached_and_rewrites_as_rows_arrive(tmp_path: Path) -> None:
    path = tmp_path / check.REPORT
    report = check.Report(path, "traindeck GPU acceptance, test")
    text = path.read_text()
    assert text.startswith("# traindeck GPU acceptance, test\n")
    assert text.count("| FAIL | not reached") == len(check.CHECKS)
    report.set("monitor", "PASS", "GPU0 fine")
    rows = [line for line in path.read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(check.CHECKS)
    assert rows[[k for k, _ in check.CHECKS].index("monitor")].endswith("| PASS | GPU0 fine |")
    assert "monitor" not in report.failed() and "stop" in report.failed()
    with pytest.raises(ValueError):
        report.set("stop", "OK", "")
    assert not (tmp_path / (check.REPORT + ".tmp")).exists()


# ---- verdicts over the commands' JSON ---------------------------------------------------------------------------
def _gpu(**changes: object) -> dict[str, object]:
    """One GPU of `traindeck monitor --json`, as the sampler's GpuSnapshot is written."""
    gpu = {"t": 1.0, "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "utilization_percent": 3.0,
           "memory_used_bytes": 600 * 2**20, "memory_total_bytes": 80 * 2**30, "power_w": 71.5, "power_limit_w": 700.0,
           "temperature_c": 31.0, "sm_clock_mhz": 345, "pcie_h2d_bytes_per_s": 1.5e6, "pcie_d2h_bytes_per_s": 2e5,
           "pcie_t": 1.0, "processes": [{"pid": 4242, "gpu_index": 0, "used_memory_bytes": 512 * 2**20,
                                         "kind": "compute"}],
           "processes_unknown": None, "error": None, "pci_bus_id": "00000000:00:05.0", "pcie_source": "counter"}
    gpu.update(changes)
    return gpu


def _sample(*gpus: dict[str, object], error: str | None = None) -> dict[str, object]:
    return {"t": 1.0, "host": {}, "gpus": list(gpus), "gpu_error": error,
            "gpu_versions": {"driver": "580.159.04", "cuda": "13.0"}, "run_gpus": None}


def test_monitor_passes_with_every_nvml_figure_and_names_the_missing_ones() -> None:
    result, figures = check.judge_monitor(_sample(_gpu()))
    assert result == "PASS"
    assert "NVIDIA H100" in figures and "power 72 of 700 W" in figures and "PCIe H2D/D2H 1.5/0.2 MB/s" in figures
    assert "driver 580.159.04" in figures
    result, figures = check.judge_monitor(_sample(_gpu(pcie_d2h_bytes_per_s=None, power_w=None)))
    assert result == "FAIL" and figures.startswith("not read: power, PCIe;")
    assert check.judge_monitor(_sample(error="no NVIDIA driver")) == ("FAIL", "no GPU in the sample: no NVIDIA driver")
    assert check.judge_monitor(None)[0] == "FAIL"


def test_health_passes_with_reasons_and_the_pcie_link_and_names_what_was_not_read() -> None:
    health = {"throttle": ["gpu_idle"], "throttle_known": True, "pcie": {"gen": 1, "max_gen": 5, "width": 16,
                                                                          "max_width": 16},
              "pcie_replays": 0, "ecc": {"enabled": True, "volatile_uncorrected": 0, "remapped_rows": None}, "xid": []}
    result, figures = check.judge_health(_sample(_gpu(health=health)))
    assert result == "PASS", figures
    assert figures.startswith("clock-event reasons: gpu_idle; PCIe Gen1 x16 of Gen5 x16; replays 0; ECC on")
    result, figures = check.judge_health(_sample(_gpu(health={**health, "throttle_known": False, "pcie": None})))
    assert result == "FAIL" and "clock-event reasons: not read; PCIe link: not read" in figures
    assert check.judge_health(_sample(_gpu()))[0] == "FAIL"
    assert check.judge_health(None)[0] == "FAIL"


def test_nvml_and_nvidia_smi_process_lists() -> None:
    pids, unknown = check.nvml_processes(_sample(_gpu(), _gpu(index=1, processes=[], processes_unknown="PIDs of "
                                                                                                      "another namespace")))
    assert pids == {4242: 512 * 2**20} and unknown == ["GPU1: PIDs of another namespace"]
    assert check.smi_processes("4242, 512\n77, [N/A]\n\n") == {4242: 512 * 2**20, 77: None}


def test_recorded_gpu_figures_pass_only_with_the_ranks_own_memory() -> None:
    resources = {"samples": 31, "interval_s": 1.0, "peak_run_gpu_mem_bytes": 900 * 2**20, "peak_gpu_mem_bytes": 2**30,
                 "gpu_count": 1, "run_gpus": ["GPU-1"], "pcie_source": "counter", "gpu_error": None,
                 "gpu_versions": {"driver": "580.159.04"}}
    result, figures = check.judge_recorded(resources)
    assert result == "PASS" and "the ranks' GPU memory peak 900 MiB" in figures
    assert check.judge_recorded({**resources, "peak_run_gpu_mem_bytes": None})[0] == "FAIL"
    assert check.judge_recorded({**resources, "samples": 0})[0] == "FAIL"
    assert check.judge_recorded({"error": "no table"}) == ("FAIL", "resources could not be read: no table")


def test_step_timing_passes_with_cuda_memory_read_inside_the_rank() -> None:
    rank = {"steps": 150, "forward_ms": 1.5, "backward_ms": 3.0, "communication_ms": 0.2, "optimizer_ms": 9.0,
            "swap_ms": 0.0, "other_ms": 100.4, "step_ms": 114.1, "peak_gpu_allocated_bytes": 300 * 2**20,
            "peak_gpu_reserved_bytes": 400 * 2**20, "peak_host_bytes": 2**31}
    show = {"step_anatomy": {"ranks": {"0": rank}, "bound": "data", "slowest_rank": 0, "summary": "data-bound: ..."}}
    result, figures = check.judge_steps(show, want_steps=150)
    assert result == "PASS" and figures.startswith("150 steps of rank 0; median ms: forward 1.5, backward 3.0")
    assert "GPU peak allocated 300 MiB, reserved 400 MiB; data-bound" in figures
    # On the CPU (no CUDA figures), with steps missing, or without the anatomy: FAIL, saying why.
    assert check.judge_steps({"step_anatomy": {**show["step_anatomy"], "ranks": {
        "0": {**rank, "peak_gpu_allocated_bytes": None}}}}, want_steps=150)[0] == "FAIL"
    assert check.judge_steps({"step_anatomy": {**show["step_anatomy"], "ranks": {"0": {**rank, "steps": 20}}}},
                             want_steps=150)[0] == "FAIL"
    assert check.judge_steps({}, want_steps=150) == ("FAIL", "no timed step of rank 0: no step_anatomy in runs show")


ZERO2_ROW = {"strategy": "zero2", "framework": "deepspeed", "zero_stage": 2, "offload_optimizer": "none",
             "gpu_bytes_per_device": 21474836480, "activation_bytes_per_device": 2919424,
             "overhead_bytes_per_device": 3221517414, "gpu_total_bytes_per_device": 24699273318}


def _probe_output(peak_allocated: int) -> str:
    return "\n".join([
        "[2026-11-27 10:14:25,341] [INFO] [launch.py:245:main] process 6189 spawned",
        '[rank0]: {"probe": "ready", "params": 1073741824, "allocated_bytes": 6442450944, "reserved_bytes": 1}',
        '[rank0]: {"probe": "step", "step": 1, "loss": 0.5, "allocated_bytes": 15032385536}',
        '[rank0]: {"probe": "step", "step": 2, "loss": 0.4, "allocated_bytes": 15032385536}',
        json.dumps({"probe": "done", "params": 1073741824, "steps": 3, "max_allocated_bytes": peak_allocated,
                    "max_reserved_bytes": 23622320128, "allocated_bytes": 1, "total_bytes": 85520809984}),
        '[rank0]: {"probe": "broken',
    ])


def test_probe_lines_skip_tags_and_keep_the_first_step() -> None:
    lines = check.probe_lines(_probe_output(22 * 2**30))
    assert lines["ready"]["params"] == 1073741824
    assert lines["step"]["step"] == 1
    assert lines["done"]["max_allocated_bytes"] == 22 * 2**30


def test_estimate_against_the_measured_peak() -> None:
    estimate = [{"framework": "deepspeed", "zero_stage": 2, "offload_optimizer": "cpu"}, ZERO2_ROW]
    row = check.zero2_row(estimate)
    assert row is ZERO2_ROW
    probe_lines = check.probe_lines(_probe_output(22 * 2**30))
    nvml = {"peak_run_gpu_mem_bytes": 23 * 2**30, "peak_gpu_mem_bytes": 24 * 2**30}
    result, figures = check.judge_estimate(row, probe_lines, nvml, "succeeded")
    assert result == "PASS", figures
    assert "GPU total 23.00 GiB" in figures and "the rank's NVML peak 23.00 GiB (x1.00 of the GPU total)" in figures
    assert "torch peak allocated 22.00 GiB (x1.10 of states + activations)" in figures
    # The card needed far more than estimated, far less, or the model was too small to tell: FAIL.
    assert check.judge_estimate(row, probe_lines, {"peak_run_gpu_mem_bytes": 27 * 2**30}, "succeeded")[0] == "FAIL"
    assert check.judge_estimate(row, probe_lines, {"peak_run_gpu_mem_bytes": 16 * 2**30}, "succeeded")[0] == "FAIL"
    small = {**row, "gpu_total_bytes_per_device": 8 * 2**30}
    assert check.judge_estimate(small, check.probe_lines(_probe_output(7 * 2**30)),
                                {"peak_run_gpu_mem_bytes": 8 * 2**30}, "succeeded")[0] == "FAIL"
    result, figures = check.judge_estimate(row, probe_lines, nvml, "failed")
    assert result == "FAIL" and figures.startswith("the run did not succeed (failed)")
    # Without per-process figures, the GPU's own peak stands in, and says so.
    result, figures = check.judge_estimate(row, probe_lines, {"peak_gpu_mem_bytes": 23 * 2**30}, "succeeded")
    assert result == "PASS" and "the GPU's NVML peak (no per-process figure)" in figures
    assert check.judge_estimate(None, probe_lines, nvml, "succeeded")[0] == "FAIL"


def test_kept_estimate_is_information_once_the_gpu_was_measured() -> None:
    kept = {"label": "ZeRO-2", "verdict": "fits", "gpu_total_bytes_per_device": 29 * 2**30,
            "assumptions": ["activations for micro batch 2 x 2048 tokens (bf16, adamw)", "vocabulary 32000 assumed"]}
    pairs = [{"what": "GPU memory per device (peak)", "estimated_bytes": 29 * 2**30, "measured_bytes": 23 * 2**30,
              "measured_over_estimate": 0.793},
             {"what": "host RAM per rank (peak RSS)", "estimated_bytes": 6 * 2**30, "measured_bytes": None,
              "measured_over_estimate": None}]
    result, figures = check.judge_kept({"estimate": kept, "estimate_vs_measured": pairs})
    assert result == "INFO"
    assert "GPU memory per device (peak): estimated 29.00 GiB, measured 23.00 GiB (x0.79)" in figures
    assert "(activations for micro batch 2 x 2048 tokens (bf16, adamw); 1 more assumptions)" in figures
    pairs[0]["measured_bytes"] = None
    assert check.judge_kept({"estimate": kept, "estimate_vs_measured": pairs})[0] == "FAIL"
    assert check.judge_kept({"estimate": None})[0] == "FAIL"


OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 95.00 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 78.52 GiB is free. Including non-PyTorch memory, this process has 680.00 MiB memory in "
            "use. Of the allocated memory 12.00 MiB is allocated by PyTorch, and 2.00 MiB is reserved by PyTorch but "
            "unallocated.")


def test_cuda_oom_passes_when_diagnosed_as_gpu_memory_with_the_allocators_numbers() -> None:
    # The shape `traindeck runs show --json` gave for a rank that printed PyTorch's OOM (recorded on CPU).
    show = {"state": "failed", "diagnosis": {
        "summary": "Rank 0 ran out of GPU memory on GPU 0 (79.19 GiB) (CUDA out of memory).", "kind": "cuda_oom",
        "memory": "cuda", "rank": 0, "evidence": [OOM_LINE, "the launcher exited with code 1"]}}
    result, figures = check.judge_oom(show)
    assert result == "PASS"
    assert ("allocator: tried 95.00 GiB, device GPU 0, capacity 79.19 GiB, free 78.52 GiB, in_use 680.00 MiB, "
            "allocated 12.00 MiB, reserved_unallocated 2.00 MiB") in figures
    host = {"state": "failed", "diagnosis": {**show["diagnosis"], "memory": "host", "kind": "host_oom"}}
    assert check.judge_oom(host)[0] == "FAIL"
    unquoted = {"state": "failed", "diagnosis": {**show["diagnosis"], "evidence": []}}
    assert check.judge_oom(unquoted)[0] == "FAIL"
    assert check.judge_oom({"state": "succeeded", "diagnosis": None}) == ("FAIL", "no diagnosis (state succeeded)")


def test_first_json_skips_what_is_printed_before_it() -> None:
    assert check.first_json('traindeck: warning: x\n{"id": "r1", "state": "running"}\n') == {"id": "r1",
                                                                                             "state": "running"}
    assert check.first_json('[\n  {"a": 1}\n]') == [{"a": 1}]
    assert check.first_json("no json {here") is None


# ---- time limits --------------------------------------------------------------------------------------------------
def test_a_command_past_its_limit_is_killed_with_its_children_and_said_so(tmp_path: Path) -> None:
    runner = check.Runner(tmp_path / "log", deadline=time.monotonic() + 60)
    t0 = time.monotonic()
    done = runner.run(["bash", "-c", "sleep 30 & sleep 30"], limit=1)
    assert time.monotonic() - t0 < 10
    assert done.timed_out and not done.ok and "did not end within 1 s (killed)" in done.why()
    ok = runner.run(["bash", "-c", "echo hello; echo oops >&2; exit 3"], limit=10)
    assert ok.rc == 3 and ok.out == "hello\n" and ok.why().endswith("exited with 3: hello")
    log = (tmp_path / "log").read_text()
    assert "TIMED OUT" in log and "| oops" in log


def test_no_command_starts_once_the_budget_is_spent(tmp_path: Path) -> None:
    runner = check.Runner(tmp_path / "log", deadline=time.monotonic() + 5)  # all of it inside the clean-up reserve
    done = runner.run(["bash", "-c", "touch never"], limit=10)
    assert done.skipped.startswith("not run: the check's time budget is spent") and not done.ok
    assert not (REPO / "never").exists()


def test_probe_options() -> None:
    args = probe.parse_args(["--hidden", "8192", "--layers", "16", "--steps", "0", "--deepspeed_config", "c.json"])
    assert (args.hidden, args.layers, args.steps, args.deepspeed_config, args.oom) == (8192, 16, 0, "c.json", False)


# ---- this machine's side: wheels and what travels ---------------------------------------------------------------
def test_pinned_wheels_cover_what_the_gpu_machine_lacks() -> None:
    pins = dict(prepare.read_pins())
    assert {"deepspeed", "pydantic", "pydantic-core", "hjson", "annotated-types", "typing-inspection",
            "typing-extensions"} <= pins.keys()
    assert all(version[0].isdigit() for version in pins.values())


def test_wheel_names_and_which_install_on_cpython_312_x86_64() -> None:
    core = "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    assert prepare.wheel_key(core) == ("pydantic-core", "2.50.5")
    assert prepare.fits_gpu_machine(core)
    assert prepare.fits_gpu_machine("hjson-3.1.0-py3-none-any.whl")
    assert not prepare.fits_gpu_machine("pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_x86_64.whl")
    assert not prepare.fits_gpu_machine("pydantic_core-2.50.5-cp312-cp312-macosx_11_0_arm64.whl")
    assert prepare.wheel_key("deepspeed-0.19.8.tar.gz") is None


def test_gather_keeps_copies_fetches_and_removes_unpinned(tmp_path: Path) -> None:
    kit, dest = tmp_path / "kit", tmp_path / "dest"
    kit.mkdir()
    dest.mkdir()
    (kit / "hjson-3.1.0-py3-none-any.whl").write_bytes(b"h")
    (kit / "pydantic-2.14.4-py3-none-any.whl").write_bytes(b"old kit")
    (dest / "pydantic-2.14.4-py3-none-any.whl").write_bytes(b"here")
    (dest / "pydantic-2.13.5-py3-none-any.whl").write_bytes(b"stale")
    fetched = []

    def fetch(name: str, version: str, folder: Path) -> bool:
        fetched.append(name)
        if name == "typing-extensions":
            (folder / f"typing_extensions-{version}-py3-none-any.whl").write_bytes(b"t")
            return True
        return False

    pins = [("hjson", "3.1.0"), ("pydantic", "2.14.4"), ("typing-extensions", "4.16.0"), ("deepspeed", "0.19.8")]
    done, missing = prepare.gather(pins, dest, kit, fetch)
    assert sorted(p.name for p in dest.iterdir()) == ["hjson-3.1.0-py3-none-any.whl", "pydantic-2.14.4-py3-none-any.whl",
                                                      "typing_extensions-4.16.0-py3-none-any.whl"]
    assert (dest / "pydantic-2.14.4-py3-none-any.whl").read_bytes() == b"here"
    assert missing == ["deepspeed==0.19.8"] and fetched == ["typing-extensions", "deepspeed"]
    assert [line.split()[0] for line in done] == ["removed", "copied", "kept", "fetched"]


def test_what_travels_is_the_tracked_and_unignored_files_plus_the_carried_folder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".gpu" / "wheels").mkdir(parents=True)
    (repo / "build").mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("/.gpu/\nbuild/\n")
    (repo / "tracked.py").write_text("x" * 1000)
    subprocess.run(["git", "-C", str(repo), "add", ".gitignore", "tracked.py"], check=True)
    (repo / "untracked.txt").write_text("y" * 100)
    (repo / "build" / "big.bin").write_bytes(b"z" * 5000)
    (repo / ".gpu" / "wheels" / "w.whl").write_bytes(b"w" * 300)
    files = prepare.travelling_files(repo, [".gpu"])
    assert sorted(p.relative_to(repo).as_posix() for p in files) == [".gitignore", ".gpu/wheels/w.whl", "tracked.py",
                                                                      "untracked.txt"]
    assert prepare.travelling_bytes(files) == len("/.gpu/\nbuild/\n") + 1000 + 100 + 300


def test_this_checkout_travels_well_under_the_limit() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert prepare.travelling_bytes(prepare.travelling_files(REPO, [])) < prepare.LIMIT // 2
