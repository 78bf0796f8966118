"""Entering a Mininet host's (anonymous) network namespace from this process.

A socket keeps the namespace it was created in, so callers enter, create their sockets
(netlink or AF_PACKET), and leave; the sockets then work from the root namespace.
setns() affects only the calling thread: do this from one thread, before starting others.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

from pyroute2.netns import setns


@contextmanager
def netns_of(pid: int):
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    except FileNotFoundError:
        os.close(own)
        raise RuntimeError(f"process {pid} is gone: its network namespace cannot be entered") from None
    try:
        setns(target)
        try:
            yield
        finally:
            setns(own)
    finally:
        os.close(target)
        os.close(own)
