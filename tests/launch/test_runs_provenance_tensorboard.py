"""Issue 14, points 4-5 on real runs: provenance (git commit, dirty state and diff, pip freeze, versions, host),
`rerun`, the bug-report bundle (logs in, a secret planted in the environment out), and TensorBoard scalars of a
script that prints nothing becoming the run's metric series."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.runhelp import SCRIPTS, wait_finished, wait_until

from traindeck.backend.runs.record.run_store import RunStore

pytestmark = pytest.mark.timeout(600)
SECRET = "hf_PlantedSecretValue_8d1c2"


def traindeck(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def started(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def show(run_id: str, cwd: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(traindeck("runs", "show", run_id, "--json", cwd=cwd).stdout)  # type: ignore[no-any-return]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_provenance_from_a_dirty_git_repo_rerun_and_a_bundle_without_the_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "project"
    repo.mkdir()
    script = repo / "train.py"
    script.write_text("import os\nprint('step 1 loss 0.5')\nprint('token is', os.environ.get('HF_TOKEN'))\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "train.py")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    commit = git(repo, "rev-parse", "HEAD")
    script.write_text(script.read_text() + "print('an uncommitted line')\n")
    monkeypatch.setenv("HF_TOKEN", SECRET)

    run_id = started(traindeck("run", "--detach", str(script), cwd=repo))
    assert wait_finished(run_id, 120).state == "succeeded"
    provenance = wait_until(lambda: show(run_id, repo)["provenance"], 240, 1.0)
    assert provenance["git"]["commit"] == commit and provenance["git"]["branch"] == "main"
    assert provenance["git"]["dirty"] is True
    assert "+print('an uncommitted line')" in Path(provenance["git"]["diff_file"]).read_text()
    assert "torch==" in Path(provenance["packages_file"]).read_text()
    versions = provenance["versions"]
    assert versions["python"].count(".") == 2 and versions["torch"] and versions["deepspeed"]
    assert versions["accelerate"] and versions["transformers"] and "nccl" in versions and "cuda" in versions
    assert provenance["host"]["cpus"] >= 1 and provenance["host"]["ram_bytes"] > 0
    assert "git" in traindeck("runs", "show", run_id, cwd=repo).stdout

    again = started(traindeck("rerun", run_id, "--detach", cwd=repo))
    assert wait_finished(again, 120).state == "succeeded"
    shown = show(again, repo)
    assert shown["parent"] == run_id and shown["resumed_from"] is None
    assert shown["argv"] == show(run_id, repo)["argv"] and shown["cwd"] == str(repo)

    target = tmp_path / "report.zip"
    result = traindeck("runs", "bundle", run_id, "-o", str(target), cwd=repo)
    assert result.returncode == 0, result.stderr
    assert f"{target.stat().st_size} bytes" in result.stdout
    with zipfile.ZipFile(target) as archive:
        names = {Path(n).name: n for n in archive.namelist()}
        for needed in ("output.log", "command.json", "provenance.json", "git.diff", "requirements.txt",
                       "summary.json"):
            assert needed in names, needed
        assert "step 1 loss 0.5" in archive.read(names["output.log"]).decode()
        assert "token is ***" in archive.read(names["output.log"]).decode()
        for name in archive.namelist():
            assert SECRET.encode() not in archive.read(name), name
        summary = json.loads(archive.read(names["summary.json"]))
        assert summary["id"] == run_id and "diagnosis" in summary and "resources" in summary
    bad = traindeck("runs", "bundle", run_id, "-o", str(tmp_path / "report.txt"), cwd=repo)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_tensorboard_scalars_of_a_silent_script_become_its_metrics(tmp_path: Path) -> None:
    run_id = started(traindeck("run", "--detach", str(SCRIPTS / "tb_only.py"), "--logdir", "runs/exp1",
                               cwd=tmp_path))
    assert wait_finished(run_id, 240).state == "succeeded"
    assert traindeck("logs", run_id, cwd=tmp_path).stdout.strip() == ""  # it printed nothing

    def charted() -> dict[str, float] | None:
        metrics = show(run_id, tmp_path)["metrics"]
        return metrics if {"train/loss", "eval/accuracy"} <= set(metrics) else None

    metrics = wait_until(charted, 120, 1.0)
    assert metrics["train/loss"] == pytest.approx(0.2) and metrics["eval/accuracy"] == pytest.approx(0.5)
    with RunStore() as store:
        series = store.metric_series(run_id, "train/loss")
    assert [step for step, _t, _v in series] == [1, 2, 3, 4, 5]  # once each


def test_a_tag_the_script_also_reports_is_not_counted_twice(tmp_path: Path) -> None:
    script = tmp_path / "both.py"
    script.write_text(
        "import sys, time\n"
        "import traindeck_report as td\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        "td.metrics(step=1, loss=1.0)\n"
        "time.sleep(3)\n"
        "w = SummaryWriter(log_dir='runs/x')\n"
        "for s in range(1, 4):\n"
        "    td.metrics(step=s, loss=1.0 / s)\n"
        "    w.add_scalar('train/loss', 1.0 / s, s)\n"
        "    w.add_scalar('train/grad_norm', 2.0 * s, s)\n"
        "w.close()\n")
    run_id = started(traindeck("run", "--detach", str(script), cwd=tmp_path))
    assert wait_finished(run_id, 240).state == "succeeded"
    wait_until(lambda: "train/grad_norm" in show(run_id, tmp_path)["metrics"], 120, 1.0)
    metrics = show(run_id, tmp_path)["metrics"]
    assert "train/loss" not in metrics and metrics["loss"] == pytest.approx(1 / 3)
    assert metrics["train/grad_norm"] == pytest.approx(6.0)


@pytest.mark.parametrize("bar", [False, True], ids=["printed-without-steps", "printed-with-the-bars-step"])
def test_a_trainers_printed_values_become_its_exact_tensorboard_values(tmp_path: Path, bar: bool) -> None:
    """A real HF Trainer (tiny GPT-2 from a config) prints {'loss': '3.252', ...} (.4g) and writes train/loss =
    3.2518253... to TensorBoard: the run's one loss series holds TensorBoard's values, step for step, in the store,
    `runs show --json` and the CSV export alike. Without the bar the printed dicts carry no step (matched in order);
    with it, the bar's step (matched by step)."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    from traindeck.backend.runs import read_metric_table
    from traindeck.backend.runs.control.metric_charts import metrics_csv

    run_id = started(traindeck("run", "--detach", str(SCRIPTS / "hf_tiny_trainer.py"), "--output_dir", "out",
                               "--max_steps", "6", "--report_to", "tensorboard", *(["--tqdm"] if bar else []),
                               cwd=tmp_path))
    assert wait_finished(run_id, 240).state == "succeeded"
    events = list((tmp_path / "out").rglob("events.out.tfevents.*"))
    assert len(events) == 1, events
    written: dict[str, list[tuple[int, float]]] = {}
    for event in LegacyEventFileLoader(str(events[0])).Load():
        for value in event.summary.value:
            if value.HasField("simple_value"):
                written.setdefault(value.tag, []).append((event.step, value.simple_value))
    losses = [v for _step, v in written["train/loss"]]
    assert len(losses) == 6 and all(round(v, 3) != v for v in losses)  # more digits than the Trainer prints
    logs = traindeck("logs", run_id, cwd=tmp_path).stdout
    assert f"'loss': '{losses[0]:.4g}'" in logs  # what is printed: 4 significant digits

    wait_until(lambda: show(run_id, tmp_path)["metrics"].get("loss") == losses[-1], 120, 1.0)
    metrics = show(run_id, tmp_path)["metrics"]
    assert not {"train/loss", "train/grad_norm", "train/learning_rate"} & set(metrics)  # one series each
    assert metrics["grad_norm"] == written["train/grad_norm"][-1][1]
    with RunStore() as store:
        series = store.metric_series(run_id, "loss")
        table = read_metric_table(store, run_id, ["loss"])
    assert [v for _step, _t, v in series] == losses
    if bar:
        assert [step for step, _t, _v in series] == [step for step, _v in written["train/loss"]]
    rows = metrics_csv(table, 0.0).splitlines()[1:]
    assert [float(row.split(",")[3]) for row in rows] == losses


