"""ECN thresholds per port from the port's own bandwidth-delay product: a controller app of your
own, the testbed's tutorial (docs/controller-apps.md).

DCQCN deployments set the marking threshold from the bandwidth-delay product: a queue longer than
what one round trip keeps in flight is queueing, not pipelining. A fabric whose ports run at
different rates (100 Gb/s to the hosts, 400 Gb/s between switches) then wants a threshold per port.
This app computes, for every switch port, Kmin = LAMBDA x rate x base RTT and Kmax = 4 x Kmin, and
asks the testbed's QoS app to set them for the RoCE class before any traffic starts. It also
watches the switch agent's telemetry and logs the deepest RoCE queue it saw, to show how an app
subscribes to what the fabric reports.
"""
from __future__ import annotations

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls
from os_ken.lib import hub

from controllers.api import EventAgentReport, EventSetQueuePolicy, logged_errors

CLASS = "roce"     # the [[classes]] entry whose thresholds this app owns
LAMBDA = 1.0       # Kmin in round trips' worth of the port's rate
KMAX_OVER_KMIN = 4
FLOOR_BYTES = 2 * 4154   # never below two frames


class EcnTuner(app_manager.OSKenApp):
    def __init__(self, *args, testbed, **kwargs):
        super().__init__(*args, **kwargs)
        self.testbed = testbed
        self.event_log = testbed.events       # logged_errors writes a handler's exception here
        fabric, sc = testbed.fabric, testbed.scenario
        # the round trip over the fabric's longest shortest path, host to host, in hardware time:
        # the run's fabric and scenario are the emulated ones (rates / D), and scenario.dilation
        # keeps the hardware's latencies and D; bytes are never dilated
        switches_on_path = max(len(p) for p in _switch_paths(fabric))
        one_way_ns = (switches_on_path + 1) * sc.dilation.link_delay_ns + switches_on_path * sc.dilation.switch_latency_ns
        self.base_rtt_s = 2 * one_way_ns * 1e-9
        self.thresholds = {}   # (switch, port) -> (kmin, kmax)
        for sw, ports in fabric.ports.items():
            for port, (_peer, _peer_port, link) in ports.items():
                rate_bps = link.bw_mbps * 1e6 * sc.dilation.factor   # the hardware's rate
                kmin = max(FLOOR_BYTES, round(LAMBDA * rate_bps / 8 * self.base_rtt_s))
                self.thresholds[(sw, port)] = (kmin, KMAX_OVER_KMIN * kmin)
        self.switches = {s.dpid for s in fabric.switches}
        self.seen: set[int] = set()
        self.deepest = 0

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    @logged_errors
    def switch_features(self, ev):
        # every switch is up once each has said hello; then set the thresholds (a request blocks
        # its caller until the QoS app answers, so do it off os-ken's event loop)
        self.seen.add(ev.msg.datapath.id)
        if self.seen == self.switches:
            hub.spawn(self.set_thresholds)

    def set_thresholds(self):
        try:
            for (sw, port), (kmin, kmax) in sorted(self.thresholds.items()):
                # Kmax first: the QoS app refuses a Kmin above the port's Kmax at any step
                for field, value in (("ecn_kmax_bytes", kmax), ("ecn_kmin_bytes", kmin)):
                    reply = self.send_request(EventSetQueuePolicy(CLASS, field, value, switch=sw, port=port))
                    if not reply.ok:
                        raise RuntimeError(f"{sw} port {port}: {field} = {value} refused: {reply.why}")
            self.event_log.write("ecn_tuner_set", ports=len(self.thresholds), base_rtt_us=self.base_rtt_s * 1e6,
                                 kmin_bytes=sorted({k for k, _ in self.thresholds.values()}))
            self.testbed.ready(self)      # the run's traffic waits for this
        except Exception as e:
            self.event_log.write("app_error", handler="EcnTuner.set_thresholds", error=repr(e), traceback=repr(e))

    @set_ev_cls(EventAgentReport)
    def agent_report(self, ev):
        if ev.kind != "telemetry":
            return
        for port, cls, depth in ev.body["deepest"]:
            if depth > self.deepest:
                self.deepest = depth
                self.event_log.write("ecn_tuner_deepest", port=port, cls=cls, depth_bytes=depth)


def _switch_paths(fabric):
    """Every shortest switch-to-switch path of the fabric, as its list of switches."""
    import networkx as nx
    return [p for _src, paths in nx.all_pairs_shortest_path(fabric.switch_graph()) for p in paths.values()]
