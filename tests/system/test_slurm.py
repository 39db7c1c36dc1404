"""`traindeck run --slurm` on a real one-host Slurm (tests/slurmhelp.py), plus the batch script and the end's
reading without one. The cluster tests are marked `slurm` and skipped, with the reason, where it cannot start."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from support.slurmhelp import OneHostSlurm, why_not

from traindeck.backend.core.paths import cache_dir
from traindeck.backend.launch.plan import LaunchPlan
from traindeck.backend.runs.diagnosis.diagnose import Evidence, diagnose
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.slurm import slurm_fields
from traindeck.backend.slurm.ended import JobEnd, diagnosis_fields, exit_status
from traindeck.backend.slurm.script import SCRIPT_NAME, SlurmOptions, batch_script, slurm_plan

TINY = """import os, sys, time
n = int(sys.argv[1])
print("token seen:", "yes" if os.environ.get("HF_TOKEN") == "hf_secret_value_123" else "no", flush=True)
for i in range(n):
    print(f"slurm tiny step {i} of {n}", flush=True)
    time.sleep(0.5)
print("slurm tiny done", flush=True)
"""
# A tqdm bar as tqdm 4.x draws it (default format, on stderr): carriage-return redraws only, one every PAUSE s, its
# newline only after the last drawing. The job prints nothing else while the bar runs.
BAR = """import sys, time
n, pause = int(sys.argv[1]), float(sys.argv[2])
print("bar starts", flush=True)
start = time.monotonic()

