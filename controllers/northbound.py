"""The controller's end of the northbound API (testbed/northbound, docs/api.md).

The API's web server runs in a process of its own (Starlette on uvicorn, asyncio), so that a
client's requests never hold up the OpenFlow handlers here; this app is its way into the
controller. It listens on an abstract Unix socket (name from --param api_socket) for one
connection and answers JSON lines, one request a line, each with its link_version
(testbed.northbound.link):

- ``{"op": "state"}``: the routes as the routing app last published them, the links they avoid,
  the classes' policy as it stands (the scenario's, with every change so far) and the switch
  agent's latest telemetry summary;
- ``{"op": "set_policy", "class_name", "field", "value", "switch", "port"}``: one field of a
  class's queue policy, as a [[policy_changes]] entry or another app sets it: sent to the QoS app
  as an EventSetQueuePolicy, so it is checked, applied and logged (``qos_app_request``, app
  ``Northbound``) like every other change; the answer says whether it was taken and why not.

Every answer carries the request's ``id``.
"""
from __future__ import annotations

import dataclasses
import json
import socket
import threading
import traceback

from os_ken.base import app_manager
from os_ken.controller.handler import set_ev_cls
from os_ken.lib import hub

from controllers.api import QOS_APP, EventAgentReport, EventRoutesChanged, EventSetQueuePolicy
from testbed.fabric.routing import compute_routes
from testbed.northbound.link import LINK_VERSION, check_version
from testbed.scenario import check_class_value

ACCEPT_TIMEOUT_S = 600.0


class Northbound(app_manager.OSKenApp):
    def __init__(self, *args, testbed, **kwargs):
        super().__init__(*args, **kwargs)
        self.event_log = testbed.events
        self.fabric = testbed.fabric
        self.sc = testbed.scenario
        # with controller.remote the routes are the user's controller's, which this one does not see
        self.routes = None if testbed.params.get("api_routes") == "remote" else \
            compute_routes(self.fabric, self.sc.controller.routing)
        self.down_links: tuple[str, ...] = ()
        self.telemetry: dict | None = None
        self.changes: list[dict] = []   # class-wide changes taken, in order: the policy as it stands
        self._lock = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind("\0" + testbed.params["api_socket"])
        self.listener.listen(1)
        hub.spawn(self._serve)

    @set_ev_cls(EventRoutesChanged)
    def routes_changed(self, ev):
        with self._lock:
            self.routes, self.down_links = ev.routes, tuple(ev.down_links)

    @set_ev_cls(EventAgentReport)
    def agent_report(self, ev):
        if ev.kind == "telemetry":
            self.telemetry = ev.body

    def _serve(self) -> None:
        try:
            self.listener.settimeout(ACCEPT_TIMEOUT_S)
            conn, _ = self.listener.accept()
            self.listener.close()
            conn.settimeout(None)
            buf = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    req = json.loads(line)
                    try:
                        answer = self._answer(check_version(req, "the northbound API"))
                    except ValueError as e:
                        answer = {"ok": False, "why": str(e)}
                    conn.sendall((json.dumps({"link_version": LINK_VERSION, "id": req.get("id"), **answer})
                                  + "\n").encode())
        except socket.timeout:
            return   # no API process connected (it was turned off or failed to start)
        except ConnectionError:
            return   # the API process went first: the traffic phase ended
        except Exception as e:  # the runner fails the run on an app_error
            self.event_log.write("app_error", handler="northbound", error=repr(e), traceback=traceback.format_exc())

    def _answer(self, req: dict) -> dict:
        op = req.get("op")
        if op == "state":
            with self._lock:
                routes, down = self.routes, self.down_links
            return {"ok": True, "routes": None if routes is None else
                    {s: {h: list(p) for h, p in r.items()} for s, r in routes.items()},
                    "down_links": list(down), "classes": [dataclasses.asdict(c) for c in self.sc.classes],
                    "changes": list(self.changes), "telemetry": self.telemetry}
        if op == "set_policy":
            if app_manager.lookup_service_brick(QOS_APP) is None:
                return {"ok": False, "why": "this run's controller has no QoS app (controller.qos_app is none)"}
            fields = {k: req.get(k) for k in ("class_name", "field", "value", "switch", "port")}
            reply = self.send_request(EventSetQueuePolicy(**fields))
            if reply.ok and fields["switch"] is None:
                value = check_class_value("northbound", fields["field"], fields["value"])   # as the QoS app took it
                self.sc = self.sc.with_class_change(fields["class_name"], fields["field"], value)
            if reply.ok:
                self.changes.append(fields)
            return {"ok": reply.ok, "why": reply.why, "queues": reply.queues, "sent": reply.sent}
        return {"ok": False, "why": f"unknown op {op!r}: expected state or set_policy"}
