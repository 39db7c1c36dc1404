"""Step timing inside a rank: where each optimizer step's time and memory go, with no change to the script.

sitecustomize imports this module in each rank of a traindeck run (unless TRAINDECK_STEP_TIMING=0). It imports
nothing heavy itself: an import hook waits for the rank to import torch (and DeepSpeed) and then attaches to
their public entry points:

- DeepSpeed: `DeepSpeedEngine.forward/backward/step` (the step ends when `global_steps` moves, so gradient
  accumulation micro-steps belong to one step), every collective of `deepspeed.comm`, and ZeRO-Infinity's NVMe
  swappers. The engine's own wall_clock_breakdown is left off: turning it on would print into the user's output.
- Any other loop (accelerate, HF Trainer, plain PyTorch): torch's global optimizer step hooks (the step ends after
  `optimizer.step`), `torch.autograd.backward`, the outermost module's forward (found with torch's global module
  hooks during the first step, then timed with hooks on that module alone), and torch.distributed's collectives.
- Both: the wait on an asynchronous collective's handle (`torch.distributed.Work.wait`), where the collective's
  transfer and the wait for the other ranks happen (ZeRO-3's parameter all-gathers are asynchronous).
- FSDP (torch's `fully_shard`, FSDP1, accelerate's FSDP plugin): its all-gathers and reduce-scatters go through
  torch.distributed's public entry points (`all_gather_single`/`reduce_scatter_single` in torch 2.13,
  `all_gather_into_tensor`/`reduce_scatter_tensor` before) and are timed there; the hooks line says when the
  outermost model is FSDP-sharded, and if those entry points were not found.
- On CUDA, FSDP2, FSDP1 and ZeRO-3 run their collectives on streams of their own and make the compute stream wait
  for them before a unit's forward or backward and at the end of backward (`Stream.wait_event`, and `wait_stream`,
  which torch implements with it): within the library functions that hold those waits, a wait of the compute stream
  is communication too (`_STREAM_WAITS`, `_attach_stream_waits`).

Time is charged to the innermost phase running (a collective inside backward is communication, not backward), and
what runs outside every phase is "other" (data loading, the script's own work), so a step's phases add up to its
wall time.

On CUDA a step's time and its phases are read on the device's timeline, without ever waiting for the device: at
each boundary where the host clock is read (a phase's start and end, inner ones included, and the step's end) a
timing event is recorded on the compute stream (the stream current at the step's outermost boundaries, also for
boundaries inside a library's own stream context: `_CudaClock`; events reused from a small pool), and the step's
record is written once the stream has passed its last event (asked with `event.query()` at later step ends and
flushes), so records come out a step or a few late. The interval between two consecutive events is charged to the
phase that was running, so the GPU's work is charged to the phase that queued it and the phases add up exactly to
the step's time on the device, from the previous step's end event to this one: on average the same as the host's
step time (the host and the device cannot drift apart for long). Work of the host alone (CPU Adam, data loading)
shows as the stream's wait between two events, charged to the phase that ran it. Synchronising at the boundaries
instead, as DeepSpeed's own timers do, drains the device's queue, so the host's launch work no longer overlaps
the device's: 17% of a CUDA ZeRO-2 step. At exit, and when the records waiting for the device pass a small bound,
the hook waits for one event (the last, or the oldest; a few seconds at most, then the steps left keep their host
times) and the rest resolves. No event is recorded while the
stream captures a CUDA graph or before CUDA is initialised, and any error of the events (another device, a broken
context) leaves that step on the host clock: the run never breaks. TRAINDECK_STEP_SYNC=1 synchronises the device
at each outermost phase boundary instead and reads the host clock; TRAINDECK_STEP_SYNC=0 reads the host clock
alone (the host's view: the time to queue the work, not to run it). Without CUDA the host clock is the only one.

Each step becomes one JSON line in <run dir>/steps/rank<R>.jsonl (written at most twice a second and at exit),
never on the user's stdout: the supervisor reads those files into the run store. A rank on another machine of a
multi-node run writes into <TRAINDECK_NODE_DIR>/steps there (`~` expanded; the run's folder on that machine), and
the run's agent on that machine sends the lines back into the run directory. The first line says what was
attached and what could not be (an unknown DeepSpeed version): the run goes on either way. Nothing here changes
what the script computes: no tensor is touched and torch's peak-memory counters are read, never reset.

Kept to the standard library and old-Python syntax, like sitecustomize.
"""

import json
import os
import sys
import threading
import time
from typing import Any

