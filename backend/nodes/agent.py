"""The per-node agent: reports one node's part of a run to the supervisor's node watch, over ssh.

Started on each node as `PYTHON -c <this file's text> RUN_ID NODE_RANK RANKS [NODE_DIR]` through the same ssh the
run uses, so it needs nothing installed there but the training interpreter (psutil comes with DeepSpeed). It writes one
JSON line per second on stdout (the ssh channel back): the node's rank processes (pid, rank, RSS, CPU), host CPU
and RAM, GPUs when NVML can be read, and each rank's end the moment it is seen (rank pids are polled every 50 ms,
so the first of two ranks to die is told apart). It reads commands on stdin: `signal NAME` sends that signal to
the run's processes on this node (its ranks and DeepSpeed's launch.py for this node). When stdin closes (the
watch, or the ssh, is gone) it ends whatever of the run is left on this node and exits: nothing of a run outlives
the run's supervisor on any node.

NODE_DIR is the run's folder on this node (the run's environment file names it to the ranks as TRAINDECK_NODE_DIR;
the run directory is on the launching machine). The agent sends back this node's ranks' step timing: each rank
writes <NODE_DIR>/steps/rank<R>.jsonl, and the agent passes its complete lines on as `steps` events (every second,
and a rank's last lines as soon as the rank has ended, before its end is told); the watch appends them to the run
directory's steps/. And their stacks: each rank's site hook arms faulthandler on SIGUSR2 writing
<NODE_DIR>/stacks/<pid>.txt; the command `stacks ID` signals the ranks that catch SIGUSR2, waits for their dumps to
settle (at most STACKS_TIMEOUT_S) and sends each rank's appended text (at most STACKS_MAX bytes) as a `stacks` event.
The same command asks each rank for torch's flight recorder dump: the site hook has each rank wait on a FIFO,
<NODE_DIR>/collectives/<pid>.fifo, and answer a line written there with collectives/rank<R>.pkl (R its global rank)
and collectives/<pid>.answer; the agent sends each dump's bytes, base64, as a `collectives` event (rank, pid, dump,
error), or why there is none: not armed, no process group yet, no answer within STACKS_TIMEOUT_S, or a dump larger
than LEDGER_MAX (then no bytes at all: a pickle cut short is no dump). The agent never unpickles a dump: the
launching machine reads it, refusing any class it names. Then `stacks_done`. When the watch closes, the step files
it was sent whole, the ended ranks' dumps, FIFOs and answers, and the folder are removed: nothing of the run stays
on the node.

The run's processes on this node are found by the marker the run's environment file carries (TRAINDECK_RUN_ID),
the rank by RANK, and this node's launch.py by its `--node_rank=N`. Standard library and psutil only; Python 3.6 syntax (no annotations).
"""

import base64
import json
import os
import signal
import socket
import stat
import sys
import threading
import time

try:
    import psutil
except ImportError:  # still reports liveness and ends; resources are then unknown
    psutil = None

