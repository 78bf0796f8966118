"""Port QoS policy: the controller's side of priority queuing, ECN and PFC.

The switches' fast loops (per-packet marking, XOFF/XON within a millisecond) run in the data
path and the switch agent (testbed/fabric/agent.py); this app owns what they do. When the agent
connects (a Unix socket in the abstract namespace, name from --param agent_socket), the app
computes the policy from the scenario's classes and the routes (testbed.fabric.qos.policy: DSCP map,
per-queue buffers, ECN profiles, the PFC rule, XOFF/XON, the pause map) and sends it. It hears of
every reroute from the routing app (controllers.route_events.EventRoutesChanged) and sends the
agent the pause map the new routes make (under the egress rule; the ingress rule's pauses do not
depend on routes, so nothing changes there); it logs every decision
and what the agent reports (policy applied, telemetry summaries at 10 Hz, deadlocks, watchdog
firings) to the controller's event log. The scenario's [[policy_changes]] are its run-time
decisions: at each change's time after traffic starts it recomputes the policy and sends the
queues that changed.

Other apps set the policy through it (controllers.api): an EventSetQueuePolicy request changes one
field of a class on every port, or on one switch port, checked as a scenario file's value is; it
goes with the first policy if the agent has not connected yet, else at once as an update. Every
report of the agent is published to them as an EventAgentReport.

The scenario comes from the launcher (the resolved scenario every app reads); parameters:
agent_socket=<abstract socket name>.
"""
from __future__ import annotations

import json
import socket
import time
import traceback

from os_ken.base import app_manager
from os_ken.controller.handler import set_ev_cls
from os_ken.lib import hub

from controllers.api import EventAgentReport, EventRoutesChanged, EventSetQueuePolicy, EventSetQueuePolicyReply
from testbed.errors import InputError
from testbed.fabric import qos
from testbed.fabric.agent_link import PolicyMessage, PolicyUpdate, TrafficStarted, decode, encode
from testbed.fabric.routing import compute_routes
from testbed.scenario import POLICY_FIELDS, check_class_value, policy_field_refused

ACCEPT_TIMEOUT_S = 600.0