PHASES = ("forward", "backward", "communication", "optimizer", "swap", "other")
_FLUSH_S = 0.5
_LATE_MAX = 16  # step records waiting for the device: past this, the hook waits for the oldest
_POOL = 2048  # CUDA events kept for reuse
_MARKS_MAX = 4096  # events in one step (an evaluation loop between two steps): past this, the host clock times it
_WAIT_S = 5.0  # the longest wait for the device (at exit, or far behind): then the steps keep their host times
_THIN_AFTER = 20000  # steps: past this, one step in ten is written (a week-long run stays a few MB per rank)

_clock = time.perf_counter


class _CudaClock:
    """The device's clock on CUDA: a timing event recorded on the compute stream at each boundary, read once the
    stream has passed it. Only `wait` waits (at exit, or when the device falls far behind); nothing synchronises.

    The compute stream is the stream current at the step's outermost boundaries (where the script itself runs: the
    default stream unless it chose another); the marks of inner boundaries go on it too, whatever stream is current
    there. FSDP2 (and ZeRO's overlapping reductions) call the collectives inside their own streams' contexts
    (`with torch.cuda.stream(all_gather_stream)`), and those streams run ahead of and beside the compute stream: a
    mark recorded on them would charge a transfer that overlaps the compute to communication, and the compute it
    overlapped to nothing. On the compute stream, overlapped communication costs the step nothing and what the
    compute stream waits for is charged where it waits (FSDP2's, FSDP1's and ZeRO-3's waits for their collectives'
    streams are communication: `_attach_stream_waits`)."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.ready = False  # CUDA is initialised: asked until it is (asking never initialises it)
        self.capturing = getattr(cuda, "is_current_stream_capturing", None)
        self.free = []
        self.stream = None  # the compute stream, taken at each outermost boundary

    def mark(self, outer=True):
        """A point on the compute stream's timeline, or None where nothing may be recorded. `outer`: a boundary of
        the outermost phase or the step's end, where the current stream is the compute stream."""
        if not self.ready:
            if not self.cuda.is_initialized():
                return None
            self.ready = True
        if self.capturing is not None and self.capturing():  # an event recorded now would become part of the graph
            return None
        if outer or self.stream is None:
            self.stream = self.cuda.current_stream()
        event = self.free.pop() if self.free else self.cuda.Event(enable_timing=True)
        event.record(self.stream)
        return event

    def done(self, mark):
        return mark.query()

    def wait(self, mark, limit_s=_WAIT_S):
        """Whether the stream passed `mark` within `limit_s`: polled, so a device that never gets there (a
        collective whose peer died) cannot hold the process at exit."""
        deadline = time.monotonic() + limit_s
        while not mark.query():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.0002)
        return True

    def resolve(self, marks):
        """The milliseconds from the first mark to each of the others (all of them passed)."""
        first = marks[0]
        return [first.elapsed_time(mark) for mark in marks[1:]]

    def release(self, marks):
        if len(self.free) < _POOL:
            self.free.extend(marks)


