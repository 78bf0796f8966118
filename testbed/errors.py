"""Errors users can act on. InputError means bad input: exit code 2, nothing started."""


class InputError(Exception):
    """Bad user input, reported as '<where>: <field>: <what was expected>'."""
    exit_code = 2

    def __init__(self, where: str, field: str | None, message: str):
        self.where, self.field, self.message = where, field, message
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class RunFailed(Exception):
    """The emulation ran but could not produce a trustworthy result."""
    exit_code = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like KeyboardInterrupt so that every context manager unwinds. A subclass
    of it, not just a BaseException: asyncio (pyroute2 runs an event loop inside each netlink
    call) logs and swallows any other BaseException raised in a callback, which left a run
    hanging on a netlink reply that was never read (seen: one SIGTERM in twenty)."""
    exit_code = 143


def raise_terminated(_signum, _frame):
    raise Terminated("terminated by SIGTERM")


class Busy(Exception):
    """Another run holds the machine."""
    exit_code = 3
