"""A SIGTERM or SIGINT that Python delivered where its raise is dropped (inside a finalizer here;
a weakref callback or a library's catch-all elsewhere) still stops the run: the runner's next wait
raises it again (testbed.errors.raise_pending), and a wait inside cleanup, which runs while the
interrupt unwinds, does not."""
import gc
import os
import signal
import sys

import pytest

from testbed import errors
from testbed.errors import Terminated
from testbed.run.procs import WaitFailed, wait_until


@pytest.fixture
def handlers():
    old = {s: signal.signal(s, errors.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in old.items():
        signal.signal(s, h)
    errors._pending = None


class SignalsInItsFinalizer:
    def __init__(self, sig):
        self.sig = sig

    def __del__(self):
        os.kill(os.getpid(), self.sig)   # the handler runs here, and its raise is printed and dropped
        sum(range(1000))


@pytest.mark.parametrize("sig, exc", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_an_interrupt_a_finalizer_dropped_is_raised_at_the_next_wait(handlers, sig, exc, monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    SignalsInItsFinalizer(sig)
    gc.collect()
    assert [d.exc_type for d in dropped] == [exc]   # Python dropped the raise
    with pytest.raises(exc):
        wait_until(lambda: False, 0.5, "nothing")


def test_a_wait_during_cleanup_is_not_interrupted_again(handlers):
    with pytest.raises(Terminated):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))
        finally:   # cleanup waits for what it stops, while the interrupt unwinds
            assert wait_until(lambda: True, 0.5, "a process to exit")


def test_without_a_signal_a_wait_times_out_as_before(handlers):
    with pytest.raises(WaitFailed):
        wait_until(lambda: False, 0.05, "nothing")