def test_versions_are_read_without_importing_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's versions come from package metadata and torch/version.py read as text: importing torch in the
    run's first seconds took a core from the job (bench_run_output: x1.3 on a flood). A torch whose import fails
    proves it is never imported; a CUDA build and the NCCL wheel it loads are read from their files."""
    from traindeck.backend.runs.record.provenance import versions

    fake = tmp_path / "site"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    (fake / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.13.0+cu124'\n"
                                               "cuda: Optional[str] = '12.4'\n")
    info = fake / "nvidia_nccl_cu12-2.21.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: 2.21.5\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    found = versions(sys.executable)
    assert found["cuda"] == "12.4" and "torch_error" not in found, found
    assert found["nccl"] == "2.21.5" and found["nccl_source"] == "package nvidia-nccl-cu12", found


def test_the_package_list_is_written_as_pip_freeze_all_writes_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """requirements.txt comes from the same short question as the versions (no second interpreter importing pip):
    plain, VCS, URL and editable installs (PEP 610 direct_url.json) in pip's shapes; of two copies of a package the
    one first on sys.path (the one imported) is listed; the result is what `pip freeze --all` says for this venv."""
    from traindeck.backend.runs.record.provenance import ask_interpreter, with_git_editables, write_packages
    from traindeck.backend.runs.record.provenance_diff import parse_freeze

    def dist(folder: Path, name: str, version: str, direct: dict | None = None) -> None:  # type: ignore[type-arg]
        info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        if direct is not None:
            (info / "direct_url.json").write_text(json.dumps(direct))

    first, second = tmp_path / "first", tmp_path / "second"
    dist(first, "plain-pkg", "1.2.3")
    dist(first, "from-git", "0.1", {"url": "https://example.org/x.git",
                                    "vcs_info": {"vcs": "git", "commit_id": "abc123"}})
    dist(first, "from-wheel", "2.0", {"url": "file:///wheels/from_wheel-2.0-py3-none-any.whl", "archive_info": {}})
    dist(first, "my-project", "0.3", {"url": "file:///home/me/project", "dir_info": {"editable": True}})
    dist(second, "plain-pkg", "9.9.9")  # shadowed by the copy in `first`
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(first), str(second)]))
    lines = ask_interpreter(sys.executable)["packages"]
    assert "plain-pkg==1.2.3" in lines and not any("9.9.9" in line for line in lines)
    assert "from-git @ git+https://example.org/x.git@abc123" in lines
    assert "from-wheel @ file:///wheels/from_wheel-2.0-py3-none-any.whl" in lines
    assert "# Editable install (my-project==0.3)\n-e /home/me/project" in lines
    path, why = write_packages(lines, tmp_path)
    assert why is None and path is not None
    parsed = parse_freeze(Path(path).read_text())
    assert parsed["plain-pkg"] == "1.2.3" and parsed["from-git"].endswith("@abc123")

    monkeypatch.delenv("PYTHONPATH")
    ours = parse_freeze("\n".join(with_git_editables(ask_interpreter(sys.executable)["packages"])))
    pip = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert ours == parse_freeze(pip) and len(ours) > 10


def test_an_editable_git_checkout_is_written_as_pip_writes_it(tmp_path: Path) -> None:
    """pip freeze writes an editable install that is a git checkout as `-e git+REMOTE@COMMIT#egg=NAME` (origin's
    URL; a local path as file://, scp-like as ssh://), or says it has no remote (seen in CI: a fresh clone has one)."""
    from traindeck.backend.runs.record.provenance import with_git_editables

    project = tmp_path / "my-project"
    project.mkdir()
    git(project, "init", "-q")
    (project / "setup.py").write_text("")
    git(project, "add", ".")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    commit = git(project, "rev-parse", "HEAD")
    line = f"# Editable install (my-project==0.3)\n-e {project}"
    assert with_git_editables([line, "numpy==2.0"]) == [
        f"# Editable Git install with no remote (my-project==0.3)\n-e {project}", "numpy==2.0"]
    git(project, "remote", "add", "upstream", "https://example.org/up.git")
    git(project, "remote", "add", "origin", "git@github.com:me/my-project.git")
    assert with_git_editables([line]) == [f"-e git+ssh://git@github.com/me/my-project.git@{commit}#egg=my_project"]
    git(project, "remote", "set-url", "origin", str(tmp_path))
    assert with_git_editables([line]) == [f"-e git+file://{tmp_path}@{commit}#egg=my_project"]
    plain = f"# Editable install (other==1)\n-e {tmp_path / 'not-a-repo'}"
    assert with_git_editables([plain]) == [plain]