class _Timing:
    """The rank's phase clock: a stack of running phases, the time charged to each since the step began."""

    def __init__(self, folder, rank):
        self.folder = folder
        self.rank = rank
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.stack = []
        self.charged = dict.fromkeys(PHASES, 0.0)
        self.mark = _clock()
        self.step_start = self.mark
        self.steps = 0
        self.engine_steps = False  # a DeepSpeed engine ends the steps: torch's optimizer hooks only time
        self.attached = []
        self.missing = []
        self.pending = []
        self.last_flush = self.mark
        self.fd: Any = None
        self.said_hooks = False
        self.sync: Any = None  # torch.cuda.synchronize where TRAINDECK_STEP_SYNC=1 asks for it
        self.cuda: Any = None
        self.device: Any = None  # the device's clock (_CudaClock) on CUDA
        self.marks: Any = None  # this step's device marks [(mark, phase charged for the interval ending there)],
        # the first the step's start; None: this step is on the host clock
        self.late = []  # (record or None where thinned out, its marks or None) in step order, waiting for the device
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.settle_forward = None  # set while the first step finds the outermost modules
        self.active = False  # a phase ran: this process trains (the launcher never does)
        self.statm_fd = None
        self.pinned_at = float("-inf")
        self.pinned = {}
        self.wrapped = set()  # the torch.distributed entry points timed as communication ("Work.wait" too)
        self.stream_waits = set()  # the libraries whose compute-stream waits are timed ("FSDP2", "FSDP1", "ZeRO-3")
        self.in_waits = 0  # inside a library function of `_STREAM_WAITS`: a compute stream's wait there is its own

    # -- the clock --------------------------------------------------------------------------------------------
    def enter(self, phase):
        with self.lock:
            if not self.stack:
                self._synchronize()
            now = _clock()
            running = self.stack[-1] if self.stack else "other"
            if not self.active and phase != "communication":
                # The first step starts with the first phase of training, not at interpreter start-up nor with
                # the set-up's collectives (deepspeed.initialize broadcasts the model): what ran before is dropped.
                self.active = True
                self.step_start = self.mark = now
                self.charged = dict.fromkeys(PHASES, 0.0)
                self.marks = self._start_marks()
            elif self.marks is not None:
                self._device_mark(running, not self.stack)
            self.charged[running] += now - self.mark
            self.stack.append(phase)
            self.mark = now

    def leave(self, phase):
        with self.lock:
            if not self.stack:
                return
            if len(self.stack) == 1:
                self._synchronize()
            now = _clock()
            if self.marks is not None:
                self._device_mark(self.stack[-1], len(self.stack) == 1)
            self.charged[self.stack[-1]] += now - self.mark
            # Unwind to the phase that ends (an exception may have skipped an inner leave).
            while self.stack:
                if self.stack.pop() == phase:
                    break
            self.mark = now

    def step_ended(self, step=None):
        with self.lock:
            now = _clock()
            running = self.stack[-1] if self.stack else "other"
            marks = self.marks
            if marks is not None:
                self._device_mark(running, not self.stack)
                marks = self.marks
            self.charged[running] += now - self.mark
            self.mark = now
            self.steps = step if step is not None else self.steps + 1
            record = {"step": self.steps, "t": round(time.time(), 3),
                      "step_ms": round((now - self.step_start) * 1000.0, 3)}
            for phase in PHASES:
                record[phase + "_ms"] = round(self.charged[phase] * 1000.0, 3)
                self.charged[phase] = 0.0
            self.step_start = now
            kept = self.steps <= _THIN_AFTER or self.steps % 10 == 0
            if kept:
                record.update(self._memory())
            if self.device is not None:
                # This step's end is the next step's start; a step on the host clock starts the device's anew.
                self.marks = [(marks[-1][0], None)] if marks is not None else self._start_marks()
            if marks is not None or self.late:  # written in step order, once the device has passed its end
                self.late.append((record if kept else None, marks))
                self._resolve()
            elif kept:
                self.pending.append(record)
            if now - self.last_flush >= _FLUSH_S or not self.said_hooks:  # the first step goes out at once
                self.flush()
            settle, self.settle_forward = self.settle_forward, None
            if settle is not None:
                try:
                    settle()
                except Exception:  # noqa: BLE001 - the forward stays timed by the global hooks
                    pass
            # The bookkeeping above is part of the next step's wall time (the script waits for it): it is charged
            # to "other" with whatever runs before the next phase, so the phases still add up to the step.

    # -- the device's clock ------------------------------------------------------------------------------------
    def _start_marks(self):
        """A new step's marks, starting now on the device, or None (the step is on the host clock)."""
        if self.device is None:
            return None
        try:
            start = self.device.mark()
        except Exception:  # noqa: BLE001 - the host clock times this step
            return None
        return [(start, None)] if start is not None else None

    def _device_mark(self, running, outer):
        """Marks the device's timeline where the host clock is read; `running` is charged for the interval that
        ends here; `outer`: no phase runs on one side of this boundary. Where no mark can be made, the step goes on
        the host clock."""
        try:
            mark = self.device.mark(outer) if len(self.marks) < _MARKS_MAX else None
        except Exception:  # noqa: BLE001 - the host clock times this step
            mark = None
        if mark is None:
            marks, self.marks = self.marks, None
            try:  # the first mark is the previous step's end, which that step's record still needs
                self.device.release([m for m, _ in marks[1:]])
            except Exception:  # noqa: BLE001
                pass
            return
        self.marks.append((mark, running))

    def _resolve(self, final=False):
        """Writes the records the device has passed, in step order; `final` (at exit): waits for the device."""
        late = self.late
        device = self.device
        if final:
            last = [marks for _record, marks in late if marks is not None]
            try:  # one wait for the last step's end: the steps before it ended before it on the stream
                if last:
                    device.wait(last[-1][-1][0])
            except Exception:  # noqa: BLE001 - what cannot be read keeps its host times
                pass
        while late:
            record, marks = late[0]
            if marks is not None:
                try:
                    passed = device.done(marks[-1][0])
                    if not passed and not final:
                        if len(late) <= _LATE_MAX:
                            return
                        passed = device.wait(marks[-1][0])  # far behind: a wait for the oldest step alone
                    if passed and record is not None:
                        self._device_times(record, marks, device.resolve([m for m, _ in marks]))
                except Exception:  # noqa: BLE001 - an event that cannot be read: the step keeps its host times
                    pass
                try:  # the last mark is the next step's start: released with that step
                    device.release([m for m, _ in marks[:-1]])
                except Exception:  # noqa: BLE001
                    pass
            del late[0]
            if record is not None:
                self.pending.append(record)

    @staticmethod
    def _device_times(record, marks, times):
        """The record's step and phase times from the device: `times` are ms from the step's start to each mark.
        An interval that runs backwards (marks on two streams) counts as nothing, so the phases add up to the step."""
        total = times[-1]
        if len(times) != len(marks) - 1 or not total >= 0.0:
            raise ValueError(f"the step's end is before its start on the device: {total}")
        charged = dict.fromkeys(PHASES, 0.0)
        before = 0.0
        for i in range(1, len(marks)):  # zip(strict=) is too new for the rank's Python
            at = min(max(times[i - 1], before), total)
            phase = marks[i][1]
            charged[phase] += at - before
            before = at
        record["step_ms"] = round(total, 3)
        for phase in PHASES:
            record[phase + "_ms"] = round(charged[phase], 3)

    def _synchronize(self):
        sync = self.sync
        if sync is None:
            return
        try:
            if self.cuda.is_initialized():
                sync()
        except Exception:  # noqa: BLE001 - a device error belongs to the script, which will meet it itself
            pass

    # -- memory -----------------------------------------------------------------------------------------------
    def _memory(self):
        out = {}
        cuda = self.cuda
        if cuda is not None:
            try:
                if cuda.is_initialized():
                    # One read of the allocator's counters: memory_allocated() and its kin each build, flatten and
                    # sort the whole memory_stats() dictionary to return one of its values.
                    stats = cuda.memory_stats_as_nested_dict()
                    allocated, reserved = stats["allocated_bytes"]["all"], stats["reserved_bytes"]["all"]
                    out["gpu_allocated"] = allocated["current"]
                    out["gpu_reserved"] = reserved["current"]
                    out["gpu_peak_allocated"] = allocated["peak"]
                    out["gpu_peak_reserved"] = reserved["peak"]
            except Exception:  # noqa: BLE001
                pass
        try:  # one pread on a descriptor kept open: a few microseconds a step
            if self.statm_fd is None:
                self.statm_fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            out["host_rss"] = int(os.pread(self.statm_fd, 256, 0).split()[1]) * self.page
        except (OSError, ValueError, IndexError):
            pass
        now = _clock()
        if now - self.pinned_at >= 1.0:  # pinned memory changes slowly: /proc/self/status once a second
            self.pinned_at = now
            self.pinned = {}
            try:
                with open("/proc/self/status", "rb") as f:
                    for line in f:
                        if line.startswith(b"VmPin:") or line.startswith(b"VmLck:"):
                            key = "host_pinned" if line.startswith(b"VmPin:") else "host_locked"
                            self.pinned[key] = int(line.split()[1]) * 1024
            except (OSError, ValueError, IndexError):
                pass
        out.update(self.pinned)
        return out

    # -- the side channel -------------------------------------------------------------------------------------
    def _open(self):
        if self.fd is not None:
            return True
        if os.getpid() != self.pid:  # a forked child (a data loader worker) never writes the rank's file
            return False
        try:
            if not os.path.isdir(self.folder):
                os.makedirs(self.folder, mode=0o700, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            self.fd = os.open(os.path.join(self.folder, f"rank{self.rank}.jsonl"), flags, 0o600)
        except OSError:
            self.fd = None
            return False
        return True

    def hooks_line(self):
        clock = "cuda events" if self.device is not None and self.device.ready else \
            "host, synchronised" if self.sync is not None else "host"
        return {"kind": "hooks", "rank": self.rank, "pid": self.pid, "attached": list(self.attached),
                "missing": list(self.missing), "sync": self.sync is not None, "clock": clock}

    def flush(self):
        with self.lock:
            if not self.active:  # the launcher, or a helper Python: nothing to say
                return
            if not self._open():
                self.pending = []
                self.late = []
                return
            if self.late:
                self._resolve()
            lines = []
            if not self.said_hooks:
                lines.append(self.hooks_line())
                self.said_hooks = True
            lines.extend(self.pending)
            self.pending = []
            self.last_flush = _clock()
            if not lines:
                return
            data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
            try:
                os.write(self.fd, data)
            except OSError:  # a full disk: the steps are lost, the run is not
                pass

    def close(self):
        """At exit: the steps still waiting for the device are read (one wait) and everything is written."""
        with self.lock:
            if self.late and self.active and os.getpid() == self.pid:
                self._resolve(final=True)
            self.flush()

    def note(self, attached=None, missing=None):
        with self.lock:
            if attached and attached not in self.attached:
                self.attached.append(attached)
            if missing and missing not in self.missing:
                self.missing.append(missing)
            if self.said_hooks:  # a later attachment (DeepSpeed imported after the first step): say it again
                self.said_hooks = False


_TIMING: Any = None


def _timed(phase, function):
    """`function` run as `phase` of the step."""

    def timed(*args, **kwargs):
        timing = _TIMING
        timing.enter(phase)
        try:
            return function(*args, **kwargs)
        finally:
            timing.leave(phase)

    setattr(timed, "__wrapped__", function)  # noqa: B010 - a function attribute mypy does not know
    for name in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(timed, name, getattr(function, name))
        except (AttributeError, TypeError):
            pass
    setattr(timed, "_traindeck_phase", phase)  # noqa: B010
    return timed


def _wrap_functions(namespace, names, phase):
    done = []
    for name in names:
        function = getattr(namespace, name, None)
        if function is None or getattr(function, "_traindeck_phase", None):
            continue
        setattr(namespace, name, _timed(phase, function))
        done.append(name)
    return done


# ---- torch ---------------------------------------------------------------------------------------------------
# all_gather_single and reduce_scatter_single are what FSDP2 calls (torch >= 2.13; all_gather_into_tensor and
# reduce_scatter_tensor call them there, and are what it calls before).
_TORCH_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_single", "all_gather_into_tensor", "reduce_scatter",
                      "reduce_scatter_single", "reduce_scatter_tensor", "broadcast", "reduce", "barrier", "all_to_all",
                      "all_to_all_single", "gather", "scatter", "all_reduce_coalesced", "all_gather_coalesced",
                      "send", "recv", "isend", "irecv", "batch_isend_irecv", "monitored_barrier",
                      "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")