FULL_SCAN_S = 1.0
LIVENESS_S = 0.05
MARKER = "TRAINDECK_RUN_ID"
STALE_S = 7 * 24 * 3600  # another run's folder on this node unchanged this long is removed (prune_stale)
STEPS_CHUNK = 256 * 1024  # the most of one rank's step lines sent in one event
STACK_SIGNAL = signal.SIGUSR2  # what the ranks' site hook arms faulthandler on
STACKS_TIMEOUT_S = 5.0  # the longest wait for the ranks' dumps
STACKS_SETTLE_S = 0.3  # a dump is written in many small writes: done when the file stops growing this long
STACKS_MAX = 512 * 1024  # the most of one rank's dump sent back
LEDGER_MAX = 4 << 20  # the most of one rank's flight recorder dump sent back (2000 entries take far less)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _catches(pid, signum=STACK_SIGNAL):
    """Whether the process has a handler for `signum` (SigCgt in /proc/PID/status); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


class Agent:
    def __init__(self, run_id, node_rank, ranks, out, node_dir=None):
        self.run_id, self.node_rank, self.ranks, self.out = run_id, node_rank, set(ranks), out
        self.node_dir = os.path.expanduser(node_dir) if node_dir else None
        self.steps_dir = os.path.join(self.node_dir, "steps") if self.node_dir else None
        self.stacks_dir = os.path.join(self.node_dir, "stacks") if self.node_dir else None
        self.ledger_dir = os.path.join(self.node_dir, "collectives") if self.node_dir else None
        self.rank_pids = set()  # every pid seen as one of this node's ranks (the clean-up removes their files)
        self.steps_sent = {}  # rank -> bytes of its step file sent
        self.steps_lock = threading.Lock()
        self.relayed_all = False  # every step line was sent when the watch asked what is left (its end)
        self.ranks_seen = {}  # pid -> rank
        self.others = set()  # this node's launch.py and anything else of the run that is not a rank
        self.ended = set()
        self.lock = threading.Lock()
        self.procs = {}
        self.stopping = False
        self.gone = threading.Event()  # the channel back is gone: the watch is over, as when stdin closes

    def emit(self, data):
        if self.gone.is_set():
            return
        data["t"] = time.time()
        with self.lock:
            try:
                self.out.write(json.dumps(data) + "\n")
                self.out.flush()
            except (OSError, ValueError):
                # Seen before stdin's end, often: the loop then ends the run's processes here as for a closed
                # stdin (an exit here left a rank the agent had not yet reported running on).
                self.gone.set()

    def scan(self):
        own = os.getpid()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == own or pid in self.ranks_seen or pid in self.others or pid in self.ended:
                continue
            env = _environ(pid)
            if not env or env.get(MARKER) != self.run_id:
                continue
            rank = env.get("RANK")
            if rank is not None and rank.isdigit() and int(rank) in self.ranks:
                # One live process per rank: a child with the rank's environment (a compiler) is not the rank.
                if int(rank) not in self.ranks_seen.values():
                    self.ranks_seen[pid] = int(rank)
                    self.rank_pids.add(pid)
                    self.emit({"event": "rank_started", "rank": int(rank), "pid": pid})
            elif rank is None and f"--node_rank={self.node_rank}".encode() in _cmdline(pid):
                self.others.add(pid)

    def alive(self, pid):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except (OSError, IndexError):
            return False

    def check_ends(self):
        for pid, rank in list(self.ranks_seen.items()):
            if not self.alive(pid):
                del self.ranks_seen[pid]
                self.ended.add(pid)
                self.send_steps([rank])  # its last lines (written at its exit) before its end is told
                self.emit({"event": "rank_ended", "rank": rank, "pid": pid})
        for pid in list(self.others):
            if not self.alive(pid):
                self.others.discard(pid)
                self.ended.add(pid)

    def sample(self):
        ranks = []  # type: list[dict]
        data = {"event": "sample", "host": socket.gethostname(), "ranks": ranks, "others": sorted(self.others)}
        for pid, rank in sorted(self.ranks_seen.items(), key=lambda item: item[1]):
            entry = {"rank": rank, "pid": pid}
            if psutil is not None:
                try:
                    proc = self.procs.get(pid) or psutil.Process(pid)
                    self.procs[pid] = proc
                    entry["rss"] = proc.memory_info().rss
                    entry["cpu"] = proc.cpu_percent(None)
                except psutil.Error:
                    pass
            ranks.append(entry)
        if psutil is not None:
            memory = psutil.virtual_memory()
            data["cpu"] = psutil.cpu_percent(None)
            data["ram_used"] = memory.total - memory.available
            data["ram_total"] = memory.total
        data["gpus"] = _gpus()
        self.emit(data)

    def send_steps(self, ranks=None):
        """The complete step lines written since the last call by `ranks` (default: all of this node's), as
        `steps` events; whether every file has been sent to its end."""
        if not self.steps_dir:
            return True
        whole = True
        with self.steps_lock:
            for rank in sorted(self.ranks if ranks is None else ranks):
                path = os.path.join(self.steps_dir, f"rank{rank}.jsonl")
                sent = self.steps_sent.get(rank, 0)
                while True:
                    try:
                        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
                    except OSError:
                        break
                    try:
                        size = os.fstat(fd).st_size
                        data = os.pread(fd, min(STEPS_CHUNK, size - sent), sent) if size > sent else b""
                    except OSError:
                        data = b""
                    finally:
                        os.close(fd)
                    end = data.rfind(b"\n")
                    if end < 0:
                        if len(data) >= STEPS_CHUNK:  # one line longer than any the hook writes: skipped
                            sent += len(data)
                            self.steps_sent[rank] = sent
                            continue
                        whole = whole and not data
                        break
                    lines = data[:end].decode("utf-8", "replace").split("\n")
                    self.emit({"event": "steps", "rank": rank, "lines": lines})
                    if self.gone.is_set():
                        return False
                    sent += end + 1
                    self.steps_sent[rank] = sent
        return whole

    def remove_steps(self):
        """At the end, after the watch was sent every line (its `left`): the step files, each only if nothing was
        written to it since, and their folder once empty: nothing of the run stays on the node."""
        if not self.steps_dir or not self.relayed_all:
            return
        for rank in self.ranks:
            path = os.path.join(self.steps_dir, f"rank{rank}.jsonl")
            try:
                if os.lstat(path).st_size == self.steps_sent.get(rank, 0):
                    os.unlink(path)
            except OSError:
                pass
        try:
            os.rmdir(self.steps_dir)
        except OSError:
            pass  # another node's ranks (a shared home) still write there

    def take_stacks(self, request_id):
        """Every rank of this node that armed stack dumps is signalled and its dump sent back (`stacks` events, one
        a rank, with its pid, text or error), then `stacks_done`. Never stops a process: one that does not catch
        SIGUSR2 (it would be killed by it) is left alone and said so. Their flight recorder dumps are asked for
        first and sent as `collectives` events before `stacks_done` (send_ledgers)."""
        ranks = sorted(list(self.ranks_seen.items()), key=lambda item: item[1])
        deadline = time.monotonic() + STACKS_TIMEOUT_S
        ledgers = self.ask_ledgers(ranks)  # answered on a thread of each rank's own while its stack is dumped
        waiting = {}  # pid -> (rank, path, size before)
        for pid, rank in ranks:
            error = ""
            path = os.path.join(self.stacks_dir or "", f"{pid}.txt")
            caught = _catches(pid)
            if caught is None:
                error = "the process is gone"
            elif not caught or not self.stacks_dir or not os.path.isfile(path):
                error = ("its Python did not arm stack dumps (started without traindeck's sitecustomize, or the "
                         "script took SIGUSR2 for itself)")
            else:
                try:
                    size = os.stat(path).st_size
                    os.kill(pid, STACK_SIGNAL)
                    waiting[pid] = (rank, path, size)
                except ProcessLookupError:
                    error = "the process is gone"
                except OSError as exc:
                    error = f"could not signal it: {exc.strerror or exc}"
            if error:
                self.emit({"event": "stacks", "id": request_id, "rank": rank, "pid": pid, "text": "",
                           "error": error})
        for pid, text in sorted(_collect_dumps(waiting).items()):
            rank = waiting[pid][0]
            error = "" if text.strip() else (f"no dump within {STACKS_TIMEOUT_S:g} s (the process may be stopped "
                                             "or in uninterruptible I/O)")
            self.emit({"event": "stacks", "id": request_id, "rank": rank, "pid": pid, "text": text, "error": error})
        self.send_ledgers(request_id, ledgers, deadline)
        self.emit({"event": "stacks_done", "id": request_id, "host": socket.gethostname()})

    def ask_ledgers(self, ranks):
        """Write a request into each rank's flight recorder FIFO (ranks: (pid, rank)); pid -> (rank, why it was not
        asked, or "" when it was). Its old answer is removed first, so an answer present later is new."""
        asked = {}
        for pid, rank in ranks:
            why = ""
            fifo = os.path.join(self.ledger_dir or "", f"{pid}.fifo")
            try:
                if not self.ledger_dir:
                    raise FileNotFoundError(fifo)
                _unlink(os.path.join(self.ledger_dir, f"{pid}.answer"))
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | _NOFOLLOW)  # ENXIO: nobody reads it
            except FileNotFoundError:
                asked[pid] = (rank, "the flight recorder dump is not armed in this rank")
                continue
            except OSError:
                asked[pid] = (rank, "the rank does not answer flight recorder requests")
                continue
            try:
                if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                    why = "its flight recorder request file is not a FIFO"
                else:
                    os.write(fd, b"dump\n")
            except OSError:
                why = "the rank does not answer flight recorder requests"
            finally:
                os.close(fd)
            asked[pid] = (rank, why)
        return asked

    def send_ledgers(self, request_id, asked, deadline):
        """Wait (until `deadline`) for the asked ranks' answers, then send each dump (`collectives` events)."""
        folder = self.ledger_dir or ""
        pending = [pid for pid, (_rank, why) in asked.items() if not why]
        while pending and time.monotonic() < deadline:
            pending = [pid for pid in pending if not os.path.exists(os.path.join(folder, f"{pid}.answer"))]
            if pending:
                time.sleep(0.05)
        for pid, (rank, why) in sorted(asked.items(), key=lambda item: item[1][0]):
            data = b""
            if not why:
                rank, data, why = _read_ledger(folder, pid, rank)
            self.emit({"event": "collectives", "id": request_id, "rank": rank, "pid": pid,
                       "dump": base64.b64encode(data).decode("ascii"), "size": len(data), "error": why})

    def prune_stale(self, now=None):
        """The folders other runs left on this node (their watch cut off before their end) once nothing in them
        has changed for STALE_S: a rank that has written nothing for a week is gone. Run ids only; no link is
        followed (shutil.rmtree removes a link, never what it points to)."""
        if not self.node_dir:
            return
        import re
        import shutil

        now = time.time() if now is None else now
        parent = os.path.dirname(self.node_dir.rstrip("/"))
        try:
            names = os.listdir(parent)
        except OSError:
            return
        for name in names:
            if name == self.run_id or not re.match(r"^\d{8}-\d{6}-[0-9a-f]{4}$", name):
                continue
            folder = os.path.join(parent, name)
            try:
                newest = os.lstat(folder).st_mtime
                for root, _dirs, files in os.walk(folder):
                    for file in files[:1000]:
                        newest = max(newest, os.lstat(os.path.join(root, file)).st_mtime)
            except OSError:
                continue
            if now - newest >= STALE_S:
                shutil.rmtree(folder, ignore_errors=True)

    def remove_stacks(self):
        """At the end: the dumps of processes no longer alive, the stacks folder once empty, then the run's folder
        on this node once empty (its steps/ went first)."""
        if not self.stacks_dir or not self.node_dir:
            return
        try:
            names = os.listdir(self.stacks_dir)
        except OSError:
            names = []
        for name in names:
            stem = name[:-4] if name.endswith(".txt") else ""
            if stem.isdigit() and not self.alive(int(stem)):
                try:
                    os.unlink(os.path.join(self.stacks_dir, name))
                except OSError:
                    pass
        for folder in (self.stacks_dir, self.node_dir):
            try:
                os.rmdir(folder)
            except OSError:
                pass  # another node's ranks (a shared home) still use it

    def remove_ledgers(self):
        """At the end: what this node's ranks left in collectives/ (their dumps, torch's own timeout dumps, the
        FIFOs and answers of their pids), then the folder once empty. Only this node's: with a shared home,
        another node's ranks use the same folder."""
        if not self.ledger_dir:
            return
        import re

        own = r"^(?:rank(\d+)\.pkl(?:\.\d+)?|torch_dump_rank(\d+)|(\d+)\.(?:fifo|answer|answer\.tmp))$"
        try:
            names = os.listdir(self.ledger_dir)
        except OSError:
            return
        for name in names:
            match = re.match(own, name)
            if not match:
                continue
            rank = match.group(1) or match.group(2)
            if (rank and int(rank) in self.ranks) or (match.group(3) and int(match.group(3)) in self.rank_pids
                                                      and not self.alive(int(match.group(3)))):
                _unlink(os.path.join(self.ledger_dir, name))
        try:
            os.rmdir(self.ledger_dir)
        except OSError:
            pass  # another node's ranks (a shared home) still use it

    def send(self, signum):
        count = 0
        for pid in list(self.ranks_seen) + list(self.others):
            try:
                os.kill(pid, signum)
                count += 1
            except OSError:
                pass
        self.emit({"event": "signalled", "signal": signum, "count": count})

    def leftovers(self):
        self.check_ends()
        return sorted(list(self.ranks_seen) + list(self.others))

    def end_all(self):
        """What of the run is still on this node: SIGTERM, 3 s, SIGKILL."""
        self.scan()
        if not self.leftovers():
            return
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.leftovers():
                try:
                    os.kill(pid, signum)
                except OSError:
                    pass
            deadline = time.time() + 3.0
            while self.leftovers() and time.time() < deadline:
                time.sleep(0.05)


