"""ECN tuning in the loop (controller.ecn_tuning = "adaptive"; docs/ecn-tuning.md).

Reads the switch agent's telemetry summaries (ten a second of wall-clock time, each with every
marking queue's deltas since the last: testbed.fabric.agent.Agent.ecn_report), adds them up over
a window of controller.ecn_tuning_window_us of hardware time, judges each marking class's profile
on them and moves it (testbed.fabric.ecn_tuning: the evidence, the one-knob scale, the
hysteresis, the trial of each move). A move is one EventSetQueuePolicy of the class's Kmin, Kmax
and Pmax together, so the QoS app checks, applies and logs it as it does every other app's
change, and the switch agent gets it in one update.

Logged to the controller's event log: ``ecn_tuning_start`` (the target, the bounds, the window in
hardware and wall-clock time), ``ecn_tuning_window`` (each class's evidence and what the tuner made
of it) and ``ecn_tuning_change`` (from, to, why); a refused move, ``ecn_tuning_refused``, ends the
tuning of that class.
"""
from __future__ import annotations

import traceback

from os_ken.base import app_manager
from os_ken.controller.handler import set_ev_cls
from os_ken.lib import hub

from controllers.api import EventAgentReport, EventSetQueuePolicy
from testbed.fabric.ecn_tuning import REVERTED, ClassTuner, Profile, Target, Window, judge


class EcnTuning(app_manager.OSKenApp):
    def __init__(self, *args, testbed, **kwargs):
        super().__init__(*args, **kwargs)
        self.event_log = testbed.events
        sc, fabric = testbed.scenario, testbed.fabric
        self.target = Target.of(sc.controller)
        self.factor = sc.dilation.factor
        # a window of hardware time, in the wall-clock time the agent's reports count
        self.window_ns = int(sc.controller.ecn_tuning_window_us * 1e3 * self.factor)
        # every switch port's emulated rate (the run's fabric is the emulated one)
        self.rate_bps = {fabric.intf_name(sw, port): link.bw_mbps * 1e6
                         for sw, ports in fabric.ports.items() for port, (_p, _pp, link) in ports.items()}
        self.tuners = {i: (c.name, ClassTuner(Profile(c.ecn_kmin_bytes, max(c.ecn_kmax_bytes, c.ecn_kmin_bytes),
                                                      c.ecn_pmax), self.target))
                       for i, c in enumerate(sc.classes) if c.ecn and sc.qos.ecn}
        self.windows = {i: Window() for i in self.tuners}
        self.pending: set[int] = set()   # classes with a move on its way to the QoS app
        self.last_t_ns: int | None = None
        self.started = False
        self.event_log.write("ecn_tuning_start", target=self.target.__dict__ | {"kmin_bytes": list(
            self.target.kmin_bytes), "kmax_bytes": list(self.target.kmax_bytes), "pmax": list(self.target.pmax)},
            window_us=sc.controller.ecn_tuning_window_us, window_wall_s=self.window_ns / 1e9,
            dilation_factor=self.factor,
            classes={name: t.start.to_json() for name, t in self.tuners.values()})

    @set_ev_cls(EventAgentReport)
    def agent_report(self, ev):
        try:
            self._report(ev)
        except Exception as e:  # the runner fails the run on an app_error
            self.event_log.write("app_error", handler="EcnTuning.agent_report", error=repr(e),
                                 traceback=traceback.format_exc())

    def _report(self, ev) -> None:
        if ev.kind == "traffic_started":
            self.started = True
            return
        if ev.kind != "telemetry":
            return
        t_ns = ev.body["t_ns"]
        interval = 0 if self.last_t_ns is None else t_ns - self.last_t_ns
        self.last_t_ns = t_ns
        if not self.started:
            return   # what came before the traffic is no evidence (and its interval no window)
        rows = ev.body.get("ecn_queues", [])
        for cls, w in self.windows.items():
            w.add(rows, cls, interval)
        if next(iter(self.windows.values())).wall_ns < self.window_ns:
            return
        for cls, (name, tuner) in self.tuners.items():
            w, self.windows[cls] = self.windows[cls], Window()
            if cls in self.pending:
                continue
            before = tuner.profile
            evidence = judge(w, before.kmin_bytes, self.rate_bps, self.target)
            outcome, new = tuner.decide(evidence)
            self.event_log.write("ecn_tuning_window", t_ns=t_ns, class_name=name, wall_s=w.wall_ns / 1e9,
                                 outcome=outcome, profile=before.to_json(), step=tuner.step, **evidence.to_json())
            if new is not None:
                self.pending.add(cls)
                # a move taken back says so; any other is the window's call
                direction = outcome if outcome == REVERTED else evidence.call
                hub.spawn(self._move, cls, name, before, new, evidence, tuner.a, direction)

    def _move(self, cls: int, name: str, before: Profile, new: Profile, evidence, a: float, direction: str) -> None:
        # off the app's event loop: a request waits for the QoS app's answer
        try:
            reply = self.send_request(EventSetQueuePolicy(name, fields=new.fields()))
            if reply.ok:
                self.event_log.write("ecn_tuning_change", class_name=name, before=before.to_json(),
                                     after=new.to_json(), direction=direction, aggressiveness=a,
                                     p99_bytes=evidence.p99_bytes, utilisation=evidence.utilisation,
                                     worst_port=evidence.worst_port, queues=reply.queues)
                self.pending.discard(cls)
            else:
                self.event_log.write("ecn_tuning_refused", class_name=name, after=new.to_json(), why=reply.why)
        except Exception as e:
            self.event_log.write("app_error", handler="EcnTuning._move", error=repr(e),
                                 traceback=traceback.format_exc())
