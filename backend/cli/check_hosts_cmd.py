"""`traindeck check-hosts --hostfile FILE [--python PATH]`: the pre-flight checks of a multi-node launch, one line
per check per host; exit 1 when one fails (2 for a hostfile that cannot be read)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from traindeck.backend.cli import UserError

ORDER = 31


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-hosts", help="check every host of a DeepSpeed hostfile before a multi-node launch",
                       description="For each host: SSH without a password prompt, the same training interpreter "
                                   "path with the same torch/DeepSpeed versions, the script (with --script), a free "
                                   "rendezvous port on the first host, the network interface NCCL would use.")
    p.add_argument("--hostfile", required=True, metavar="FILE")
    p.add_argument("--python", metavar="PATH", help="the training interpreter (default: this Python)")
    p.add_argument("--script", metavar="FILE", help="also check that this script exists on every host")
    p.add_argument("--port", type=int, metavar="N", help="also check that this rendezvous port is free on the first "
                                                          "host")
    p.add_argument("--ssh-port", type=int, metavar="N", help="SSH port of the hosts (default: ssh's own)")
    p.set_defaults(handler=_check_hosts)


def _check_hosts(args: argparse.Namespace) -> int:
    from traindeck.backend.launch import resolve_python
    from traindeck.backend.nodes import HostfileError, Target, check_hosts, failed, read_hostfile

    try:
        hosts = read_hostfile(Path(args.hostfile).expanduser())
    except HostfileError as exc:
        raise UserError(str(exc)) from None
    script = str(Path(args.script).absolute()) if args.script else None
    checks = check_hosts(hosts, Target(resolve_python(args.python), script=script, master_port=args.port,
                                       ssh_port=args.ssh_port))
    for check in checks:
        print(check.line())
    bad = failed(checks)
    if bad:
        print(f"traindeck: {len(bad)} check(s) failed; first: {bad[0].host}: {bad[0].name}: {bad[0].detail}",
              file=sys.stderr)
        return 1
    print(f"traindeck: all {len(checks)} checks passed on {len(hosts)} host(s)", file=sys.stderr)
    return 0