class QosPolicy(app_manager.OSKenApp):
    _EVENTS = [EventAgentReport]   # every report of the switch agent, to the apps that subscribe

    def __init__(self, *args, testbed, **kwargs):
        super().__init__(*args, **kwargs)
        self.event_log = testbed.events
        self.fabric = testbed.fabric
        params = testbed.params
        self.sc = testbed.scenario   # the launcher's, which the routing app reads too
        # the routes at start, as the routing app computes them; its EventRoutesChanged replaces them
        self.table = compute_routes(self.fabric, self.sc.controller.routing)
        self._new_routes = None   # from the app's event thread to the agent link's thread
        self.port_settings: dict[str, dict] = {}   # queue key -> fields an app set on that port alone
        self._changed_by_apps = False   # from the app's event thread to the agent link's thread
        # Listening before the launcher reports the controller up: the agent may connect at once.
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind("\0" + params["agent_socket"])
        self.listener.listen(1)
        self.policy = None
        hub.spawn(self._serve)   # the agent link: os-ken's thread, which logs what kills it

    def _send(self, conn, msg) -> None:
        conn.sendall(encode(msg))

    def _serve(self) -> None:
        try:
            self.listener.settimeout(ACCEPT_TIMEOUT_S)
            conn, _ = self.listener.accept()
            self.policy = self._compute()
            self._sent_pause_map = self.policy.pause_map
            self._send(conn, PolicyMessage(self.policy))
            self.event_log.write("qos_policy_sent", scheduling=self.sc.qos.scheduling,
                                 classes=[c.name for c in self.sc.classes], queues=len(self.policy.queues),
                                 ecn_queues=sum(q.ecn_on for q in self.policy.queues.values()),
                                 pfc_queues=len(self.policy.pause_map))
            self._listen(conn)
        except Exception as e:  # the runner fails the run on an app_error
            self.event_log.write("app_error", handler="qos_policy", error=repr(e), traceback=traceback.format_exc())

    def _listen(self, conn) -> None:
        pending = sorted(self.sc.policy_changes, key=lambda c: c.at_s)
        started_ns = None
        buf = b""
        conn.settimeout(0.01)
        while True:
            try:
                chunk = conn.recv(65536)
                if not chunk:
                    self.event_log.write("qos_agent_disconnected")
                    return
                buf += chunk
            except socket.timeout:
                pass
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = decode(json.loads(line))
                if isinstance(msg, TrafficStarted):
                    started_ns = msg.t_ns
                self.event_log.write(f"qos_{msg.TYPE}", **msg.body())
                self.send_event_to_observers(EventAgentReport(msg.TYPE, msg.body()))
            while pending and started_ns is not None and \
                    time.monotonic_ns() - started_ns >= pending[0].at_s * 1e9:
                self._change(conn, pending.pop(0))
            if self._new_routes is not None:
                routes, self._new_routes = self._new_routes, None
                self._reroute(conn, *routes)
            if self._changed_by_apps:
                self._changed_by_apps = False
                n = self._send_changes(conn, self._compute())
                self.event_log.write("qos_app_changes_sent", queues_changed=n)

    @set_ev_cls(EventRoutesChanged)
    def routes_changed(self, ev):
        # handed to the thread that owns the agent's socket; a newer change replaces an older one
        self._new_routes = (ev.routes, ev.down_links)
        self.event_log.write("qos_routes_heard", down_links=list(ev.down_links))

    def _reroute(self, conn, routes, down_links) -> None:
        self.table = routes
        if self.policy is None:
            return   # the agent has not connected: its first policy will use these routes
        new = self._compute()
        # stamped before the send: the agent may apply it before this thread writes the line
        # (CI, 2026-12-03, at 10-30% steal: the agent's policy_applied came first)
        sent_ns = time.monotonic_ns()
        self._send_changes(conn, new)
        self.event_log.write("qos_routes_changed", t_ns=sent_ns, down_links=list(down_links),
                             pause_map_changed=new.pause_map != self._sent_pause_map,
                             lossless_queues=len(new.pause_map))
        self._sent_pause_map = new.pause_map

    def _send_changes(self, conn, new: qos.PortPolicy) -> int:
        """What differs from the policy the agent has, as one update; how many queues changed."""
        old, self.policy = self.policy, new
        reweighted = (new.weights, new.port_weights) != (old.weights, old.port_weights)
        msg = PolicyUpdate(queues={k: v for k, v in new.queues.items() if old.queues.get(k) != v},
                           pause_map=new.pause_map if new.pause_map != old.pause_map else None,
                           # whole: the agent replaces its ingress thresholds, and sets every leaf's weight
                           ingress=new.ingress if new.ingress != old.ingress else None,
                           weights=new.weights if reweighted else None,
                           port_weights=new.port_weights if reweighted else None)
        if msg.queues or msg.pause_map is not None or msg.ingress is not None or reweighted:
            self._send(conn, msg)
        return len(msg.queues)

    def _change(self, conn, change) -> None:
        self.sc = self.sc.with_class_change(change.class_name, change.field, change.value)
        changed = self._send_changes(conn, self._compute())
        self.event_log.write("qos_policy_changed", class_name=change.class_name, field=change.field,
                             value=change.value, queues_changed=changed)

    def _compute(self, sc=None, port_settings=None) -> qos.PortPolicy:
        """The policy the agent should have: the scenario's classes (with every class-wide change so
        far) over the current routes, and each port's own settings over its class's."""
        return qos.with_port_settings(qos.policy(sc or self.sc, self.fabric, self.table),
                                      self.port_settings if port_settings is None else port_settings)

    @set_ev_cls(EventSetQueuePolicy)
    def set_queue_policy(self, req):
        """Another app's change to the policy: checked in full here (each value as a scenario file's,
        the resulting policy as the agent would take it), answered, and handed to the agent link's
        thread; a refused one changes nothing, and one of several fields is taken or refused whole."""
        where = f"{req.src} EventSetQueuePolicy"
        try:
            names = [c.name for c in self.sc.classes]
            if req.class_name not in names:
                raise InputError(where, "class_name", f"no class {req.class_name!r}; classes: {', '.join(names)}")
            if req.switch is not None and (req.switch not in self.fabric.ports
                                           or req.port not in self.fabric.ports[req.switch]):
                raise InputError(where, "port", f"no port {req.port!r} on switch {req.switch!r}")
            sc, settings = self.sc, dict(self.port_settings)
            values = {}
            for field, raw in req.fields.items():
                if field not in POLICY_FIELDS:
                    raise InputError(where, field, f"expected one of {', '.join(POLICY_FIELDS)}")
                why = policy_field_refused(field, self.sc.qos.scheduling)
                if why:
                    raise InputError(where, field, why)
                values[field] = value = check_class_value(where, field, raw)
                if req.switch is None:
                    sc = sc.with_class_change(req.class_name, field, value)
                else:
                    key = qos.queue_key(self.fabric.intf_name(req.switch, req.port), names.index(req.class_name))
                    settings[key] = {**settings.get(key, {}), field: value}
            reached = sum(len(p) for p in self.fabric.ports.values()) if req.switch is None else 1
            self._compute(sc, settings)   # refuses what the agent could not take
        except (InputError, ValueError) as e:
            self.event_log.write("qos_app_request_refused", app=req.src, class_name=req.class_name,
                                 field=req.field, value=req.value, fields=req.fields, switch=req.switch,
                                 port=req.port, why=str(e))
            self.reply_to_request(req, EventSetQueuePolicyReply(req.src, ok=False, why=str(e)))
            return
        self.sc, self.port_settings = sc, settings
        sent = self.policy is not None
        if sent:
            self._changed_by_apps = True
        self.event_log.write("qos_app_request", app=req.src, class_name=req.class_name, field=req.field,
                             value=values[req.field], fields=values, switch=req.switch, port=req.port,
                             queues=reached, sent_now=sent)
        self.reply_to_request(req, EventSetQueuePolicyReply(req.src, ok=True, queues=reached, sent=sent))