def _collect_dumps(waiting, timeout_s=STACKS_TIMEOUT_S, settle_s=STACKS_SETTLE_S):
    """pid -> the text each signalled process appended to its dump file (waiting: pid -> (rank, path, size before)),
    once every file has stopped growing for settle_s, or at timeout_s."""
    deadline = time.monotonic() + timeout_s
    sizes = {pid: size for pid, (_rank, _path, size) in waiting.items()}
    changed = {pid: 0.0 for pid in waiting}
    while waiting and time.monotonic() < deadline:
        now = time.monotonic()
        for pid, (_rank, path, _start) in waiting.items():
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            if size != sizes[pid]:
                sizes[pid], changed[pid] = size, now
        if all(changed[pid] and now - changed[pid] >= settle_s for pid in waiting):
            break
        time.sleep(0.05)
    texts = {}
    for pid, (_rank, path, start) in waiting.items():
        try:
            with open(path, "rb") as f:
                f.seek(start)
                texts[pid] = f.read(STACKS_MAX).decode("utf-8", "replace")
        except OSError:
            texts[pid] = ""
    return texts


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_ledger(folder, pid, rank):
    """(rank, dump bytes, why none) from a rank's answer in `folder`: its global rank and the dump it wrote. The
    bytes are read, never unpickled; a dump larger than LEDGER_MAX is not sent (a pickle cut short is no dump)."""
    try:
        with open(os.path.join(folder, f"{pid}.answer"), "rb") as f:
            answer = f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return rank, b"", (f"no flight recorder dump within {STACKS_TIMEOUT_S:g} s (its Python may hold the GIL, "
                           "or it is stopped)")
    if not answer:
        return rank, b"", "no process group yet"
    if not answer.isdigit():
        return rank, b"", "its flight recorder answer is not a rank"
    rank = int(answer)
    try:
        fd = os.open(os.path.join(folder, f"rank{rank}.pkl"), os.O_RDONLY | _NOFOLLOW)
    except OSError as exc:
        return rank, b"", f"its flight recorder dump cannot be read ({exc.strerror or exc})"
    try:
        size = os.fstat(fd).st_size
        if size > LEDGER_MAX:
            return rank, b"", (f"its flight recorder dump is {size / (1 << 20):.1f} MB, more than the "
                               f"{LEDGER_MAX >> 20} MB a node sends back (a smaller TORCH_FR_BUFFER_SIZE keeps fewer "
                               "collectives)")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        return rank, b"", f"its flight recorder dump cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)
    if len(data) > LEDGER_MAX:
        return rank, b"", f"its flight recorder dump grew past {LEDGER_MAX >> 20} MB while it was read"
    return rank, data, "" if data else "its flight recorder dump is empty"


