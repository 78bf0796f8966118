"""Errors users can act on. InputError means bad input: exit code 2, nothing started."""
from __future__ import annotations

import difflib
import signal
import sys


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


def raise_pending() -> None:
    """Raise the interrupt that was signalled if nothing is unwinding from it: called between the
    steps of a wait, outside any exception handling (cleanup runs inside it, and must finish)."""
    if _pending is not None and sys.exc_info()[1] is None:
        raise _pending


class Busy(Exception):
    """Another run holds the machine."""
    exit_code = 3
