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


class OtherThread:
    """A thread started before the teardown, as the runner's are (pyroute2's, rich's), that signals
    the process when asked: the kernel hands a process's signal to such a thread, and Python still
    runs the handler in the main thread."""

    def __init__(self, sig):
        import queue
        import threading
        self.sig, self.asks, self.done = sig, queue.Queue(), queue.Queue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import threading
        while self.asks.get():
            signal.pthread_kill(threading.get_ident(), self.sig)
            self.done.put(True)

    def signal(self):
        self.asks.put(True)
        self.done.get(timeout=5)

    def stop(self):
        self.asks.put(False)
        self.thread.join(5)


@pytest.mark.parametrize("sig, exc", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_teardown_under_signals_held_finishes_and_the_signal_comes_after(handlers, sig, exc):
    other = OtherThread(sig)
    steps = []
    try:
        with pytest.raises(exc):
            with errors.signals_held():
                for step in ("ports", "bridges", "leftovers"):
                    other.signal()   # in the middle of the teardown, taken by another thread
                    sum(range(1000))
                    steps.append(step)
    finally:
        other.stop()
    assert steps == ["ports", "bridges", "leftovers"]
    # the handlers are back: a signal now interrupts at once
    with pytest.raises(exc):
        os.kill(os.getpid(), sig)
        sum(range(1000))


def test_pthread_sigmask_alone_does_not_hold_a_signal_another_thread_takes(handlers):
    # why signals_held swaps the handler: the mask holds it from the main thread only
    other = OtherThread(signal.SIGINT)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with pytest.raises(KeyboardInterrupt):
            other.signal()
            sum(range(1000))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        other.stop()


def test_signals_held_without_a_signal_changes_nothing(handlers):
    before = signal.getsignal(signal.SIGINT)
    with errors.signals_held():
        pass
    assert signal.getsignal(signal.SIGINT) is before