def _gpus():
    """Per GPU: index, memory used/total, utilisation; None when NVML cannot be read on this node."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            out.append({"index": i, "used": mem.used, "total": mem.total, "util": util.gpu})
        return out
    except Exception:
        return None


def _commands(agent, done):
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "signal" and hasattr(signal, words[1]):
            agent.stopping = True
            agent.send(getattr(signal, words[1]))
        elif len(words) == 2 and words[0] == "stacks":
            worker = threading.Thread(target=agent.take_stacks, args=(words[1],))  # dumps take up to seconds
            worker.daemon = True
            worker.start()
        elif words == ["left"]:
            agent.scan()
            agent.relayed_all = agent.send_steps()  # every line written, before the answer the watch's end waits for
            agent.emit({"event": "left", "pids": agent.leftovers()})
    done.set()


def main(argv):
    run_id, node_rank, ranks = argv[0], int(argv[1]), [int(r) for r in argv[2].split(",") if r]
    out = os.fdopen(os.dup(1), "w")
    agent = Agent(run_id, node_rank, ranks, out, node_dir=argv[3] if len(argv) > 3 else None)
    done = agent.gone  # stdin's end and a broken channel back end the watch alike
    reader = threading.Thread(target=_commands, args=(agent, done))
    reader.daemon = True
    reader.start()
    agent.emit({"event": "hello", "host": socket.gethostname(), "pid": os.getpid(), "psutil": psutil is not None})
    agent.prune_stale()
    last_scan = 0.0
    while not done.is_set():
        now = time.time()
        agent.check_ends()
        if now - last_scan >= FULL_SCAN_S:
            agent.scan()
            agent.sample()
            agent.send_steps()
            last_scan = now
        done.wait(LIVENESS_S)
    agent.end_all()
    agent.remove_steps()
    agent.remove_ledgers()
    agent.remove_stacks()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
