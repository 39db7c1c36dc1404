"""`runs bundle`: one zip for a bug report: the run's logs, configs, command, diagnosis, provenance and resource
summary, and its event journal (events.jsonl, what a rebuilt run store takes the run's events from). Secrets are
masked: the run directory's own records never hold them (command.json, request.json and events.jsonl are written
masked, the diagnosis and evidence.json are masked by the supervisor), and every file is passed through the
masking of free text (masking.TextMasker: credential shapes, JSON Web Tokens, Authorization / Bearer credentials,
secret-named key=value pairs, URL passwords) on its way in, with the values of the secret-looking variables of
this environment (a token set in the shell that launched the run) masked too. The run's output.log on disk stays
the script's own bytes: only the copy in the zip is masked. A file that is a symbolic link (or not a plain file) is
left out, never followed: a link in the run directory cannot put a file from elsewhere in the zip.
"""

from __future__ import annotations

import io
import json
import os
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_bytes
from traindeck.backend.core.masking import TextMasker
from traindeck.backend.core.masking import secret_values as env_secret_values
from traindeck.backend.runs.record.folder_record import EVENTS_FILE

# Run-directory files that belong in a report (the run's checkpoints and data never do).
FILES = ("command.json", "request.json", "lineage.json", "output.log", "supervisor.log", "sidecar.log",
         "evidence.json", EVENTS_FILE, "provenance.json", "git.diff", "requirements.txt", "companion.json",
         "estimate.json", "accelerate_config.yaml", "ds_config.json")
MAX_FILE_BYTES = 64 << 20  # a larger log goes in as its last 64 MiB


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret variables of `environ` (default: this process's environment), longest first."""
    return env_secret_values(os.environ if environ is None else environ)


def write_bundle(run_dir: Path | str, summary: dict[str, Any], target: Path | str,
                 environ: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
    """Write the zip (atomically); returns (its size in bytes, the names inside)."""
    run_dir = Path(run_dir)
    masker = TextMasker(secret_values(environ))
    names: list[str] = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in FILES:
            handle = _open_plain(run_dir / name)
            if handle is None:
                continue
            with handle, archive.open(f"{run_dir.name}/{name}", "w", force_zip64=True) as member:
                try:
                    size = os.fstat(handle.fileno()).st_size
                    if size > MAX_FILE_BYTES:
                        handle.seek(size - MAX_FILE_BYTES)
                        handle.readline()  # from the first whole line on
                    for piece in masker.stream(handle):
                        member.write(piece)
                except OSError:
                    pass  # what could be read is in
            names.append(name)
        text = json.dumps(summary, indent=2, default=str).encode()
        archive.writestr(f"{run_dir.name}/summary.json", masker.mask(text))
        names.append("summary.json")
    payload = buffer.getvalue()
    atomic_write_bytes(Path(target), payload)
    return len(payload), names


def _open_plain(path: Path) -> io.BufferedReader | None:
    """`path` opened for reading when it is a plain file; None when it is missing, unreadable, a symbolic link
    (O_NOFOLLOW) or anything else (a FIFO would block the read: O_NONBLOCK on the open, the type checked after)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb")
    except OSError:
        os.close(fd)
        return None
