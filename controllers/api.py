"""The contract between the testbed and a controller app, built in or a user's own
(docs/controller-apps.md): what an app receives, how it says it is ready, how it sets the port
QoS policy, and the events it may subscribe to.

An app is an os-ken app (``os_ken.base.app_manager.OSKenApp``) in a Python file; a scenario names
its own in ``controller.apps``. It is constructed with ``testbed`` (controllers.launcher.AppSettings):
the resolved scenario, the fabric with every switch's port numbers, the run's event log, and
``testbed.ready(app)``. The run starts its traffic only once the routing app has written
``routes_ready`` (RoutesReady below does it) and every app of the scenario's own has called
``testbed.ready(self)``: what an app sets up before then is in place for the first frame.

Requests and events, all os-ken events:
- EventSetQueuePolicy (a request, answered by EventSetQueuePolicyReply): one field of a traffic
  class's queue policy (ECN, Kmin, Kmax, Pmax, PFC, XOFF, XON, headroom, buffer, weight) on every
  port, or on one switch port; the QoS app carries it to the switch agent, at once or with the
  first policy;
- EventAgentReport: what the switch agent reports (kind ``telemetry`` ten times a second of
  wall-clock time, ``watchdog``, ``deadlock``, ``applied``, ``traffic_started``), as
  testbed.fabric.agent_link records them;
- EventRoutesChanged (controllers.route_events): the routing app's new routes after a link fails
  or returns;
- os-ken's own OpenFlow events (EventOFPSwitchFeatures, EventOFPPortStatus, ...).
"""
from __future__ import annotations

import functools
import traceback

from os_ken.controller import event

from controllers.route_events import EventRoutesChanged
from testbed.scenario import POLICY_FIELDS

QOS_APP = "QosPolicy"   # the app that owns the switch agent's link: where requests go

__all__ = ["EventAgentReport", "EventRoutesChanged", "EventSetQueuePolicy", "EventSetQueuePolicyReply",
           "POLICY_FIELDS", "QOS_APP", "RoutesReady", "logged_errors"]


class EventSetQueuePolicy(event.EventRequestBase):
    """Set ``field`` (one of POLICY_FIELDS, as in [[classes]] and [[policy_changes]]) of class
    ``class_name`` to ``value``: on every port (switch None), or only on ``switch``'s OpenFlow
    port ``port``. Values are bytes and fractions as in a scenario file, never dilated. Per port,
    the ECN fields, the PFC thresholds, the buffer and the weight; ``pfc`` itself (which queues are
    lossless, and so the pause map) only for a whole class. A weight only under weighted
    scheduling.

    ``fields`` instead of field and value: several fields of the class at once ({field: value}, in
    order), taken or refused whole and sent to the switch agent in one update, so that no frame
    meets a profile half changed (the ECN tuning moves Kmin, Kmax and Pmax together)."""

    def __init__(self, class_name: str, field: str | None = None, value=None, switch: str | None = None,
                 port: int | None = None, *, fields: dict | None = None):
        super().__init__()
        if (fields is None) == (field is None):
            raise ValueError("EventSetQueuePolicy takes field and value, or fields")
        self.dst = QOS_APP
        self.fields = dict(fields) if fields is not None else {field: value}
        if not self.fields:
            raise ValueError("EventSetQueuePolicy: fields is empty")
        self.field, self.value = next(iter(self.fields.items()))
        self.class_name, self.switch, self.port = class_name, switch, port


class EventSetQueuePolicyReply(event.EventReplyBase):
    """ok, and if not why; queues: how many switch queues the change reached; sent: whether it
    went to the switch agent now (False: it goes with the first policy, when the agent connects)."""

    def __init__(self, dst, ok: bool, why: str = "", queues: int = 0, sent: bool = False):
        super().__init__(dst)
        self.ok, self.why, self.queues, self.sent = ok, why, queues, sent


class EventAgentReport(event.EventBase):
    """A report from the switch agent: kind (telemetry, watchdog, deadlock, applied,
    traffic_started) and its body (testbed.fabric.agent_link's record, as a dict)."""

    def __init__(self, kind: str, body: dict):
        super().__init__()
        self.kind, self.body = kind, body


def logged_errors(handler):
    """An exception in a handler goes to the event log, where the runner sees it and fails the run,
    besides os-ken's own log, where a half-configured switch would otherwise go unnoticed. The app
    needs ``self.event_log`` (its ``testbed.events``)."""
    @functools.wraps(handler)
    def wrapper(self, ev):
        try:
            return handler(self, ev)
        except Exception as e:
            self.event_log.write("app_error", handler=f"{type(self).__name__}.{handler.__name__}", error=repr(e),
                                 traceback=traceback.format_exc())
            raise
    return wrapper


class RoutesReady:
    """For a routing app: a barrier after each switch's rules, and ``routes_ready`` in the event
    log once every switch of the fabric has confirmed its own (what the run waits for before any
    traffic). Call ``sent(dp)`` after installing a switch's rules, and ``reply(ev)`` from the app's
    EventOFPBarrierReply handler; ``reply`` returns False for a barrier that is not one of these."""

    def __init__(self, fabric, events):
        self.switch_by_dpid = {s.dpid: s for s in fabric.switches}
        self.events = events
        self.xid: dict[int, int] = {}
        self.ready: set[int] = set()

    def sent(self, dp) -> None:
        from controllers.flows import barrier
        self.ready.discard(dp.id)
        self.xid[dp.id] = barrier(dp)

    def reply(self, ev) -> bool:
        dp = ev.msg.datapath
        if self.xid.get(dp.id) != ev.msg.xid:
            return False
        if dp.id in self.ready:
            return True
        self.ready.add(dp.id)
        self.events.write("switch_ready", switch=self.switch_by_dpid[dp.id].name)
        if len(self.ready) == len(self.switch_by_dpid):
            self.events.write("routes_ready", switches=len(self.ready))
        return True

    def gone(self, dpid: int) -> None:
        self.ready.discard(dpid)