def _attach_torch(torch):
    timing = _TIMING
    try:
        timing.cuda = torch.cuda
        sync = os.environ.get("TRAINDECK_STEP_SYNC", "")
        if sync == "1":  # the host clock, the device synchronised at each outermost phase boundary
            timing.sync = torch.cuda.synchronize
        elif sync != "0":  # the device's timeline, read with CUDA events (TRAINDECK_STEP_SYNC=0: the host's alone)
            timing.device = _CudaClock(torch.cuda)
    except AttributeError:
        pass
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        def before_step(optimizer, args, kwargs):
            timing.enter("optimizer")

        def after_step(optimizer, args, kwargs):
            timing.leave("optimizer")
            if not timing.engine_steps and not timing.stack:
                timing.step_ended()

        register_optimizer_step_pre_hook(before_step)
        register_optimizer_step_post_hook(after_step)
        timing.note(attached="torch optimizer step")
    except (ImportError, AttributeError):
        timing.note(missing="torch optimizer step hooks (torch < 2.0)")
    try:
        import torch.autograd

        torch.autograd.backward = _timed("backward", torch.autograd.backward)
        timing.note(attached="torch backward")
    except (ImportError, AttributeError):
        timing.note(missing="torch.autograd.backward")
    try:
        _attach_forward(torch)
        timing.note(attached="outermost module forward")
    except (ImportError, AttributeError):
        timing.note(missing="module forward hooks")
    try:
        import torch.distributed as dist

        done = _wrap_functions(dist, _TORCH_COLLECTIVES, "communication")
        if done:
            timing.wrapped.update(done)
            timing.note(attached="torch.distributed collectives")
        # An asynchronous collective (async_op=True: ZeRO-3's parameter all-gathers) returns at once and its
        # transfer and the wait for the other ranks happen in Work.wait: that wait is communication too (a
        # synchronous collective of torch.distributed waits there as well).
        if _wrap_functions(dist.Work, ("wait",), "communication"):
            timing.wrapped.add("Work.wait")
            timing.note(attached="torch.distributed async collective waits")
    except (ImportError, AttributeError, TypeError):
        pass


