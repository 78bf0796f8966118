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


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that every context manager unwinds."""
    exit_code = 143


def raise_terminated(_signum, _frame):
    raise Terminated("terminated by SIGTERM")


class Busy(Exception):
    """Another run holds the machine."""
    exit_code = 3
