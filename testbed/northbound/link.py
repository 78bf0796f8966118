"""The API process's connection to the controller's northbound app (controllers/northbound.py):
JSON lines over an abstract Unix socket, one request at a time, each answer carrying its id. Every
message, and those over the runner's socket pair (testbed.run.northbound), carries LINK_VERSION; a
message of another version is refused by name."""
from __future__ import annotations

import asyncio
import itertools
import json
import time


LINK_VERSION = 1


def check_version(msg: dict, who: str) -> dict:
    if msg.get("link_version") != LINK_VERSION:
        raise ValueError(f"{who}: a northbound message of link_version {msg.get('link_version')!r}; this end reads "
                         f"{LINK_VERSION}")
    return msg


class ControllerUnavailable(RuntimeError):
    pass


class ControllerLink:
    def __init__(self, socket_name: str, timeout_s: float = 10.0):
        self.socket_name, self.timeout_s = socket_name, timeout_s
        self._reader = self._writer = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    async def connect(self, wait_s: float = 30.0) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._reader, self._writer = await asyncio.open_unix_connection("\0" + self.socket_name)
                return
            except (ConnectionRefusedError, FileNotFoundError):
                if time.monotonic() > deadline:
                    raise ControllerUnavailable(f"the controller's northbound app is not listening on "
                                                f"@{self.socket_name}") from None
                await asyncio.sleep(0.05)

    async def request(self, op: str, **fields) -> dict:
        if self._writer is None:
            raise ControllerUnavailable("not connected to the controller")
        async with self._lock:
            rid = next(self._ids)
            self._writer.write((json.dumps({"link_version": LINK_VERSION, "id": rid, "op": op, **fields}) + "\n").encode())
            await self._writer.drain()
            try:
                line = await asyncio.wait_for(self._reader.readline(), self.timeout_s)
            except asyncio.TimeoutError:
                self.close()   # its late answer would be read as the next request's
                raise ControllerUnavailable(f"the controller did not answer {op} within {self.timeout_s:g} s") from None
            if not line:
                self._writer = None
                raise ControllerUnavailable("the controller closed the northbound connection")
            answer = check_version(json.loads(line), "the controller's northbound app")
            if answer.get("id") != rid:
                raise ControllerUnavailable(f"answer {answer.get('id')} to request {rid}")
            return answer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