def _attach_forward(torch):
    """Times the outermost forward. During the first step torch's global module hooks find which modules run
    outermost; after it, hooks on those modules alone do the timing (global hooks cost every module call)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    timing = _TIMING
    depth = [0]
    roots = {}
    handles: list = []

    def outermost_pre(module, args):
        if depth[0] == 0 and not timing.stack:
            roots[id(module)] = module
            timing.enter("forward")
            depth[0] = 1
        elif depth[0]:
            depth[0] += 1

    def outermost_post(module, args, output):
        if depth[0]:
            depth[0] -= 1
            if depth[0] == 0:
                timing.leave("forward")

    def root_pre(module, args):
        if not timing.stack:
            timing.enter("forward")
            module._traindeck_forward_open = True

    def root_post(module, args, output):
        if getattr(module, "_traindeck_forward_open", False):
            module._traindeck_forward_open = False
            timing.leave("forward")

    def settle():
        if not roots:
            return
        for handle in handles:
            handle.remove()
        del handles[:]
        for module in roots.values():
            try:  # first, as the global hook ran: FSDP's own pre-forward (its root all-gather) is inside forward
                module.register_forward_pre_hook(root_pre, prepend=True)
            except TypeError:  # torch < 2.0
                module.register_forward_pre_hook(root_pre)
            module.register_forward_hook(root_post)
        depth[0] = 0
        _note_fsdp(roots.values())

    handles.append(register_module_forward_pre_hook(outermost_pre))
    handles.append(register_module_forward_hook(outermost_post))
    timing.settle_forward = settle


def _note_fsdp(roots):
    """Says in the hooks line when the outermost model is sharded by FSDP (the Step view's advice speaks of FSDP
    then), and whether the entry points its collectives go through were found in this torch."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return
    kinds = []
    for name, label in (("FSDPModule", "FSDP2 (fully_shard)"), ("FullyShardedDataParallel", "FSDP1")):
        cls = getattr(fsdp, name, None)
        if isinstance(cls, type) and any(isinstance(module, cls) for module in roots):
            kinds.append(label)
    if not kinds:
        return
    wrapped = _TIMING.wrapped
    gather = wrapped & {"all_gather_single", "all_gather_into_tensor"}
    scatter = wrapped & {"reduce_scatter_single", "reduce_scatter_tensor"}
    for kind in kinds:
        if gather and scatter and "Work.wait" in wrapped:
            _TIMING.note(attached=f"{kind} model: its all-gathers, reduce-scatters and their waits")
        else:
            _TIMING.note(missing=f"{kind} model: its collectives (torch.distributed's all-gather, reduce-scatter or "
                                 f"Work.wait not found in this torch): they count in forward and backward")
        label = kind.split()[0]
        if label not in _TIMING.stream_waits:
            _TIMING.note(missing=_waits_missing(label))


