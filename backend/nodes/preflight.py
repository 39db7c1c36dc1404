"""Pre-flight checks for a multi-node DeepSpeed launch: every host, before anything starts.

One ssh call per host (in parallel) runs a small standard-library probe with the training interpreter's own path
there: reaching it at all proves SSH works without a password prompt (BatchMode) and that the interpreter exists
at the same path; the probe reports torch/DeepSpeed versions (package metadata: no import, so it takes a fraction
of a second), whether the script and working directory exist, whether the rendezvous port is free (first host
only) and which network interface NCCL would use. The same probe runs here with the same interpreter, so versions
are compared with what this machine launches.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from traindeck.backend.nodes.hostfile import Host
from traindeck.backend.nodes.ssh_argv import ssh_argv, ssh_failure

PROBE_TIMEOUT_S = 40.0
# Runs in the training interpreter on every host: standard library only, old syntax.
PROBE = r"""
import json, os, socket, subprocess, sys
out = {"python": sys.executable, "versions": {}}
try:
    from importlib import metadata
except ImportError:
    metadata = None
for name in ("torch", "deepspeed"):
    try:
        out["versions"][name] = metadata.version(name)
    except Exception:
        out["versions"][name] = None
script, cwd, port, first, ifname = sys.argv[1:6]
if script:
    out["script"] = os.path.isfile(script)
if cwd:
    out["cwd"] = os.path.isdir(cwd)
if port:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("", int(port)))
        out["port_free"] = True
    except OSError as e:
        out["port_free"] = False
        out["port_error"] = e.strerror
    finally:
        s.close()
try:
    out["interfaces"] = [n for _, n in socket.if_nameindex()]
except (AttributeError, OSError):
    out["interfaces"] = []
if not ifname and first:
    try:
        addr = socket.getaddrinfo(first, None)[0][4][0]
        text = subprocess.run(["ip", "-o", "route", "get", addr], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=10).stdout.split()
        out["route_dev"] = text[text.index("dev") + 1] if "dev" in text else None
        out["route_addr"] = addr
    except Exception as e:
        out["route_error"] = str(e)
