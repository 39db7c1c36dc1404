"""`traindeck --host USER@MACHINE ...` against a real sshd on 127.0.0.4:2224 (tests/sshhelp.py): the remote side's
data really comes from there (its own TRAINDECK_HOME), streams, exit codes, Ctrl+C, and the one-line errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.sshhelp import VENV_TRAINDECK, Remote, remote_processes

from traindeck.backend.remote.ssh import AUTH_REFUSED, MISSING, UNREACHABLE, Target, remote_command, ssh_argv

pytestmark = pytest.mark.ssh
# The runs' interpreter: this one (`run` checks it has torch; under load that probe is the slow part).
PLAIN_PYTHON = sys.executable


def td(remote: Remote, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_TRAINDECK), "--host", remote.host, *args], capture_output=True, text=True,
                          timeout=timeout, env=remote.env(**env), stdin=subprocess.DEVNULL)


def local_td(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_TRAINDECK), *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def tiny_script(tmp: Path, name: str, steps: int, pause: float) -> Path:
    script = tmp / name
    script.write_text("import sys, time\n"
                      f"for i in range({steps}):\n"
                      f"    print(f'step {{i}} loss {{1.0 / (i + 1):.3f}}', flush=True)\n"
                      f"    time.sleep({pause})\n")
    return script


def test_remote_command_quotes_each_word() -> None:
    target = Target("root@h", "env A=1 /opt/my traindeck/bin/traindeck".replace("my traindeck", "'my traindeck'"))
    line = remote_command(target, ["runs", "show", "x; rm -rf /", "it's"], end_with_stdin=True)
    assert line == ("env TRAINDECK_END_WITH_STDIN=1 env A=1 '/opt/my traindeck/bin/traindeck' runs show "
                    "'x; rm -rf /' 'it'\"'\"'s'")
    argv = ssh_argv(target, line)
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"] and argv[-3:] == ["--", "root@h", line]


def test_runs_list_shows_the_remote_runs_not_the_local_ones(sshd: Remote, tmp_path: Path) -> None:  # noqa: F811
    script = tiny_script(tmp_path, "remote_only.py", 2, 0.01)
    started = td(sshd, "run", "--name", "from-the-remote", "--detach", "--python", PLAIN_PYTHON, str(script))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]
    local = local_td("run", "--name", "local-one", "--detach", "--python", PLAIN_PYTHON, str(script))
    assert local.returncode == 0, local.stderr

    listed = td(sshd, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = {r["id"]: r for r in json.loads(listed.stdout)}  # the remote home is shared by this session's tests
    assert run_id in runs and runs[run_id]["name"] == "from-the-remote"
    assert all(str(sshd.home) in r["log"] for r in runs.values())  # every one from the remote side's data directory
    assert "local-one" not in listed.stdout
    assert [r["name"] for r in json.loads(local_td("runs", "list", "--json").stdout)] == ["local-one"]


def test_run_detach_logs_follow_and_stop_leave_nothing(sshd: Remote, tmp_path: Path) -> None:  # noqa: F811
    script = tiny_script(tmp_path, "slow_remote.py", 10_000, 0.2)
    started = td(sshd, "run", "--detach", "--python", PLAIN_PYTHON, str(script))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]

    follow = subprocess.Popen([str(VENV_TRAINDECK), "--host", sshd.host, "logs", run_id, "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sshd.env(),
                              stdin=subprocess.DEVNULL)
    assert follow.stdout is not None
    lines = [follow.stdout.readline() for _ in range(3)]  # streamed: lines arrive while the run goes on
    assert all("loss" in line for line in lines), lines

    stopped = td(sshd, "stop", run_id, "--grace", "5")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert follow.wait(30) == 0  # the followed run ended: so did the remote `logs --follow`
    shown = json.loads(td(sshd, "runs", "show", run_id, "--json").stdout)
    assert shown["state"] in ("stopped", "failed") and shown["end_check"]["kind"] == "confirmed", shown
    assert remote_processes(str(script)) == []


def test_ctrl_c_ends_the_remote_command(sshd: Remote, tmp_path: Path) -> None:  # noqa: F811
    script = tiny_script(tmp_path, "quiet_remote.py", 1, 600)  # prints once, then silent: a follow that waits
    run_id = td(sshd, "run", "--detach", "--python", PLAIN_PYTHON, str(script)).stdout.split()[-1]
    follow = subprocess.Popen([str(VENV_TRAINDECK), "--host", sshd.host, "logs", run_id, "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sshd.env(),
                              stdin=subprocess.DEVNULL)
    assert follow.stdout is not None
    assert "step 0" in follow.stdout.readline()
    marker = f"logs {run_id} --follow"
    assert len(remote_processes(marker)) >= 2  # ours and the remote traindeck under sshd
    follow.send_signal(signal.SIGINT)
    code = follow.wait(30)
    assert code == 130, follow.stderr.read() if follow.stderr else code  # the remote's own Ctrl+C status
    deadline = time.monotonic() + 10
    while remote_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert remote_processes(marker) == []  # nothing left on the remote
    td(sshd, "stop", run_id, "--grace", "1")


def test_exit_status_and_stderr_pass_through(sshd: Remote) -> None:  # noqa: F811
    missing = td(sshd, "runs", "show", "no-such-run")
    assert missing.returncode == 2
    assert missing.stderr.startswith("traindeck: ") and "no-such-run" in missing.stderr
    assert missing.stdout == ""


def test_unreachable_host_is_one_line(sshd: Remote) -> None:  # noqa: F811
    result = subprocess.run([str(VENV_TRAINDECK), "--host", "root@127.0.0.4", "runs", "list"], capture_output=True,
                            text=True, timeout=60, env=sshd.env(TRAINDECK_SSH_CONFIG="/dev/null"),
                            stdin=subprocess.DEVNULL)  # /dev/null: port 22, where nothing listens on 127.0.0.4
    assert result.returncode == UNREACHABLE
    assert result.stderr.count("\n") == 1 and "host unreachable" in result.stderr, result.stderr


def test_refused_key_is_one_line(sshd: Remote, tmp_path: Path) -> None:  # noqa: F811
    config = tmp_path / "ssh_config"
    text = sshd.ssh_config.read_text()
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    config.write_text("\n".join(f"    IdentityFile {other}" if "IdentityFile" in line else line
                                for line in text.splitlines()) + "\n")
    result = td(sshd, "runs", "list", TRAINDECK_SSH_CONFIG=str(config))
    assert result.returncode == AUTH_REFUSED
    assert result.stderr.count("\n") == 1 and "authentication refused" in result.stderr, result.stderr


def test_missing_traindeck_is_one_line(sshd: Remote) -> None:  # noqa: F811
    result = td(sshd, "runs", "list", TRAINDECK_REMOTE="/nowhere/traindeck")
    assert result.returncode == MISSING
    assert result.stderr.count("\n") == 1 and "--remote-traindeck" in result.stderr, result.stderr


def test_remote_traindeck_option_wins_over_the_environment(sshd: Remote) -> None:  # noqa: F811
    result = subprocess.run([str(VENV_TRAINDECK), "--host", sshd.host, "--remote-traindeck", sshd.traindeck,
                             "--version"], capture_output=True, text=True, timeout=60,
                            env=sshd.env(TRAINDECK_REMOTE="/nowhere/traindeck"), stdin=subprocess.DEVNULL)
    assert result.returncode == 0 and result.stdout.startswith("traindeck "), result.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