# ---- the compute stream's waits for a library's collectives, on CUDA --------------------------------------------
# Where each library makes the compute stream wait for the streams its collectives run on: the module, the class
# holding the functions (None: the module's own functions, looked up as globals when torch calls them), the functions
# the waits are in, and what the hooks line calls them. Read from torch 2.13's and DeepSpeed 0.19's code:
# - FSDP2 (`fully_shard`): `FSDPParamGroup.wait_for_unshard` waits on the all-gather's event before a unit's forward
#   or backward, `post_backward` on earlier reduce-scatters' events, `finalize_backward` on the last ones
#   (`self.device_handle.current_stream().wait_event(event)`).
# - FSDP1 (`FullyShardedDataParallel`, torch/distributed/fsdp/_runtime_utils.py): `_pre_forward_unshard` and
#   `_pre_backward_hook` make the current stream wait for the unshard stream's all-gather (`wait_event` on
#   `_unshard_event`, or `wait_stream(state._unshard_stream)`), `_post_backward_final_callback` for the
#   post-backward (reduce-scatter) and all-reduce streams (`current_stream.wait_stream(...)`). `_unshard` and
#   `_wait_for_computation_stream` only make FSDP's own streams wait for the compute stream: a wait that costs the
#   compute stream nothing.
# - ZeRO-3 (deepspeed/runtime/zero/partitioned_param_coordinator.py): `fetch_sub_module` waits on each parameter's
#   all-gather handle inside the all-gather stream's context, then makes the compute stream wait for that stream
#   (`get_accelerator().current_stream().wait_stream(self.__allgather_stream)`; DeepSpeed's CUDA accelerator returns
#   torch.cuda's streams).
# The functions also issue the collectives and FSDP's copies into and out of its flat buffers: those stay as they
# are (the collectives are communication already, the copies are forward and backward).
_STREAM_WAITS = {
    "FSDP2": ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup",
              ("wait_for_unshard", "post_backward", "finalize_backward")),
    "FSDP1": ("torch.distributed.fsdp._runtime_utils", None,
              ("_pre_forward_unshard", "_pre_backward_hook", "_post_backward_final_callback")),
    "ZeRO-3": ("deepspeed.runtime.zero.partitioned_param_coordinator", "PartitionedParameterCoordinator",
               ("fetch_sub_module",)),
}
_STREAM_WAITS_OLD_FSDP2 = "torch.distributed._composable.fsdp._fsdp_param_group"  # FSDP2 in torch 2.4, 2.5


