"""The real tools' own verdicts on a config: DeepSpeed's and accelerate's parsers, asked in a subprocess.

Where the `train` extra is installed (in this interpreter or another one, e.g. the training venv), DeepSpeed's
own models (DeepSpeedZeroConfig, the fp16/bf16/monitor models, DeepSpeedConfig itself with the world size patched
in) and accelerate's `load_config_from_file` judge the config too. They run in a child process of the given
interpreter (native_probe.py's text with `python -c`), so torch is never imported into the dashboard's process
and a slow or broken install cannot hang it. Nothing heavy is imported here; call `native_verdicts` off the UI
thread (it waits for the child: a few seconds, torch's import time).

Errors come back as `Message`s of severity "error" prefixed "DeepSpeed says: " / "accelerate says: "; a missing or
broken package, a timeout or an interpreter that cannot run is one warning saying the tool's checks were skipped.
Another kind can be added with `register_native_check`.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traindeck.backend.config.messages import Message, format_path
from traindeck.backend.config.source import SourceDocument

PROBE = Path(__file__).with_name("native_probe.py")
MARK = "@@traindeck-native@@"

# fn(data, python, timeout, options) -> messages. options: world_size, file, doc (the SourceDocument to locate the
# messages in, or None), text (only when data is None: the file's text, for the tool to read itself).
NativeCheck = Callable[[dict[str, Any] | None, str, float, dict[str, Any]], list[Message]]
_CHECKS: dict[str, NativeCheck] = {}


def register_native_check(kind: str, check: NativeCheck) -> None:
    """Add (or replace) the native check for one kind of config."""
    _CHECKS[kind] = check


def native_verdicts(kind: str, data: dict[str, Any] | None, python: str | None = None, timeout: float = 120, *,
                    world_size: int | None = None, doc: SourceDocument | None = None,
                    text: str | None = None) -> list[Message]:
    """What the real tool says about `data` (a config of `kind`), run with `python` (default: this interpreter).

    `world_size` feeds DeepSpeed's batch-size assertion (unknown: the world size the batch numbers imply, and
    DeepSpeed's batch assertion is not reported). With `doc`, messages are located in its file (line, column).
    With `text` instead of `data` (a file traindeck cannot read), the tool reads the text itself, as it reads a
    config file (DeepSpeed with hjson, accelerate with yaml), and says why it refuses it.
    """
    check = _CHECKS.get(kind)
    if check is None:
        return []
    options = {"world_size": world_size, "file": doc.file if doc is not None else None, "doc": doc}
    if text is not None and data is None:
        options["text"] = text
    from traindeck.backend.launch.environ import resolve_python

    # Not sys.executable directly: in a frozen app that is traindeck itself (resolve_python takes python3 there).
    return check(data, python or resolve_python(None), timeout, options)


def run_probe(python: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run the probe with `python`; its reply, or {"status": "failed", "error": why} when there is none."""
    try:
        source = PROBE.read_text(encoding="utf-8")
    except OSError as exc:  # pragma: no cover - a broken installation
        return {"status": "failed", "error": f"cannot read {PROBE}: {exc}"}
    from traindeck.backend.launch.environ import unfrozen_environ

    env = dict(unfrozen_environ(os.environ), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="traindeck-native-") as cwd:  # nothing in the cwd shadows a module
        try:
            done = subprocess.run([python, "-c", source], input=json.dumps(request, default=str), capture_output=True,
                                  text=True, timeout=timeout, cwd=cwd, env=env, check=False)
        except subprocess.TimeoutExpired:
            return {"status": "failed", "error": f"no answer within {timeout:g} s"}
        except OSError as exc:
            return {"status": "failed", "error": f"cannot run it ({exc.strerror or exc})"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(MARK):
            try:
                reply = json.loads(line[len(MARK):])
            except ValueError:
                break
            if isinstance(reply, dict):
                return reply
    tail = [ln for ln in done.stderr.strip().splitlines() if ln.strip()][-1:] or [f"exit status {done.returncode}"]
    return {"status": "failed", "error": tail[0].strip()}


def _probe_check(kind: str, tool: str) -> NativeCheck:
    def check(data: dict[str, Any] | None, python: str, timeout: float, options: dict[str, Any]) -> list[Message]:
        doc = options.get("doc")
        request = {"kind": kind, "data": data or {}, **{k: v for k, v in options.items() if k != "doc"}}
        reply = run_probe(python, request, timeout)
        status = reply.get("status")
        if status == "ok":
            out = []
            for item in reply.get("findings", ()):
                if isinstance(item, dict):
                    said = " ".join(str(item.get("message")).split())  # one line: a YAML error spans several
                    path, text = tuple(item.get("path", ())), f"{tool} says: {said}"
                    out.append(doc.message("error", path, text) if doc is not None else
                               Message("error", format_path(path), text))
            return out
        if status == "missing":
            text = f"{tool} is not installed in {python}: its own checks were skipped"
        elif status == "import-error":
            text = f"{tool} cannot be imported in {python} ({reply.get('error')}): its own checks were skipped"
        else:
            text = f"{tool}'s own checks could not run with {python} ({reply.get('error')}): skipped"
        return [doc.message("warning", (), text) if doc is not None else Message("warning", "", text)]

    return check


register_native_check("deepspeed", _probe_check("deepspeed", "DeepSpeed"))
register_native_check("accelerate", _probe_check("accelerate", "accelerate"))
