"""The controller process: os-ken with the scenario's apps, and the wait for its routes and for every
app of the scenario's own (controllers.api)."""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from testbed.errors import RunFailed
from testbed.paths import PROJECT_ROOT
from testbed.run.procs import ManagedProcess, WaitFailed, tcp_listening, wait_until

LISTEN_HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LISTEN_HOST, 0))
        return s.getsockname()[1]


class Controller(ManagedProcess):
    def __init__(self, *, apps: list[str], params: dict, fabric_json: Path, scenario_json: Path, events_path: Path,
                 log_path: Path, app_files: list[str] = ()):
        self.port = free_port()
        self.events_path = events_path
        self._events_read = 0
        self._events: list[dict] = []
        argv = [sys.executable, "-m", "controllers.launcher", "--port", str(self.port),
                "--fabric", str(fabric_json), "--scenario", str(scenario_json), "--events", str(events_path)]
        for app in apps:
            argv += ["--app", app]
        self.app_files = list(app_files)
        for path in self.app_files:
            argv += ["--app-file", path]
        for k, v in params.items():
            argv += ["--param", f"{k}={v}"]
        super().__init__("controller", argv, log_path, cwd=str(PROJECT_ROOT))

    def events(self) -> list[dict]:
        """Every event so far (read incrementally)."""
        try:
            with open(self.events_path) as f:
                f.seek(self._events_read)
                chunk = f.read()
        except FileNotFoundError:
            return self._events
        complete = chunk[:chunk.rfind("\n") + 1]
        self._events_read += len(complete.encode())
        self._events.extend(json.loads(line) for line in complete.splitlines() if line)
        return self._events

    def find_event(self, name: str) -> dict | None:
        return next((e for e in self.events() if e["event"] == name), None)

    def wait_listening(self, timeout_s: float) -> None:
        try:
            wait_until(lambda: tcp_listening(LISTEN_HOST, self.port), timeout_s,
                       f"the controller to listen on {LISTEN_HOST}:{self.port}", alive=self.alive)
        except WaitFailed as e:
            raise RunFailed(f"{e}; controller log:\n{self.log_tail()}") from None

    def wait_routes_ready(self, timeout_s: float) -> dict:
        def ready():
            errors = [e for e in self.events() if e["event"] == "openflow_error"]
            if errors:
                raise RunFailed(f"the switches rejected flow entries: {errors[:3]}")
            crashed = [e for e in self.events() if e["event"] == "app_error"]
            if crashed:
                raise RunFailed(f"the controller app failed in {crashed[0]['handler']}:\n{crashed[0]['traceback']}")
            return self.find_event("routes_ready") if not self.waiting_for_apps() else None
        try:
            return wait_until(ready, timeout_s, "every switch to connect and confirm its routes"
                              + (", and every app of the scenario's own to call testbed.ready"
                                 if self.app_files else ""), alive=self.alive)
        except RunFailed as e:
            ready_sw = sum(1 for ev in self.events() if ev["event"] == "switch_ready")
            waiting = self.waiting_for_apps()
            raise RunFailed(f"{e} ({ready_sw} switches ready" + (f"; no app_ready from {', '.join(waiting)}: an app "
                            f"says it is ready with testbed.ready(self), docs/controller-apps.md" if waiting else "")
                            + f"); controller log:\n{self.log_tail()}") from None

    def waiting_for_apps(self) -> list[str]:
        """The apps of the scenario's own that have not said they are ready (all of them until the
        launcher has named them). A file with no os-ken app in it fails the run."""
        if not self.app_files:
            return []
        loaded = self.find_event("plugin_apps")
        if loaded is None:
            return list(self.app_files)
        for path in self.app_files:
            if not any(a["file"] == path for a in loaded["apps"]):
                raise RunFailed(f"{path} holds no os-ken app (a subclass of os_ken.base.app_manager.OSKenApp)")
        ready = {e["app"] for e in self.events() if e["event"] == "app_ready"}
        return [a["app"] for a in loaded["apps"] if a["app"] not in ready]
