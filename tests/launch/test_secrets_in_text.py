"""Secrets a script puts in its own text: a token in an exception's message, a printed `Authorization: Bearer <JWT>`,
the value of a secret variable quoted in a traceback. A real run fails with them; everything traindeck writes down
or passes on (the diagnosis in the store and in `runs show`, evidence.json, supervisor.log, the events, the notify
command's TRAINDECK_DIAGNOSIS, the bundle's files) holds none of them, while the ordinary lines beside them (a
commit id, max_tokens=512, pad_token, a loss, a file's sha256) come through unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.runhelp import wait_finished, wait_until

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.runs.record.run_store import RunStore

pytestmark = pytest.mark.timeout(300)

HF = "hf_" + "Kx4Rt9Wq2Lm7" * 3
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ0cmFpbmVyIiwiZXhwIjoxOTAwMDAwMDAwfQ"
       ".kQ3v1x0yTzW8bN5cR2mP7aL4dF6gH9jK0sU1eI3oY_c")
SERVICE = "plain-service-secret-8d41"  # shaped like nothing: only its variable's name says it is a secret
SHA1 = "9fceb02d0ae598e95dc970b74767f19372d61af8"
SHA256 = hashlib.sha256(b"train.jsonl").hexdigest()
ORDINARY = f"HEAD is now at {SHA1}; max_tokens=512 pad_token=<pad> loss=0.123 data sha256={SHA256}"
SECRETS = (HF, JWT, SERVICE)

SCRIPT = f"""
import os
print("step 1 loss 0.5", flush=True)
print({ORDINARY!r}, flush=True)
print("GET https://hub.example/api: Authorization: Bearer {JWT}", flush=True)
raise RuntimeError("401 Unauthorized: the Hub refused {HF} (service " + os.environ["MY_SERVICE_TOKEN"] + ")")
"""
RECORDER = ("import json, os, sys; open(sys.argv[1], 'a').write(json.dumps({k: v for k, v in os.environ.items() "
            "if k.startswith('TRAINDECK_') and k != 'TRAINDECK_HOME'}) + '\\n')")


def traindeck(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=180, env=env)


def without_secrets(text: str | bytes, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    for secret in SECRETS:
        assert secret.encode() not in data, f"{secret[:12]}... in {where}"


def test_a_token_in_an_exception_and_a_printed_bearer_token_are_masked_everywhere_traindeck_writes(
        tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    notified = tmp_path / "notify.jsonl"
    assert traindeck("notify", "--command", sys.executable, "-c", RECORDER, str(notified), cwd=tmp_path).returncode == 0
    env = {**os.environ, "MY_SERVICE_TOKEN": SERVICE}
    started = traindeck("run", "--detach", "--launcher", "python", "--name", "leaky", "train.py", cwd=tmp_path,
                        env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip().splitlines()[-1]
    record = wait_finished(run_id)
    assert record.state == "failed"
    run_dir = Path(record.run_dir)
    log = (run_dir / "output.log").read_text()
    assert HF in log and JWT in log and SERVICE in log  # the script's own bytes, as it printed them

    # The diagnosis names the exception, with its secrets masked, in the store and in `runs show`.
    shown = json.loads(traindeck("runs", "show", run_id, "--json", cwd=tmp_path).stdout)
    diagnosis = json.dumps(shown["diagnosis"])
    assert "401 Unauthorized: the Hub refused *** (service ***)" in diagnosis, diagnosis
    without_secrets(json.dumps(shown), "runs show --json")
    without_secrets(traindeck("runs", "show", run_id, cwd=tmp_path).stdout, "runs show")
    assert "refused ***" in (record.state_detail or "")

    evidence = (run_dir / "evidence.json").read_text()
    assert "refused ***" in evidence
    without_secrets(evidence, "evidence.json")
    supervisor_log = wait_until(lambda: (run_dir / "supervisor.log").read_text(), 30)
    assert "refused ***" in supervisor_log, supervisor_log
    without_secrets(supervisor_log, "supervisor.log")
    with RunStore() as store:
        texts = [e.text for e in store.events(run_id)]
    assert any("refused ***" in text for text in texts), texts
    without_secrets("\n".join(texts), "events")
    for path in run_store_path().parent.glob(run_store_path().name + "*"):  # the database, its WAL
        without_secrets(path.read_bytes(), path.name)

    def failed_alert() -> dict[str, str] | None:
        seen = [json.loads(line) for line in notified.read_text().splitlines()] if notified.exists() else []
        return next((e for e in seen if e["TRAINDECK_EVENT"] == "failed"), None)

    alert = wait_until(failed_alert, 60)
    assert alert["TRAINDECK_RUN_ID"] == run_id and "refused ***" in alert["TRAINDECK_DIAGNOSIS"], alert
    without_secrets(json.dumps(alert), "TRAINDECK_DIAGNOSIS")

    # The bundle, made from the shell the run was started from (its secret variable set there too).
    target = tmp_path / "report.zip"
    bundled = traindeck("runs", "bundle", run_id, "-o", str(target), cwd=tmp_path, env=env)
    assert bundled.returncode == 0, bundled.stderr
    with zipfile.ZipFile(target) as archive:
        files = {Path(name).name: archive.read(name) for name in archive.namelist()}
    assert {"output.log", "supervisor.log", "evidence.json", "summary.json"} <= set(files)
    for name, data in files.items():
        without_secrets(data, f"the bundle's {name}")
    bundled_log = files["output.log"].decode()
    assert "Authorization: Bearer ***" in bundled_log and "refused *** (service ***)" in bundled_log
    assert ORDINARY in bundled_log and "step 1 loss 0.5" in bundled_log  # nothing that is not a secret is masked
    assert (run_dir / "output.log").read_text() == log  # the run's own log is left as the script wrote it
