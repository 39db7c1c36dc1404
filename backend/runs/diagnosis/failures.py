"""What each rank's own output says went wrong, and which of those errors are only consequences.

When one rank fails, the others fail after it: gloo/NCCL lose the connection ("Connection closed by peer",
"remote worker crashing"), collectives time out, the launcher ends them (SIGTERM/SIGKILL) and torch's elastic agent
prints a ChildFailedError summary. Those lines come last in the log, so reading the last error line blames the
wrong rank for the wrong thing. Here a log is split by its rank tags ("[rankN]: ", put on every line by the run's
sitecustomize and on tracebacks by torch itself) and each error line is sorted into a cause or a consequence.
Pure functions over lines; nothing here touches the system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from traindeck.backend.runs.diagnosis.kinds import ErrorKind

_TAG = re.compile(r"^\[rank(\d+)\]:\s?")

# Specific causes, most telling first: (kind, pattern).
CUDA_OOM = re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"
                      r"|HIP out of memory|XPU out of memory")
HOST_ALLOC = re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|^MemoryError\b"
                        r"|std::bad_alloc|Cannot allocate memory \(errno 12\)|Unable to allocate [\d.]+ \w?i?B for an"
                        r" array")
TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|NCCL (?:communicator|operation).*timed? ?out"
                     r"|ProcessGroupNCCL.*[Tt]imeout|\[Gloo\].*[Tt]imed? ?out|gloo.*Timed out|DistStoreError.*[Tt]imeout"
                     r"|Timed out (?:after|waiting).*(?:store|rendezvous|clients)|Socket Timeout|NCCL_TIMEOUT"
                     r"|wait timeout after \d+ms")
PORT = re.compile(r"EADDRINUSE|[Aa]ddress already in use|server socket has failed to (?:listen|bind)|errno: 98")
MISSING = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
# DeepSpeed's fp16 loss scaler gave up (deepspeed/runtime/fp16/loss_scaler.py): the loss overflowed at every scale.
LOSS_SCALE = re.compile(r"Current loss scale already at minimum - cannot decrease scale anymore")
# An op's build failing, at each stage torch's cpp_extension and ninja print (the paste may stop at any of them).
OP_BUILD = re.compile(r"Error building extension '(?P<op>\w+)'|ninja: build stopped: subcommand failed"
                      r"|CalledProcessError: Command '\['ninja', '-v'.*returned non-zero exit status"
                      r"|nvcc fatal\s*: (?:Unsupported gpu architecture|Value '\w+' is not defined)"
                      r"|fatal error: [\w/.+-]+\.h(?:pp)?: No such file or directory"
                      r"|CUDA_HOME does not exist, unable to compile CUDA op|MissingCUDAException"
                      r"|CUDA_HOME environment variable is not set|No CUDA runtime is found"
                      r"|error: command '[\w/.+-]*(?:gcc|g\+\+|c\+\+|nvcc)' failed"
                      # DeepSpeed's setup.py prebuilding ops (DS_BUILD_OPS=1), nvcc refusing the host compiler, a
                      # compiler's or linker's own error line (file:line[:col]: error:, MSVC's LNK/C errors).
                      r"|Unable to pre-compile (?P<prebuilt>\w+)|unsupported GNU version! gcc versions later than \d+"
                      r"|\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp)(?::\d+){1,2}: (?:fatal )?error:|: fatal error (?:LNK|C)\d+:")
SEGFAULT = re.compile(r"Fatal Python error: Segmentation fault|Segmentation fault(?: \(core dumped\))?$"
                      r"|Caught signal 11 \(Segmentation fault")
DISK_FULL = re.compile(r"No space left on device|\[Errno 28\]|ENOSPC|Disk quota exceeded|\[Errno 122\]")
# An installed package of the wrong version: transformers' own check, pkg_resources, a name the package lacks.
PACKAGE_VERSION = re.compile(r"(?P<want>[\w.-]+(?:[<>=!~]=?[\w.*+-]+,?)+) is required for a normal functioning of "
                             r"this module, but found (?P<found>[\w.-]+==[\w+-]+(?:\.[\w+-]+)*)"
                             r"|VersionConflict: \((?P<have>[\w.-]+ [\w.+-]+)"
                             r"|ImportError: cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)'"
                             r"|requires (?P<pkg>[\w.-]+)(?P<spec>(?:[<>=!~]=?[\w.*+-]+,?)+)[^\n]*but (?:found|you have)"
                             r" (?P<have2>[\w.+-]+)")
# deepspeed/runtime/config.py's _batch_assertion; a rich traceback wraps the message, so its opening words count alone.
DS_BATCH = re.compile(r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size"
                      r"[^\n]*|AssertionError: Check batch related parameters\.")
CONFIG = re.compile(r"(?:pydantic(?:_core)?\.)?(?:_core\.)?ValidationError: \d+ validation errors? for \w+"
                    r"|\d+ validation errors? for DeepSpeed\w*"
                    r"|json\.decoder\.JSONDecodeError: .*|yaml\.\w+\.\w+Error: .*"
                    r"|(?:ValueError|KeyError|TypeError|AssertionError): .*(?:config|deepspeed_config|zero_optimization"
                    r"|accelerate).*")
# The rank refused the --local_rank=N argument its launcher added (DeepSpeed's launch.py puts it before the script's
# own arguments; torch.distributed.launch passes --local-rank=N since torch 2.0): argparse's error, HfArgumentParser's,
# or the Python interpreter's own when the launcher runs `python` as a command ("unknown option --local_rank=0").
LOCAL_RANK_ARG = re.compile(r"error: unrecognized arguments:.*?(?P<arg>--local[_-]rank(?:[= ]\d+)?)"
                            r"|arguments are not used by the HfArgumentParser: \[.*?'(?P<hf>--local[_-]rank(?:=\d+)?)'"
                            r"|^(?P<python>[Uu]nknown option:? --local[_-]rank(?:=\d+)?)")
EXCEPTION = re.compile(r"^(?P<name>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit))"
                       r"(?::\s*(?P<message>.*))?$")

# A peer went away: this rank's error is what another rank's failure looked like from here.
PEER_LOST = re.compile(r"Connection closed by peer|remote worker crash|Connection reset by peer"
                       r"|[Bb]roken pipe.*(?:gloo|c10d|[Ss]tore)|(?:gloo|c10d|[Ss]tore).*[Bb]roken pipe"
                       r"|ncclRemoteError|remote process exited|NCCL communicator was aborted"
                       r"|failed to recv, got 0 bytes|Connection refused.*(?:store|rendezvous)")
# What launchers say after a rank failed: never the cause.
LAUNCHER_SUMMARY = re.compile(r"ChildFailedError|torch\.distributed\.elastic\.multiprocessing\.api\.SignalException"
                              r"|SignalException: Process \d+ got signal|exits with return code = -?\d+"
                              r"|Killing subprocess \d+|^KeyboardInterrupt$|^SystemExit\b")

SPECIFIC: tuple[tuple[ErrorKind, re.Pattern[str]], ...] = (
    ("cuda_oom", CUDA_OOM), ("cpu_alloc", HOST_ALLOC), ("disk_full", DISK_FULL), ("loss_scale", LOSS_SCALE),
    ("op_build", OP_BUILD), ("deepspeed_batch_size", DS_BATCH), ("port_in_use", PORT),
    ("local_rank_arg", LOCAL_RANK_ARG), ("missing_module", MISSING), ("package_version", PACKAGE_VERSION),
    ("config_error", CONFIG), ("segfault", SEGFAULT),
)
CONSEQUENCES: tuple[tuple[ErrorKind, re.Pattern[str]], ...] = (
    ("collective_timeout", TIMEOUT), ("peer_lost", PEER_LOST), ("launcher_summary", LAUNCHER_SUMMARY),
)


@dataclass(frozen=True)
class ErrorLine:
    kind: ErrorKind  # a SPECIFIC or CONSEQUENCES kind, or "exception"
    text: str  # the line without its rank tag, stripped
    index: int  # position among the lines it was found in
    consequence: bool


def rank_of_line(line: str) -> int | None:
    match = _TAG.match(line)
    return int(match.group(1)) if match else None


def split_by_rank(lines: list[str]) -> tuple[dict[int, list[str]], list[str]]:
    """({rank: its own lines, tag removed}, the untagged lines: launcher output, single-process runs)."""
    own: dict[int, list[str]] = {}
    untagged: list[str] = []
    for line in lines:
        match = _TAG.match(line)
        if match:
            own.setdefault(int(match.group(1)), []).append(line[match.end():])
        else:
            untagged.append(line)
    return own, untagged


def classify(text: str) -> ErrorLine | None:
    """The error a line reports, if any (consequences are checked first: a gloo "Connection closed by peer"
    RuntimeError is a consequence, not an exception of its own)."""
    stripped = text.strip()
    stripped = _TAG.sub("", stripped)
    for kind, pattern in CONSEQUENCES:
        if pattern.search(stripped):
            return ErrorLine(kind, stripped, -1, True)
    for kind, pattern in SPECIFIC:
        if pattern.search(stripped):
            return ErrorLine(kind, stripped, -1, False)
    match = EXCEPTION.match(stripped)
    if match and "subprocess.CalledProcessError" not in stripped:
        return ErrorLine("exception", stripped, -1, False)
    return None


def errors(lines: list[str]) -> list[ErrorLine]:
    found = []
    for index, line in enumerate(lines):
        hit = classify(line)
        if hit is not None:
            found.append(ErrorLine(hit.kind, hit.text, index, hit.consequence))
    return found


_ORDER = {kind: i for i, (kind, _pattern) in enumerate(SPECIFIC)}


def cause(lines: list[str]) -> ErrorLine | None:
    """The error that ended these lines' owner by itself: the most telling specific error (the last of its kind),
    else the last plain exception; consequences never count."""
    own = [e for e in errors(lines) if not e.consequence]
    specific = [e for e in own if e.kind in _ORDER]
    if specific:
        best = min(_ORDER[e.kind] for e in specific)
        return [e for e in specific if _ORDER[e.kind] == best][-1]
    return own[-1] if own else None


def consequence(lines: list[str]) -> ErrorLine | None:
    """The most telling consequence in these lines: a timeout or a lost peer before a launcher's summary."""
    found = [e for e in errors(lines) if e.consequence]
    for kind in ("collective_timeout", "peer_lost", "launcher_summary"):
        hits = [e for e in found if e.kind == kind]
        if hits:
            # The exception line (RuntimeError: ...) reads better than a C++ log line saying the same.
            named = [e for e in hits if EXCEPTION.match(e.text)]
            return (named or hits)[-1]
    return None