print("TRAINDECK-PROBE " + json.dumps(out))
"""


@dataclass(frozen=True)
class Check:
    host: str
    name: str  # ssh, python, versions, script, cwd, port, network
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.host:<20} {self.name:<9} {'ok' if self.ok else 'FAILED':<7} {self.detail}"


@dataclass(frozen=True)
class Target:
    """What the checks are about: the training interpreter, and what the run needs on every host."""

    python: str
    script: str | None = None  # absolute path
    cwd: str | None = None  # DeepSpeed's runner does `cd` to the launch directory on every host
    master_port: int | None = None
    ssh_port: int | None = None
    env: Mapping[str, str] | None = None  # for PDSH_SSH_ARGS_APPEND and NCCL_SOCKET_IFNAME; None: os.environ


def _probe_argv(target: Target, first: str, on_first: bool, ifname: str) -> list[str]:
    port = str(target.master_port) if on_first and target.master_port else ""
    return [target.python, "-c", PROBE, target.script or "", target.cwd or "", port, first, ifname]


def _parse(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        if line.startswith("TRAINDECK-PROBE "):
            try:
                data = json.loads(line[len("TRAINDECK-PROBE "):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _run(argv: list[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, errors="replace")
    except subprocess.TimeoutExpired:
        return 124, "", f"no answer within {PROBE_TIMEOUT_S:g} s"
    except OSError as exc:
        return 127, "", f"{exc.strerror or exc}: {argv[0]}"
    return done.returncode, done.stdout, done.stderr


def _ifname(env: Mapping[str, str] | None) -> str:
    import os

    return (os.environ if env is None else env).get("NCCL_SOCKET_IFNAME", "").strip()


def check_hosts(hosts: Sequence[Host], target: Target) -> list[Check]:
    """Every check for every host, in hostfile order (a local line first: pdsh and this machine's versions)."""
    checks: list[Check] = []
    ifname = _ifname(target.env)
    first = hosts[0].name if hosts else ""
    if shutil.which("pdsh") is None:
        checks.append(Check("(this machine)", "pdsh", False, "pdsh is not installed: DeepSpeed's multi-node runner "
                            "starts the other nodes through it (apt-get install pdsh)"))
    code, out, err = _run(_probe_argv(Target(target.python), "", False, ifname))
    local = _parse(out)
    if local is None:
        checks.append(Check("(this machine)", "python", False,
                            f"{target.python} did not run here: {(err.strip().splitlines() or ['exit ' + str(code)])[-1]}"))

    def one(index: int) -> list[Check]:
        host = hosts[index]
        argv = ssh_argv(host.name, _probe_argv(target, first, index == 0, ifname), port=target.ssh_port,
                        env=target.env)
        return _host_checks(host.name, index == 0, target, ifname, local, *_run(argv))

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        for found in pool.map(one, range(len(hosts))):
            checks += found
    return checks


def _host_checks(host: str, is_first: bool, target: Target, ifname: str, local: dict[str, Any] | None,
                 code: int, out: str, err: str) -> list[Check]:
    if code == 255 or (code == 124 and not out):
        return [Check(host, "ssh", False, ssh_failure(host, code, err).split(": ", 1)[1])]
    checks = [Check(host, "ssh", True, "reachable without a password prompt")]
    data = _parse(out)
    if data is None:
        last = (err.strip().splitlines() or [f"exit {code}"])[-1]
        if code == 127 or "No such file" in last or "not found" in last:
            last = f"{target.python} does not exist there (the same interpreter path is needed on every host)"
        return [*checks, Check(host, "python", False, last)]
    checks.append(Check(host, "python", True, target.python))
    versions = data.get("versions") or {}
    mine = (local or {}).get("versions") or {}
    wrong = []
    for name in ("torch", "deepspeed"):
        theirs = versions.get(name)
        if theirs is None:
            wrong.append(f"{name} is not installed")
        elif local is not None and mine.get(name) != theirs:
            wrong.append(f"{name} {theirs} (this machine: {mine.get(name)})")
    text = ", ".join(f"{n} {versions.get(n)}" for n in ("torch", "deepspeed"))
    checks.append(Check(host, "versions", not wrong, "; ".join(wrong) if wrong else text))
    if target.script:
        ok = bool(data.get("script"))
        checks.append(Check(host, "script", ok, target.script if ok else f"{target.script} is missing"))
    if target.cwd:
        ok = bool(data.get("cwd"))
        checks.append(Check(host, "cwd", ok, target.cwd if ok else
                            f"{target.cwd} is missing (DeepSpeed's runner starts every node there)"))
    if is_first and target.master_port:
        ok = bool(data.get("port_free"))
        checks.append(Check(host, "port", ok, f"rendezvous port {target.master_port} is free" if ok else
                            f"rendezvous port {target.master_port} is in use ({data.get('port_error')})"))
    checks.append(_network(host, ifname, data))
    return checks


def _network(host: str, ifname: str, data: dict[str, Any]) -> Check:
    names = [str(n) for n in data.get("interfaces") or []]
    if ifname:
        matching = [n for n in names if _nccl_matches(ifname, n)]
        if not matching:
            return Check(host, "network", False, f"NCCL_SOCKET_IFNAME={ifname} matches none of {', '.join(names)}")
        return Check(host, "network", True, f"NCCL_SOCKET_IFNAME={ifname}: {', '.join(matching)}")
    dev = data.get("route_dev")
    if not dev:
        why = data.get("route_error") or "no route found"
        return Check(host, "network", False, f"no route to the first host: {why}")
    return Check(host, "network", True, f"{dev} (the route to the first host, {data.get('route_addr')}); "
                 "set NCCL_SOCKET_IFNAME to choose another")


def _nccl_matches(spec: str, name: str) -> bool:
    """NCCL_SOCKET_IFNAME: comma-separated prefixes; `^` excludes, `=` asks for exact names."""
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    spec = spec.lstrip("=")
    parts = [p for p in spec.split(",") if p]
    hit = any(name == p if exact else name.startswith(p) for p in parts)
    return not hit if exclude else hit


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]
