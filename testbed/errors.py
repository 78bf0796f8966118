"""Errors users can act on. InputError means bad input: exit code 2, nothing started."""
from __future__ import annotations

import contextlib
import difflib
import signal
import sys
import threading


class InputError(Exception):
    """Bad user input, reported as '<where>: <field>: <what was expected>'."""
    exit_code = 2

    def __init__(self, where: str, field: str | None, message: str):
        self.where, self.field, self.message = where, field, message
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


def did_you_mean(word: str, options) -> str:
    """'; did you mean X?' for the option closest to a misspelled word, or nothing."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class SetupError(Exception):
    """What was asked cannot start on this machine or tree as it is: not root, Open vSwitch not
    answering, objects of the same name already there, a dirty tree for a baseline, too few runs
    for a spread. Nothing about the scenario or the policy: its own exit code, apart from a
    regression (1) and bad input (2)."""
    exit_code = 5


class RunFailed(Exception):
    """The emulation ran but could not produce a trustworthy result."""
    exit_code = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like KeyboardInterrupt so that every context manager unwinds. A subclass
    of it, not just a BaseException: asyncio (pyroute2 runs an event loop inside each netlink
    call) logs and swallows any other BaseException raised in a callback, which left a run
    hanging on a netlink reply that was never read (seen: one SIGTERM in twenty)."""
    exit_code = 143


_pending: BaseException | None = None


def on_signal(signum, _frame):
    """SIGINT and SIGTERM: raise KeyboardInterrupt or Terminated at once, so that every context
    manager unwinds, and remember it. Python runs the handler wherever the main thread is, and a
    raise inside a finalizer, a weakref callback or a library's catch-all is printed and dropped
    (a CI run's killed run went on to finish); raise_pending raises it again at the next wait."""
    global _pending
    exc = Terminated("terminated by SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()
    _pending = exc
    raise exc


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM held while the block runs, then acted on as they would have been: for a
    cleanup that must finish. Holding them with pthread_sigmask is not enough: it holds them from
    the calling thread only, the kernel hands a process's signal to any thread that does not block
    it (pyroute2's and rich's have none blocked), and Python then runs the handler in the main thread
    all the same (2026-12-05: a SIGINT during a teardown so guarded left six bridges and two veth
    pairs, and the run's record of them was removed). Here the handler itself is swapped. Outside
    the main thread, where no handler runs, it holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    hold = lambda signum, _frame: got.append(signum)  # noqa: E731
    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if got:
            handler = old[got[0]]
            if callable(handler):
                handler(got[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(got[0])


def raise_pending() -> None:
    """Raise the interrupt that was signalled if nothing is unwinding from it: called between the
    steps of a wait, outside any exception handling (cleanup runs inside it, and must finish)."""
    if _pending is not None and sys.exc_info()[1] is None:
        raise _pending


class Busy(Exception):
    """Another run holds the machine."""
    exit_code = 3
