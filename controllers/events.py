"""The controller's event log: one JSON object per line, with CLOCK_MONOTONIC time
(shared with the runner and the traffic engine), flushed per line so the runner can
wait on it."""
from __future__ import annotations

import json
import threading
import time


class EventLog:
    def __init__(self, path: str):
        self._f = open(path, "a", buffering=1)
        self._lock = threading.Lock()

    def write(self, event: str, **fields) -> None:
        line = json.dumps({"t_ns": time.monotonic_ns(), "event": event, **fields})
        with self._lock:
            self._f.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._f.close()