def clock(s):
    return "?" if s is None else "%02d:%02d" % (int(s) // 60, int(s) % 60)

for i in range(n + 1):
    elapsed = time.monotonic() - start
    rate = i / elapsed if i and elapsed > 0 else None
    left = (n - i) / rate if rate else None
    filled = 10 * i // n
    sys.stderr.write("\\rsteps: %3.0f%%|%s%s| %d/%d [%s<%s, %s]" % (
        100 * i / n, "#" * filled, " " * (10 - filled), i, n, clock(elapsed), clock(left),
        "%5.2fit/s" % rate if rate else "?it/s"))
    sys.stderr.flush()
    if i < n:
        time.sleep(pause)
sys.stderr.write("\\n")
print("bar done", flush=True)
"""
HOG = """import time
held = []
for i in range(60):
    held.append(bytearray(20 * 1024 * 1024))  # zero-filled, so every page is touched
    print(f"holding {20 * (i + 1)} MiB", flush=True)
    time.sleep(0.1)
"""


# ---- without a cluster ------------------------------------------------------------------------------------------
def _plan(tmp_path: Path, argv: list[str], launcher: str = "python") -> LaunchPlan:
    return LaunchPlan(launcher=launcher, argv=argv, env={"HF_TOKEN": "hf_secret"}, cwd=str(tmp_path),  # type: ignore[arg-type]
                      nproc=2, master_port=29511, run_dir=str(tmp_path / "run1"))


def test_batch_script_quotes_argv_and_holds_no_environment(tmp_path: Path) -> None:
    plan = _plan(tmp_path, [sys.executable, "my script.py", "--name", "it's; rm -rf /"])
    options = SlurmOptions(partition="gpu", nodes=1, gpus_per_node=2, time="01:30:00", account="proj-1", mem="8G")
    text = batch_script(plan, options, tmp_path / "run1", "run1", "traindeck-run1")
    assert "#SBATCH --partition=gpu" in text and "#SBATCH --gpus-per-node=2" in text
    assert "#SBATCH --time=01:30:00" in text and "#SBATCH --account=proj-1" in text and "#SBATCH --mem=8G" in text
    assert f"#SBATCH --output={tmp_path / 'run1' / 'slurm-%j.out'}" in text
    srun = text[text.index("srun "):].replace("\\\n", " ")
    assert shlex.split(srun)[2:] == plan.argv  # `srun --kill-on-bad-exit=1` then the argv, word for word
    assert "hf_secret" not in text and "HF_TOKEN" not in text


def test_several_nodes_tell_each_launcher_its_node(tmp_path: Path) -> None:
    accelerate = _plan(tmp_path, [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "a.yaml",
                                  "train.py"], "accelerate")
    text = batch_script(accelerate, SlurmOptions(nodes=2, gpus_per_node=4), tmp_path, "r", "j")
    assert '--num_machines "$SLURM_NNODES"' in text and '--main_process_ip "$head_node"' in text
    assert '"$((SLURM_NNODES * 4))"' in text
    deepspeed = _plan(tmp_path, [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "4", "t.py"],
                      "deepspeed")
    text = batch_script(deepspeed, SlurmOptions(nodes=2, gpus_per_node=4), tmp_path, "r", "j")
    assert '--no_ssh --node_rank "$SLURM_NODEID"' in text and "slots=4" in text
    python = slurm_plan(_plan(tmp_path, [sys.executable, "t.py"]), SlurmOptions(nodes=2), tmp_path / "s.db")
    assert any("one machine" in e for e in python.errors)


# accelerate's own launch on one node of a Slurm job, up to the launcher it picks: DeepSpeed's multi-node runner
# (a subprocess: through pdsh) or torchrun on this node (torch's elastic launch, in process). Neither is started.
ACCELERATE_CHOICE = """import subprocess, sys
import torch.distributed.run as torchrun
from accelerate.commands import launch

popen = subprocess.Popen

def runner(cmd, *args, **kwargs):
    if cmd[:1] != ["deepspeed"]:  # accelerate's own probes (nvidia-smi) run
        return popen(cmd, *args, **kwargs)
    print("deepspeed runner:", " ".join(cmd))
    sys.exit(3)

class Torchrun:
    def __init__(self, config, entrypoint):
        self.config = config

    def __call__(self, *args):
        print(f"torchrun: nodes {self.config.max_nodes}, rdzv {self.config.rdzv_backend}")
        sys.exit(0)

launch.subprocess.Popen = runner
torchrun.elastic_launch = Torchrun
launch.launch_command(launch.launch_command_parser().parse_args(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.train
def test_accelerate_on_several_slurm_nodes_runs_torchrun_on_each_never_deepspeeds_pdsh_runner(
        tmp_path: Path) -> None:
    """srun starts accelerate once per node. With a DeepSpeed config and several machines accelerate would start
    DeepSpeed's pdsh runner on every node (its default multi-node launcher): each would reach every node, and
    scancel's SIGTERM would make each `pkill -f` every DeepSpeed launcher of this Python there, other jobs' too."""
    if any(importlib.util.find_spec(name) is None for name in ("accelerate", "deepspeed", "torch")):
        pytest.skip("needs the train extra (accelerate, deepspeed, torch)")
    (tmp_path / "accelerate.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_machines: 1\nnum_processes: 1\n"
        "machine_rank: 0\nuse_cpu: true\nmixed_precision: 'no'\n"
        "deepspeed_config:\n  zero_stage: 0\n  gradient_accumulation_steps: 1\n")
    (tmp_path / "choice.py").write_text(ACCELERATE_CHOICE)
    plan = _plan(tmp_path, [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                            str(tmp_path / "accelerate.yaml"), "train.py"], "accelerate")
    text = batch_script(plan, SlurmOptions(nodes=2, gpus_per_node=1), tmp_path / "run1", "run1", "j")
    srun = text[text.index("srun "):].replace("\\\n", " ").split(None, 2)[2]  # the launcher's words
    assert srun.startswith(shlex.join(plan.argv[:3]) + " ")
    words = srun[len(shlex.join(plan.argv[:3])):]
    done = subprocess.run(["bash", "-c", f"SLURM_NNODES=2 SLURM_NODEID=1 head_node=127.0.0.1; "
                                         f"exec {shlex.quote(sys.executable)} choice.py {words}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert "deepspeed runner:" not in done.stdout, done.stdout
    assert done.returncode == 0 and "torchrun: nodes 2, rdzv c10d" in done.stdout, done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize(("options", "word"), [
    (SlurmOptions(partition="gpu\n#SBATCH --x"), "--partition"), (SlurmOptions(time="90 minutes"), "--time"),
    (SlurmOptions(nodes=0), "--nodes"), (SlurmOptions(mem="lots"), "--mem"),
])
def test_bad_options_are_refused_before_anything_is_written(options: SlurmOptions, word: str) -> None:
    assert [p for p in options.problems() if word in p]


def test_ends_only_slurm_can_explain_become_the_diagnosis() -> None:
    oom = JobEnd("41", "FAILED", exit_code="1:0", oom_steps=["41.0"], source="scontrol", note="sacct unavailable")
    assert oom.effective_state == "OUT_OF_MEMORY" and exit_status(oom) == 1
    found = diagnose(Evidence(launcher_returncode=1, scheduler_end=diagnosis_fields(oom, stop_requested=False)))
    assert found.kind == "cgroup_oom" and "Slurm job 41" in found.summary and "OUT_OF_MEMORY" in found.summary
    assert any("sacct unavailable" in line for line in found.evidence)
    timeout = diagnose(Evidence(launcher_returncode=1, scheduler_end=diagnosis_fields(
        JobEnd("42", "TIMEOUT", exit_code="0:15", time_limit="00:01:00", source="sacct"), False)))
    assert "time limit" in timeout.summary and timeout.kind == "killed"
    stopped = diagnose(Evidence(launcher_returncode=143, stop_requested=True, scheduler_end=diagnosis_fields(
        JobEnd("43", "CANCELLED", exit_code="0:15", source="sacct"), True)))
    assert stopped.kind == "stopped" and any("Slurm job 43 ended CANCELLED" in e for e in stopped.evidence)


def test_slurm_options_need_slurm() -> None:
    done = subprocess.run([sys.executable, "-m", "traindeck", "run", "--partition", "gpu", "x.py"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "only applies with --slurm" in done.stderr


# ---- on a one-host Slurm ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneHostSlurm]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    cluster = OneHostSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        problem = cluster.start()
        if problem:
            pytest.skip(f"the one-host Slurm did not start: {problem}")
        yield cluster
    finally:
        cluster.stop()


_PROBE_CACHE: list[Path] = []


@pytest.fixture
def td(slurm: OneHostSlurm, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`traindeck ...` against the test cluster; the training interpreter's probe is kept from test to test (each
    test has its own TRAINDECK_HOME) so only the first one waits for torch to import."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    if _PROBE_CACHE and _PROBE_CACHE[0].exists():
        shutil.copytree(_PROBE_CACHE[0], cache_dir(), dirs_exist_ok=True)

    def traindeck(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True,
                              timeout=timeout, env=dict(os.environ, HF_TOKEN="hf_secret_value_123"))

    yield traindeck
    if cache_dir().exists():
        if not _PROBE_CACHE:
            _PROBE_CACHE.append(tmp_path_factory.mktemp("probe-cache"))
        shutil.copytree(cache_dir(), _PROBE_CACHE[0], dirs_exist_ok=True)


def _show(td, run_id: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    done = td("runs", "show", "--json", run_id)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _wait_for(predicate, timeout: float = 400.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s")


@pytest.mark.slurm
def test_a_slurm_run_reaches_logs_and_runs_show(td, slurm: OneHostSlurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "tiny.py").write_text(TINY)
    os.chdir(tmp_path)
    done = td("run", "--slurm", "--time", "00:05:00", "--name", "slurm-tiny", "tiny.py", "3")
    assert done.returncode == 0, done.stderr + done.stdout
    run_id = done.stderr.split("traindeck: run ")[1].split()[0]
    logs = td("logs", run_id).stdout
    assert "slurm tiny step 2 of 3" in logs and "slurm tiny done" in logs
    assert "token seen: yes" in logs  # the environment reached the job through sbatch --export
    data = _show(td, run_id)
    assert data["state"] == "succeeded" and data["slurm_job_id"].isdigit() and data["slurm_state"] == "COMPLETED"
    assert [n["host"] for n in data["nodes"]] == [slurm.host]
    run_dir = Path(data["run_dir"])
    assert "tiny.py 3" in (run_dir / SCRIPT_NAME).read_text()
    for path in run_dir.iterdir():  # the secret reached the job, yet no file of the run holds it
        if path.is_file():
            assert b"hf_secret_value_123" not in path.read_bytes(), path.name


# The bar draws for ~18 s, ~55 bytes every 0.5 s. Slurm passes a task's partial line on when its 1 KiB output
# buffer fills, ~9 s of this bar (cut mid-drawing): without the redraws turned into lines, 2 values at most would
# show while it runs.
BAR_STEPS, BAR_PAUSE_S = 36, 0.5


@pytest.mark.slurm
def test_a_slurm_jobs_tqdm_bar_climbs_in_the_run_store_while_the_job_runs(  # type: ignore[no-untyped-def]
        td, slurm: OneHostSlurm, tmp_path: Path) -> None:
    """The job's output reaches traindeck through srun, the job's output file and the job follower: srun holds a
    partial line until it ends or fills Slurm's buffer, so the bar's redraws climb in the run's progress while the
    job runs because they become lines in the job (TRAINDECK_LINE_FORWARDER in the batch script, the run's
    sitecustomize), and the follower copies them on as they come."""
    (tmp_path / "bar.py").write_text(BAR)
    os.chdir(tmp_path)
    done = td("run", "--slurm", "--detach", "--time", "00:05:00", "--name", "slurm-bar", "bar.py", str(BAR_STEPS),
              str(BAR_PAUSE_S))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    _wait_for(lambda: "bar starts" in td("logs", run_id).stdout)
    seen: list[int] = []  # the progress read while the run and its job still run, each new value once
    while True:  # until the run ends; the job's --time bounds it
        with RunStore() as store:
            record = store.get_run(run_id)
        assert record is not None
        if record.state != "running":
            break
        current = (record.progress or {}).get("current")
        job = _show_job(slurm, record)  # the job itself, not only the follower, still runs
        if isinstance(current, int) and current not in seen and job == "RUNNING":
            seen.append(current)
        time.sleep(0.5)
    data = _show(td, run_id)
    assert data["state"] == "succeeded", data["state"]
    climbing = [v for v in seen if v < BAR_STEPS]
    assert len(climbing) >= 3 and climbing == sorted(climbing), \
        f"progress while the job ran: {seen}; the log: {td('logs', run_id).stdout[-800:]!r}"
    assert data["progress"]["current"] == BAR_STEPS and data["progress"]["total"] == BAR_STEPS, data["progress"]
    with RunStore() as store:
        record = store.get_run(run_id)
    assert record is not None and (record.progress or {}).get("source") == "tqdm", record


def _show_job(slurm: OneHostSlurm, record: RunRecord) -> str:
    """The Slurm state of the run's job right now, from scontrol ("" before it is submitted)."""
    job = slurm_fields(record.run_dir).get("slurm_job_id") if record.run_dir else None
    return _job_state(slurm, job) if job else ""


@pytest.mark.slurm
def test_stop_scancels_the_job_and_nothing_is_left(td, slurm: OneHostSlurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "tiny.py").write_text(TINY)
    os.chdir(tmp_path)
    done = td("run", "--slurm", "--detach", "tiny.py", "400")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    _wait_for(lambda: "slurm tiny step 1" in td("logs", run_id).stdout)
    stop = td("stop", run_id)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "scancel" in stop.stdout and "nothing of it is left in the queue" in stop.stdout
    data = _show(td, run_id)
    assert data["state"] == "stopped" and data["slurm_state"] == "CANCELLED"
    assert slurm.run("squeue", "--noheader", "--jobs", data["slurm_job_id"]).stdout.strip() == ""
    assert not [p for p in psutil.process_iter(["cmdline"]) if "400" in (p.info["cmdline"] or [])
                and any(str(tmp_path) in a or a == "tiny.py" for a in p.info["cmdline"] or [])]


@pytest.mark.slurm
def test_a_job_over_its_memory_limit_is_out_of_memory(td, slurm: OneHostSlurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "hog.py").write_text(HOG)
    os.chdir(tmp_path)
    done = td("run", "--slurm", "--mem", "60M", "hog.py")
    assert done.returncode != 0
    run_id = done.stderr.split("traindeck: run ")[1].split()[0]
    data = _show(td, run_id)
    assert data["state"] == "failed" and data["slurm_state"] == "OUT_OF_MEMORY"
    diagnosis = data["diagnosis"]
    assert diagnosis["kind"] == "cgroup_oom" and f"Slurm job {data['slurm_job_id']}" in diagnosis["summary"]
    assert "OUT_OF_MEMORY" in diagnosis["summary"]
    assert any("scontrol" in e or "sacct" in e for e in diagnosis["evidence"])  # where the end was read


@pytest.mark.slurm
def test_a_waiting_job_shows_its_queue_reason(td, slurm: OneHostSlurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    blocker = slurm.run("sbatch", "--parsable", f"--cpus-per-task={os.cpu_count() or 1}", f"--output={tmp_path}/b.out",
                        "--wrap", "sleep 300")
    assert blocker.returncode == 0, blocker.stderr
    try:
        (tmp_path / "tiny.py").write_text(TINY)
        os.chdir(tmp_path)
        done = td("run", "--slurm", "--detach", "tiny.py", "2")
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.strip().splitlines()[-1]
        detail = _wait_for(lambda: (d := _show(td, run_id)["state_detail"]).startswith("waiting in Slurm queue: ")
                           and d)
        assert "Resources" in detail or "Priority" in detail, detail
        assert _show(td, run_id)["slurm_state"] == "PENDING"
        stop = td("stop", run_id)  # a stop while it waits is a scancel too
        assert stop.returncode == 0 and _show(td, run_id)["slurm_state"] == "CANCELLED"
    finally:
        slurm.run("scancel", blocker.stdout.strip())


# Another job on the node runs a DeepSpeed launcher: `<python> -u -m deepspeed.launcher.launch ...`, the command line
# DeepSpeed's own runner ends with `pkill -f` (here a stand-in package of that name, so no torch is imported).
LAUNCH_STANDIN = """import sys, time
i = 0
while True:
    print(f"bystander step {i}", flush=True)
    i += 1
    time.sleep(0.5)
"""


def _job_state(slurm: OneHostSlurm, job: str) -> str:
    shown = slurm.run("scontrol", "show", "job", job).stdout
    return next((word.split("=", 1)[1] for word in shown.split() if word.startswith("JobState=")), "")


def _processes_with(token: str) -> list[psutil.Process]:
    """Live processes with `token` in their command line or working directory (this test's own process aside)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        if any(token in arg for arg in proc.info["cmdline"] or []) or token in (proc.info["cwd"] or ""):
            found.append(proc)
    return found


@pytest.mark.slurm
def test_stop_cancels_only_its_own_job_and_a_deepspeed_job_beside_it_runs_on(  # type: ignore[no-untyped-def]
        td, slurm: OneHostSlurm, tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for folder in (mine, theirs / "deepspeed" / "launcher"):
        folder.mkdir(parents=True)
    (theirs / "deepspeed" / "__init__.py").write_text("")
    (theirs / "deepspeed" / "launcher" / "__init__.py").write_text("")
    (theirs / "deepspeed" / "launcher" / "launch.py").write_text(LAUNCH_STANDIN)
    (theirs / "train.py").write_text("")
    launch = [sys.executable, "-u", "-m", "deepspeed.launcher.launch", "--world_info=eyJsb2NhbGhvc3QiOiBbMF19",
              "--node_rank=0", "--master_addr=127.0.0.1", "--master_port=29531", str(theirs / "train.py")]
    bystander = slurm.run("sbatch", "--parsable", "--mem=100M", f"--chdir={theirs}", f"--output={theirs}/job.out",
                          f"--export=ALL,PYTHONPATH={theirs}", "--wrap", shlex.join(launch))
    assert bystander.returncode == 0, bystander.stderr
    other = bystander.stdout.strip().split(";")[0]
    try:
        _wait_for(lambda: "bystander step 1" in ((theirs / "job.out").read_text()
                                                 if (theirs / "job.out").exists() else ""))
        before = {p.pid for p in _processes_with("deepspeed.launcher.launch") if str(theirs / "train.py")
                  in p.cmdline()}
        assert before and _job_state(slurm, other) == "RUNNING"

        (mine / "tiny.py").write_text(TINY)
        os.chdir(mine)
        done = td("run", "--slurm", "--detach", "--mem", "100M", "tiny.py", "400")
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.strip().splitlines()[-1]
        _wait_for(lambda: "slurm tiny step 1" in td("logs", run_id).stdout)  # both jobs run side by side now
        job = _show(td, run_id)["slurm_job_id"]
        assert _job_state(slurm, job) == "RUNNING" and _processes_with(str(mine))

        stop = td("stop", run_id)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert f"scancel {job}" in td("logs", run_id).stdout
        data = _show(td, run_id)
        assert data["state"] == "stopped" and data["slurm_state"] == "CANCELLED"
        # Nothing of the stopped run remains: its job is over, and no process of its job, or of traindeck's
        # following of it, is left.
        assert slurm.run("squeue", "--noheader", "--jobs", job).stdout.strip() == ""
        assert _job_state(slurm, job) == "CANCELLED"
        assert not _processes_with(str(mine))
        _wait_for(lambda: not _processes_with(data["run_dir"]), timeout=60)  # the follower and supervisor end

        # The job beside it runs on: same processes, still RUNNING, and still writing its output.
        assert _job_state(slurm, other) == "RUNNING"
        after = {p.pid for p in _processes_with("deepspeed.launcher.launch") if str(theirs / "train.py")
                 in p.cmdline()}
        assert after == before
        printed = (theirs / "job.out").read_text().count("bystander step")
        _wait_for(lambda: (theirs / "job.out").read_text().count("bystander step") > printed + 1)
        assert _job_state(slurm, other) == "RUNNING"
    finally:
        slurm.run("scancel", other)
