"""The northbound API's process during a run (testbed/northbound/server.py): started once the
switch agent has its policy, with the port program's maps inherited and a token of its own, and
stopped with the traffic phase."""
from __future__ import annotations

import json
import os
import secrets
import socket
import sys

from testbed.errors import RunFailed, SetupError
from testbed.northbound.link import LINK_VERSION, check_version
from testbed.northbound.server import LISTEN_HOST, TOKEN_ENV
from testbed.paths import PROJECT_ROOT
from testbed.run.procs import ManagedProcess, WaitFailed, tcp_listening, wait_until

READY_TIMEOUT_S = 30.0


def port_for(sc) -> int:
    """The API's port for this run, 0 for none (run.api_port 0, or a calibration rung); a port
    already taken is refused before anything starts."""
    port = sc.run.api_port
    if not port or sc.dilation.chosen_by == "calibration":
        return 0
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LISTEN_HOST, port))
        except OSError as e:
            raise SetupError(f"run.api_port: {LISTEN_HOST}:{port} is taken ({e.strerror}): another run's API, or "
                             f"another program; set run.api_port to a free port, or 0 for no API") from None
    return port


class ApiProcess(ManagedProcess):
    """The API's process, and the runner's end of a socket pair to it: what only the runner may do
    (a link down or up: the runner owns the links, as its fault schedule does) the API asks here."""

    def __init__(self, rf, port: int, controller_socket: str, map_fds: dict, record):
        self.token = secrets.token_urlsafe(18)
        self.port = port
        self.runner_end, api_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.runner_end.setblocking(False)
        self._api_end = api_end
        super().__init__("northbound api", [sys.executable, "-m", "testbed.northbound.server", str(rf.root),
                                            "--port", str(port), "--controller-socket", controller_socket,
                                            "--runner-fd", str(api_end.fileno())],
                         rf.raw / "northbound.log", env={**os.environ, TOKEN_ENV: self.token},
                         cwd=str(PROJECT_ROOT),
                         pass_fds=tuple(int(fd) for fd in map_fds.values()) + (api_end.fileno(),))
        self.on_start = record.add_process

    def serve(self, faults) -> None:
        """Carry out what the API asked of the runner since the last call (never blocks)."""
        while True:
            try:
                msg = self.runner_end.recv(65536)
            except BlockingIOError:
                return
            if not msg:
                return
            req = json.loads(msg)
            try:
                check_version(req, "the northbound API")
                record = faults.request(req.get("action"), req.get("link"))
                answer = {"id": req.get("id"), "ok": True, "fault": record}
            except ValueError as e:
                answer = {"id": req.get("id"), "ok": False, "why": str(e)}
            self.runner_end.send(json.dumps({"link_version": LINK_VERSION, **answer}).encode())

    def stop(self, timeout_s: float | None = None) -> int | None:
        rc = super().stop(timeout_s)
        self.runner_end.close()
        self._api_end.close()
        return rc

    def start(self) -> "ApiProcess":
        super().start()
        self._api_end.close()   # the API's now; the runner keeps its own end
        try:
            wait_until(lambda: tcp_listening(LISTEN_HOST, self.port), READY_TIMEOUT_S,
                       f"the northbound API to listen on {LISTEN_HOST}:{self.port}", alive=self.alive)
        except WaitFailed as e:
            self.stop()
            raise RunFailed(f"{e}; its log:\n{self.log_tail()}") from None
        return self
