"""The training interpreter and environment: secrets masked, a frozen app never trains with itself and hands the
job the environment its bootloader changed back, and every rank's lines arrive whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO
from support.frozen import pretend_frozen

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.launch.environ import (
    installed_torch_version,
    is_secret_name,
    masked_env,
    python_problem,
    resolve_python,
    torch_extensions_dir,
    training_env,
    unfrozen_environ,
)


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID",
    "MY_PASSWORD", "DB_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS", "GITHUB_AUTH", "openai_api_key", "SSH_PRIVATE",
])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "CUDA_VISIBLE_DEVICES", "MASTER_PORT", "PYTHONPATH", "WANDB_PROJECT"])
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_masked_env_hides_values_and_url_passwords_only():
    env = {"HF_TOKEN": "hf_abc", "WANDB_API_KEY": "k", "PATH": "/bin",
           "HTTPS_PROXY": "http://alice:s3cret@proxy:3128", "MLFLOW_TRACKING_URI": "https://mlflow.example/x"}
    shown = masked_env(env)
    assert shown == {"HF_TOKEN": "***", "WANDB_API_KEY": "***", "PATH": "/bin",
                     "HTTPS_PROXY": "http://alice:***@proxy:3128", "MLFLOW_TRACKING_URI": "https://mlflow.example/x"}
    assert env["HF_TOKEN"] == "hf_abc", "masking returns a copy"


# ---- interpreter --------------------------------------------------------------------------------------------------

def test_default_interpreter_is_this_python():
    assert resolve_python(None) == sys.executable
    assert python_problem(sys.executable) is None


def test_missing_and_non_executable_interpreters(tmp_path):
    assert "not found" in python_problem(str(tmp_path / "nope" / "python"))
    assert "not found" in python_problem("no-such-python-anywhere")
    plain = tmp_path / "python"
    plain.write_text("")
    assert "not an executable file" in python_problem(str(plain))
    assert "not an executable file" in python_problem(str(tmp_path))


def test_relative_interpreter_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_python("venv/bin/python") == str(tmp_path / "venv" / "bin" / "python")


@pytest.fixture
def frozen_app(tmp_path, monkeypatch):
    """Pretend to be a PyInstaller one-file app: sys.frozen, an app executable, a bundle dir, python3 on PATH."""
    return pretend_frozen(monkeypatch, tmp_path / "traindeck-app", tmp_path / "_MEI12345", tmp_path / "bin")


def test_frozen_app_trains_with_python3_from_path_and_restores_the_environment(frozen_app, tmp_path):
    (tmp_path / "train.py").write_text("")
    bundle = str(frozen_app["bundle"])
    base = {
        "PATH": os.environ["PATH"],
        "LD_LIBRARY_PATH": bundle,  # what the bootloader set
        "LD_LIBRARY_PATH_ORIG": "/usr/local/cuda/lib64",  # what the user had
        "SSL_CERT_FILE": f"{bundle}/certifi/cacert.pem",  # a runtime hook's value: gone once the app exits
        "_PYI_APPLICATION_HOME_DIR": bundle,
        "_PYI_PARENT_PROCESS_LEVEL": "1",
        "HF_HOME": "/data/hf",
    }
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path), tmp_path / "run", base_env=base)
    assert plan.errors == []
    assert plan.python == plan.argv[0] == str(frozen_app["python3"])
    assert plan.argv[0] != sys.executable
    assert plan.env["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"
    for gone in ("LD_LIBRARY_PATH_ORIG", "SSL_CERT_FILE", "_PYI_APPLICATION_HOME_DIR", "_PYI_PARENT_PROCESS_LEVEL"):
        assert gone not in plan.env
    assert plan.env["HF_HOME"] == "/data/hf"


def test_frozen_app_without_original_library_path_drops_it(frozen_app):
    env = unfrozen_environ({"LD_LIBRARY_PATH": str(frozen_app["bundle"]), "X": "1"})
    assert env == {"X": "1"}


def test_frozen_app_refuses_its_own_executable_and_a_missing_python3(frozen_app, tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("")
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path, python=str(frozen_app["app"])), tmp_path / "r")
    assert any("traindeck's own executable" in e for e in plan.errors)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path), tmp_path / "r")
    assert plan.argv[0] == "python3"
    assert any("Python interpreter not found: python3" in e for e in plan.errors)


def test_not_frozen_keeps_library_path():
    assert unfrozen_environ({"LD_LIBRARY_PATH": "/a", "LD_LIBRARY_PATH_ORIG": "/b"}) == {
        "LD_LIBRARY_PATH": "/a", "LD_LIBRARY_PATH_ORIG": "/b"}


# ---- whole lines from every rank ---------------------------------------------------------------------------------

RANKS_SCRIPT = """\
import subprocess, sys
if len(sys.argv) > 1:
    rank = sys.argv[1]
    for i in range(4000):
        print("rank", rank, "step", i, "loss", 0.125)  # several writes per line without line buffering
        sys.stdout.write("bar %s %d\\r" % (rank, i))  # carriage-return redraws, no newline
    print()
