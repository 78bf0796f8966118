"""The scenario's fault schedule ([[faults]]) carried out during the traffic phase: links and
switches taken down and up at the switch-side end of each link, the controller killed, bit errors
put on a link's frames (the port program's corrupt map); each fault logged to raw/faults.jsonl as
it happens."""
from __future__ import annotations

import json
import time
from pathlib import Path


class FaultInjector:
    """`with FaultInjector(...) as faults:` from the traffic's start; apply_due() carries out what
    is due, and leaving closes the log."""

    def __init__(self, sc, fabric, net, ctl, path: Path, log):
        self.pending = sorted(sc.faults, key=lambda f: f.at_s)
        self.fabric, self.net, self.ctl, self.log = fabric, net, ctl, log
        self.controller_killed_ns = 0
        self.path = path
        self._f = None
        self.start_ns = 0

    def __enter__(self) -> "FaultInjector":
        self._f = open(self.path, "a", buffering=1)
        self.start_ns = time.monotonic_ns()
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def due_in_s(self) -> float | None:
        if not self.pending:
            return None
        return self.pending[0].at_s - (time.monotonic_ns() - self.start_ns) / 1e9

    def apply_due(self) -> None:
        while self.pending and self.due_in_s() <= 0:
            fault = self.pending.pop(0)
            t = time.monotonic_ns()
            record = {"t_ns": t, "at_s": (t - self.start_ns) / 1e9, "action": fault.action}
            if fault.action == "corrupt":
                links = self.fabric.links if fault.link == "*" else [self.fabric.link_by_name(fault.link)]
                # bit errors on the frames each switch end sends onto the link: both ways between
                # switches, toward the host on a host's link (a host NIC runs no port program)
                ends = [self.fabric.intf_name(node, port) for link in links
                        for node, port in ((link.a, link.a_port), (link.b, link.b_port))
                        if node in self.fabric.switch_by_name]
                for ifname in ends:
                    self.net.ports.set_corruption(ifname, fault.frame_error_rate)
                record.update(link=fault.link, frame_error_rate=fault.frame_error_rate, ports=ends)
                target = f"{fault.link} ({len(ends)} switch ports) at a frame error rate of {fault.frame_error_rate:g}"
            elif fault.action == "controller_kill":
                self.ctl.proc.kill()
                self.controller_killed_ns = t
                target = f"controller (pid {self.ctl.pid})"
            else:
                target = self._set_links(fault.action, record, link=fault.link, switch=fault.switch)
            self._f.write(json.dumps(record) + "\n")
            self.log(f"fault: {fault.action} {target} at {record['at_s']:.3f} s")

    def _set_links(self, action: str, record: dict, link: str = "", switch: str = "") -> str:
        if action.startswith("link_"):
            links = [self.fabric.link_by_name(link)]
            target = record["link"] = links[0].name
        else:
            links = [l for l in self.fabric.links if switch in (l.a, l.b)]
            target = record["switch"] = switch
        up = action.endswith("_up")
        for l in links:
            # The switch-side end: a host's end lives in its namespace and is not ours to flip.
            node, port = (l.a, l.a_port) if l.a in self.fabric.switch_by_name else (l.b, l.b_port)
            self.net.ports.set_link_state(self.fabric.intf_name(node, port), up=up)
        record["links"] = [l.name for l in links]
        return target

    def request(self, action: str, link: str) -> dict:
        """A link taken down or up now, asked through the northbound API: carried out and logged as
        a scheduled fault is (``by`` "api"), so the analysis counts what it costs the same way."""
        if action not in ("link_down", "link_up"):
            raise ValueError(f"action: expected link_down or link_up, got {action!r}")
        try:
            self.fabric.link_by_name(link)
        except KeyError:
            raise ValueError(f"link: no link {link!r} (links are named <node>-<node>, e.g. s0_0-s1_0)") from None
        t = time.monotonic_ns()
        record = {"t_ns": t, "at_s": (t - self.start_ns) / 1e9, "action": action, "by": "api"}
        target = self._set_links(action, record, link=link)
        self._f.write(json.dumps(record) + "\n")
        self.log(f"fault (northbound API): {action} {target} at {record['at_s']:.3f} s")
        return record
