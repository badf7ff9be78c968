"""How a rank of a training run ends: the same way on success, failure and stop.

A sibling of ``train_entry.py`` (copied with it into each run dir; standard library only, torch
passed in).

Why this exists. ``dist.destroy_process_group()`` only drops the process group from torch's
registry: on the CPU (gloo) its C++ object, with its worker threads (``pt_gloo_runloop``) and its
transport thread (``gloo_tcp_loop``), lives on as long as anything holds it, and after training
everything does: the DDP/FSDP wrapper, its hooks, the last loss's autograd graph, and on a
failure the traceback's frames holding the Trainer. Measured in a 2-rank FSDP run: the four
threads were all still running after destroy + ``gc.collect()``. Those threads then meet the
interpreter's teardown: the group is destroyed in whatever order finalization frees objects, or
never, while the main thread runs the C++ static destructors; a torch thread that needs the GIL
then is ended by CPython with ``pthread_exit`` inside a ``noexcept`` frame, and the C++ runtime
aborts the process: "terminate called without an active exception", SIGABRT, after the rank
trained and saved. A run record then says failed for a run that finished.

So :func:`finish` runs the rank's work and then, outside every ``except`` block (the exception and
its frames are gone by then), ends the group: a barrier after a success (no rank tears down
connections another still uses), ``destroy_process_group``, a collection so the model and its
hooks release the group and its threads are joined here, on the main thread, with the
interpreter whole. What is left is reported (:func:`collective_threads`), and the process leaves
with ``os._exit`` after the atexit handlers and a flush: nothing of the interpreter's teardown
runs beside a torch thread, whatever a library still holds.
"""

import atexit
import gc
import os
import signal
import sys
import traceback

# Thread names of torch's collective backends (gloo workers and transport, NCCL watchdogs).
COLLECTIVE_MARKS = ("gloo", "nccl")


class Stopped(KeyboardInterrupt):
    """SIGTERM (a stop, or torchrun ending the group): end like any other exit. A
    KeyboardInterrupt, so no library's ``except Exception`` swallows it."""


def on_sigterm():
    """A SIGTERM raises Stopped, so the except/finally path (end line, group end) runs.

    A stop TERMs a rank twice: ``trainwiz stop`` signals every process of the run, and torchrun,
    TERMed too, forwards one to its workers. Only the first is the stop; later ones are ignored,
    so they cannot kill the rank while it writes its record and end line. ``leave`` dies by the
    signal at the end, and the stop's KILL after its grace period still ends a rank that hangs.
    """

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Stopped("stopped by SIGTERM")

    signal.signal(signal.SIGTERM, handler)


def collective_threads():
    """Names of this process's threads that belong to a collective backend."""
    names = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # not Linux: nothing to look at
        return names
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as handle:
                name = handle.read().strip()
        except OSError:
            continue
        if any(mark in name for mark in COLLECTIVE_MARKS):
            names.append(name)
    return sorted(names)


def end_process_group(torch, ok):
    """Destroy the process group and let its threads go; return the collective threads left.

    After a success first a barrier, so no rank tears its connections down while another
    still uses them (a failed rank does not wait for ranks that may never come)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        try:
            if ok:
                dist.barrier()
        except Exception:
            pass
        try:
            dist.destroy_process_group()
        except Exception:
            pass
    gc.collect()  # the model, its hooks and graphs: the last holders of the group
    return collective_threads()


def exit_code(value):
    """The process exit code of ``SystemExit(value)`` (None: 0; a message: printed, 1)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def leave(code, by_signal=None):
    """Run the atexit handlers, flush, and end the process without the interpreter's teardown;
    ``by_signal``: die by that signal instead (a stop ends as torchrun and the watcher expect)."""
    try:
        atexit._run_exitfuncs()  # logging.shutdown, temp files the entry registered
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if by_signal is not None:
            signal.signal(by_signal, signal.SIG_DFL)
            os.kill(os.getpid(), by_signal)
        os._exit(code)


def finish(work, torch, rank=0):
    """Run ``work()`` and end this rank cleanly, whatever it ended with; never returns."""
    by_signal = None
    try:
        work()
        code = 0
    except Stopped:
        code, by_signal = 128 + signal.SIGTERM, signal.SIGTERM
    except KeyboardInterrupt:
        code, by_signal = 128 + signal.SIGINT, signal.SIGINT
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    # Outside the except blocks: the exception, its traceback and their frames are released.
    try:
        left = end_process_group(torch, ok=code == 0)
    except Stopped:  # a stop while the ranks meet at the end: a stop
        left, code, by_signal = collective_threads(), 128 + signal.SIGTERM, signal.SIGTERM
    if left:
        print(
            f"[trainwiz-entry] rank {rank}: {len(left)} collective thread(s) still running after "
            f"the process group ended ({', '.join(left)}): leaving without interpreter teardown",
            file=sys.stderr,
            flush=True,
        )
    leave(code, by_signal)