def _waits_missing(label):
    """The hooks line's word when `label`'s waits could not be found."""
    module, holder, names = _STREAM_WAITS[label]
    found = f"{holder or module}'s {', '.join(names)} or torch.cuda.Stream.wait_event not found"
    if label == "ZeRO-3":
        return (f"ZeRO-3: the compute stream's waits for its parameter all-gathers ({found} in this DeepSpeed): on "
                f"CUDA they count in forward and backward")
    return f"{label} model: its CUDA streams' waits ({found} in this torch): on CUDA they count in forward and backward"


def _attach_stream_waits(label, module):
    """Times the compute stream's waits inside `label`'s functions of `_STREAM_WAITS` as communication: those
    waits are the collectives' exposed time, the part the compute could not overlap. A wait of one of the library's
    own streams costs the compute stream nothing and is left alone; so is every wait elsewhere."""
    _module, holder, names = _STREAM_WAITS[label]
    owner = getattr(module, holder, None) if holder else module
    if owner is None or not all(callable(getattr(owner, name, None)) for name in names) or not _time_stream_waits():
        if label == "ZeRO-3":  # FSDP's are said where the model turns out to be FSDP-sharded (`_note_fsdp`)
            _TIMING.note(missing=_waits_missing(label))
        return
    for name in names:
        function = getattr(owner, name)
        if not getattr(function, "_traindeck_phase", None):
            setattr(owner, name, _within_waits(function))
    _TIMING.stream_waits.add(label)


def _time_stream_waits():
    """Wraps torch.cuda.Stream.wait_event (once): inside a function of `_STREAM_WAITS`, a wait of the compute stream
    (the one the device's clock marks) is communication. torch.cuda.Stream.wait_stream is
    `self.wait_event(stream.record_event())`, so its waits are timed here too. Whether the waits are timed."""
    timing = _TIMING
    torch = sys.modules.get("torch")
    stream = getattr(getattr(torch, "cuda", None), "Stream", None)
    if not isinstance(stream, type) or not callable(getattr(stream, "wait_event", None)):
        return False
    wait_event = getattr(stream, "wait_event")  # noqa: B009 - a class mypy knows only as a type
    if getattr(wait_event, "_traindeck_phase", None):
        return True

    def timed_wait_event(self, event):
        device = timing.device
        if not timing.in_waits or device is None or device.stream is None or self != device.stream:
            return wait_event(self, event)
        timing.enter("communication")
        try:
            return wait_event(self, event)
        finally:
            timing.leave("communication")

    setattr(timed_wait_event, "__wrapped__", wait_event)  # noqa: B010
    setattr(timed_wait_event, "_traindeck_phase", "communication")  # noqa: B010
    timed_wait_event.__name__ = "wait_event"
    timed_wait_event.__doc__ = wait_event.__doc__
    setattr(stream, "wait_event", timed_wait_event)  # noqa: B010
    return True


def _within_waits(function):
    """`function` (a library function of `_STREAM_WAITS`) with the compute stream's waits inside it timed as
    communication."""

    def within(*args, **kwargs):
        timing = _TIMING
        timing.in_waits += 1
        try:
            return function(*args, **kwargs)
        finally:
            timing.in_waits -= 1

    setattr(within, "__wrapped__", function)  # noqa: B010
    for name in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(within, name, getattr(function, name))
        except (AttributeError, TypeError):
            pass
    setattr(within, "_traindeck_phase", "communication")  # noqa: B010
    return within


# ---- DeepSpeed -----------------------------------------------------------------------------------------------
_DS_COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "inference_all_reduce", "reduce", "reduce_scatter",
                   "reduce_scatter_fn", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor",
                   "allgather_fn", "all_gather_coalesced", "broadcast", "barrier", "monitored_barrier",
                   "all_to_all", "all_to_all_single", "send", "recv", "gather", "scatter")


def _attach_deepspeed_comm(module):
    done = _wrap_functions(module, _DS_COLLECTIVES, "communication")
    package = sys.modules.get("deepspeed.comm")
    if package is not None and package is not module:
        _wrap_functions(package, _DS_COLLECTIVES, "communication")
    if done:
        _TIMING.note(attached="deepspeed.comm collectives")
    else:
        _TIMING.note(missing="deepspeed.comm collectives (none of the known names)")