else:
    children = [subprocess.Popen([sys.executable, __file__, str(r)]) for r in range(3)]
    sys.exit(max(c.wait() for c in children))
"""


def test_ranks_sharing_a_pipe_never_cut_into_each_others_lines(tmp_path):
    (tmp_path / "ranks.py").write_text(RANKS_SCRIPT)
    plan = build_plan(LaunchRequest(script="ranks.py", cwd=tmp_path), tmp_path / "run")
    done = subprocess.run(plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pieces = re.split(r"[\r\n]", done.stdout)
    steps = [p for p in pieces if p.startswith("rank")]
    bars = [p for p in pieces if p.startswith("bar")]
    mangled = [p for p in pieces if p and not re.fullmatch(r"rank [012] step \d+ loss 0\.125|bar [012] \d+", p)]
    assert mangled == []
    assert (len(steps), len(bars)) == (12000, 12000)


TAGGED_SCRIPT = """\
import subprocess, sys
print("hello from", sys.argv[1])
sys.stderr.write("\\rbar 1"); sys.stderr.write("\\rbar 2"); sys.stderr.write("\\n")
print("partial", end=""); print(" line")
print("[rank%s]: tagged by torch itself" % sys.argv[1])
child = subprocess.run([sys.executable, "-c", "print('{\\"json\\": 1}')"], capture_output=True, text=True)
print("child said", child.stdout.strip())
print(sys.stdout.isatty(), sys.stderr.fileno())
"""


@pytest.mark.parametrize(("extra", "tagged"), [
    ({"RANK": "1", "WORLD_SIZE": "2"}, True),
    ({"RANK": "1", "WORLD_SIZE": "2", "TRAINDECK_RANK_TAGS": "0"}, False),
    ({"RANK": "0", "WORLD_SIZE": "1"}, False),
    ({}, False),
])
def test_a_ranks_lines_carry_its_rank(tmp_path, extra, tagged):
    # DeepSpeed's launcher passes every rank's output through one pipe untagged; the site hook tags each line (and
    # each redraw) of a rank of a multi-rank run, the way torch tags a rank's traceback.
    (tmp_path / "tagged.py").write_text(TAGGED_SCRIPT)
    plan = build_plan(LaunchRequest(script="tagged.py", script_args=["1"], cwd=tmp_path, env=extra), tmp_path / "run")
    done = subprocess.run(plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    tag = "[rank1]: " if tagged else ""
    assert done.stdout.decode().splitlines() == [
        f"{tag}hello from 1", f"{tag}partial line", "[rank1]: tagged by torch itself",
        f'{tag}child said {{"json": 1}}',  # a subprocess's output, read by its parent, is left alone
        f"{tag}False 2"]
    assert done.stderr.decode() == f"\r{tag}bar 1\r{tag}bar 2\n"  # bytes: text mode would turn "\r" into "\n"


def test_a_shadowed_sitecustomize_still_runs(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITECUSTOMIZE'] = 'ran'\n")
    (tmp_path / "show.py").write_text("import os, sys\nprint(os.environ.get('THEIR_SITECUSTOMIZE'), "
                                      "sys.stdout.line_buffering)\n")
    plan = build_plan(LaunchRequest(script="show.py", cwd=tmp_path, env={"PYTHONPATH": str(theirs)}), tmp_path / "r")
    done = subprocess.run(plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["ran", "True"], done.stderr


def test_training_env_does_not_touch_os_environ():
    before = dict(os.environ)
    training_env({"X_TRAINDECK_TEST": "1"})
    assert dict(os.environ) == before


def test_line_buffering_hook_is_plain_stdlib():
    hook = REPO / "backend" / "launch" / "site_hook" / "sitecustomize.py"
    imports = set(re.findall(r"^\s*(?:import|from)\s+([\w.]+)", hook.read_text(), flags=re.M))
    # io, _thread: already loaded by every interpreter; faulthandler, signal, atexit, time and _thread are built into
    # the interpreter
    assert imports <= {"io", "os", "sys", "importlib.util", "faulthandler", "signal", "atexit", "time", "_thread",
                       "_traindeck_steps"}
    assert {"atexit", "time", "faulthandler", "_thread"} <= set(sys.builtin_module_names)


def test_step_timing_hook_imports_the_standard_library_and_what_the_rank_already_loaded():
    hook = REPO / "backend" / "launch" / "site_hook" / "_traindeck_steps.py"
    imports = set(re.findall(r"^\s*(?:import|from)\s+([\w.]+)", hook.read_text(), flags=re.M))
    stdlib = {"json", "os", "sys", "threading", "time", "typing", "atexit", "importlib.util"}
    # torch's own modules, imported only inside the attach functions, after the rank imported torch itself
    assert {i for i in imports if not i.startswith("torch")} <= stdlib


# ---- JIT-built ops: one folder per training interpreter ------------------------------------------------------------

def _venv(root: Path, torch_version: str | None) -> str:
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if torch_version:
        (site / f"torch-{torch_version}.dist-info").mkdir()
    (root / "bin").mkdir()
    python = root / "bin" / "python"
    python.symlink_to(sys.executable)  # a venv's python is a symlink: its own path counts, not the target's
    return str(python)


def test_each_interpreter_gets_its_own_extensions_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a = _venv(tmp_path / "a", "2.13.0+cpu")
    b = _venv(tmp_path / "b", "2.13.0+cpu")
    c = _venv(tmp_path / "c", "2.12.1")
    assert installed_torch_version(a) == "2.13.0+cpu" and installed_torch_version(c) == "2.12.1"
    folders = {torch_extensions_dir(p) for p in (a, b, c)}
    assert len(folders) == 3 and all(f.parent == tmp_path / "cache" / "traindeck" / "torch_extensions" for f in folders)
    assert torch_extensions_dir(a) == torch_extensions_dir(a), "stable for one interpreter"
    # The probe's site folders give the same answer as the venv guess.
    assert torch_extensions_dir(a, [str(tmp_path / "a" / "lib" / "python3.11" / "site-packages")]) \
        == torch_extensions_dir(a)
    assert training_env(base={}, python=a)["TORCH_EXTENSIONS_DIR"] == str(torch_extensions_dir(a))


def test_a_venv_reached_through_a_linked_folder_shares_its_extensions_folder(tmp_path, monkeypatch):
    # A project that links another checkout's .venv (or a venv on another disk) is the same interpreter: its ops
    # are not built again. The interpreter file's own link (to the system Python) is not followed.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = _venv(tmp_path / "real", "2.13.0+cpu")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / ".venv").symlink_to(tmp_path / "real")
    linked = str(tmp_path / "project" / ".venv" / "bin" / "python")
    assert torch_extensions_dir(linked) == torch_extensions_dir(real)
    assert torch_extensions_dir(str(tmp_path / "real" / "bin" / ".." / "bin" / "python")) == torch_extensions_dir(real)


def test_a_user_set_extensions_folder_is_kept(tmp_path):
    python = _venv(tmp_path / "v", "2.13.0")
    assert training_env(base={"TORCH_EXTENSIONS_DIR": "/fast/ext"}, python=python)["TORCH_EXTENSIONS_DIR"] == "/fast/ext"


def test_traindeck_home_does_not_move_the_extensions_folder(tmp_path, monkeypatch):
    # Every test (and every traindeck home) shares the built ops: rebuilding per home would cost minutes each.
    before = torch_extensions_dir(sys.executable)
    monkeypatch.setenv("TRAINDECK_HOME", str(tmp_path / "elsewhere"))
    assert torch_extensions_dir(sys.executable) == before


@pytest.mark.train
def test_the_probed_interpreter_gets_the_folder_make_setup_built():
    # The Launch page plans with the probe's site folders, `make setup` and the tests without: one folder for both.
    pytest.importorskip("torch", reason="needs the train extra")
    from traindeck.backend.launch.probe import probe_environment

    probed = probe_environment(sys.executable)
    assert probed.torch and probed.site_dirs
    assert torch_extensions_dir(sys.executable, probed.site_dirs) == torch_extensions_dir(sys.executable)