def local_rank_refused(text: str) -> tuple[str, str] | None:
    """(the --local_rank argument as the error quotes it, who refused it: "argparse", "HfArgumentParser" or
    "python", the interpreter itself) from a LOCAL_RANK_ARG line, else None."""
    match = LOCAL_RANK_ARG.search(text)
    if match is None:
        return None
    if match.group("python"):
        return match.group("python").split()[-1], "python"
    return (match.group("arg"), "argparse") if match.group("arg") else (match.group("hf"), "HfArgumentParser")


def cuda_device(text: str) -> str | None:
    """"GPU 1" from a CUDA OOM message ("GPU 1 has a total capacity of ..."), else None."""
    # torch 2.1 printed "total capacty" (sic).
    match = re.search(r"GPU (\d+) has a total capac(?:i)?ty of ([\d.]+ \w?i?B)", text)
    if match:
        return f"GPU {match.group(1)} ({match.group(2)})"
    match = re.search(r"on device (\d+)|cuda:(\d+)", text)
    if match:
        return f"GPU {match.group(1) or match.group(2)}"
    return None


_PORT_NAMED = re.compile(r"\bport: (\d+)|\]:(\d+) \(errno: 98|:(\d+) \(errno: 98|[Aa]ddress already in use.*?\bport (\d+)")


def port_named(lines: list[str]) -> int | None:
    """The port a bind failure names (torch's c10d: "port: 29500, ... EADDRINUSE", "[::]:29500 (errno: 98 ..."),
    the last one said, else None."""
    for line in reversed(lines):
        match = _PORT_NAMED.search(line)
        if match:
            return int(next(g for g in match.groups() if g))
    return None


_FULL_PATH = re.compile(r"(?:No space left on device|Disk quota exceeded)[:,]? '([^']+)'")


def full_path(text: str) -> str | None:
    """The path an ENOSPC error names ("[Errno 28] No space left on device: '/data/ckpt'"), else None."""
    match = _FULL_PATH.search(text)
    return match.group(1) if match else None


def wanted_bytes(text: str) -> int | None:
    """How much the refused allocation asked for ("you tried to allocate 17592186044416 bytes")."""
    match = re.search(r"tried to allocate (\d+) bytes", text)
    return int(match.group(1)) if match else None