def _attach_deepspeed_engine(module):
    timing = _TIMING
    engine = getattr(module, "DeepSpeedEngine", None)
    if engine is None or not all(hasattr(engine, n) for n in ("forward", "backward", "step")):
        timing.note(missing="DeepSpeedEngine forward/backward/step (unknown DeepSpeed version)")
        return
    if getattr(engine.step, "_traindeck_phase", None):
        return
    forward, backward, step = engine.forward, engine.backward, engine.step
    engine.forward = _timed("forward", forward)
    engine.backward = _timed("backward", backward)

    def timed_step(self, *args, **kwargs):
        before = getattr(self, "global_steps", None)
        timing.engine_steps = True
        timing.enter("optimizer")
        try:
            return step(self, *args, **kwargs)
        finally:
            timing.leave("optimizer")
            after = getattr(self, "global_steps", None)
            if after is None or after != before:
                timing.step_ended(after)

    setattr(timed_step, "_traindeck_phase", "optimizer")  # noqa: B010
    setattr(timed_step, "__wrapped__", step)  # noqa: B010
    timed_step.__name__ = "step"
    timed_step.__doc__ = step.__doc__
    engine.step = timed_step
    timing.note(attached="DeepSpeedEngine forward/backward/step")


_SWAP_METHODS = {
    "deepspeed.runtime.swap_tensor.partitioned_param_swapper": (
        "AsyncPartitionedParameterSwapper",
        ("swap_in", "swap_out_and_release", "synchronize_reads", "synchronize_writes", "swap_into_buffer")),
    "deepspeed.runtime.swap_tensor.partitioned_optimizer_swapper": (
        "PartitionedOptimizerSwapper", ("swap_in_optimizer_state", "swap_out_optimizer_state", "swap_out_gradients")),
    "deepspeed.runtime.swap_tensor.pipelined_optimizer_swapper": (
        "PipelinedOptimizerSwapper", ("swap_in_optimizer_state", "swap_out_optimizer_state", "swap_out_gradients")),
}


def _attach_swapper(module):
    class_name, methods = _SWAP_METHODS[module.__name__]
    cls = getattr(module, class_name, None)
    done = _wrap_functions(cls, methods, "swap") if cls is not None else []
    if done:
        _TIMING.note(attached=f"NVMe swap ({class_name})")
    else:
        _TIMING.note(missing=f"NVMe swap timing ({class_name} not found)")


# ---- waiting for imports -------------------------------------------------------------------------------------
_ATTACH = {
    "torch": _attach_torch,
    "deepspeed.comm.comm": _attach_deepspeed_comm,
    "deepspeed.runtime.engine": _attach_deepspeed_engine,
}
for _label, (_name, _holder, _names) in _STREAM_WAITS.items():
    _ATTACH[_name] = (lambda label: lambda module: _attach_stream_waits(label, module))(_label)
_ATTACH[_STREAM_WAITS_OLD_FSDP2] = _ATTACH[_STREAM_WAITS["FSDP2"][0]]
for _name in _SWAP_METHODS:
    _ATTACH[_name] = _attach_swapper


class _AfterImport:
    """A meta path finder that lets the other finders find a watched module, then attaches after it executes."""

    def __init__(self):
        self.busy = set()

    def find_spec(self, name, path=None, target=None):
        if name not in _ATTACH or name in self.busy:
            return None
        self.busy.add(name)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _AttachingLoader(spec.loader, _ATTACH[name])  # type: ignore[assignment]
        return spec


class _AttachingLoader:
    def __init__(self, loader, attach):
        self.loader = loader
        self.attach = attach

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            self.attach(module)
        except Exception as exc:  # noqa: BLE001 - the run goes on untimed; the Step view says why
            _TIMING.note(missing=f"{module.__name__}: {type(exc).__name__}: {exc}")

    def __getattr__(self, name):
        return getattr(self.loader, name)


def arm():
    """Starts timing in this process if it is a rank of a traindeck run (or its only Python process)."""
    global _TIMING
    run_dir = os.environ.get("TRAINDECK_RUN_DIR")
    on_node = os.environ.get("TRAINDECK_NODE_DIR")  # a rank on another machine: the run's folder there
    if not (run_dir or on_node) or os.environ.get("TRAINDECK_STEP_TIMING", "1") == "0" or _TIMING is not None:
        return
    rank = os.environ.get("RANK", "")
    owner = os.environ.get("TRAINDECK_STEPS_PID")
    if rank.isdigit():
        if os.environ.get("TRAINDECK_STEPS_RANK") == rank:
            return  # a Python started by this rank (it inherits RANK)
        os.environ["TRAINDECK_STEPS_RANK"] = rank
    elif owner and owner != str(os.getppid()):
        return  # deeper than a child of the run's first Python
    if not owner:
        os.environ["TRAINDECK_STEPS_PID"] = str(os.getpid())
    folder = os.path.join(os.path.expanduser(on_node) if on_node else run_dir or "", "steps")
    _TIMING = _Timing(folder, rank if rank.isdigit() else "0")
    if "torch" in sys.modules:  # imported before us (a shadowed sitecustomize): attach now
        _attach_torch(sys.modules["torch"])
    sys.meta_path.insert(0, _AfterImport())
    import atexit

    atexit.register(_TIMING.close)
