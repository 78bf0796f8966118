"""The emulated fabric: a Mininet net of Open vSwitch switches built from a pure Fabric.

A context manager: entering builds, starts and configures the net (switches connect to the
controller at 127.0.0.1); leaving stops it and deletes exactly the bridges and veths it made,
also when interrupted.
"""
from __future__ import annotations

import errno
import os
import signal
import re
import subprocess
import time
from functools import partial
from typing import TYPE_CHECKING

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import OVSSwitch, RemoteController
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.errors import RunFailed, SetupError, signals_held
from testbed.fabric.ovs import existing_bridges, wait_for_inflight_commands
from testbed.fabric.ports import PortConfig, PortManager
from topologies.mn_adapter import to_mininet_topo
from topologies.model import Fabric

if TYPE_CHECKING:   # the run's record of what it made: the runner's, handed in (no import of the run)
    from testbed.run.state import RunRecord

# A little over Open vSwitch's revalidation interval (500 ms): counters that held still that long are credited.
REVALIDATE_S = 0.6


class ListeningController(RemoteController):
    """The controller as Mininet's switches see it. testbed.run.controller has already waited for it to
    listen; Mininet's own check telnets to it and decodes what comes back as UTF-8, which is the
    controller's OpenFlow HELLO with a random xid: a CI run's failed to decode and ended the run.
    The check also opens a connection the controller takes for a switch."""

    def checkListening(self):
        pass


class EmulatedFabric:
    def __init__(self, fabric: Fabric, ports: PortConfig, controller_port: int, datapath: str,
                 record: RunRecord, controller_ip: str = "127.0.0.1"):
        # the testbed's own controller, or the one a scenario's controller.remote names
        self.fabric, self.port_config, self.controller_port = fabric, ports, controller_port
        self.controller_ip = controller_ip
        self.datapath, self.record = datapath, record
        self.net: Mininet | None = None
        self.ports = PortManager(ports)
        self.timings: dict[str, float] = {}
        self._host_pids: list[int] = []
        self.stop_error: str | None = None

    def _root_interfaces(self) -> list[str]:
        return [ifname for node, ifname in self.fabric.interfaces() if node in self.fabric.switch_by_name]

    def _check_names_free(self) -> None:
        """Mininet's OVSSwitch deletes a same-named bridge before adding its own: refuse instead."""
        try:
            present = existing_bridges()
        except RunFailed as e:  # before anything started: the machine is not set up
            raise SetupError(str(e)) from None
        taken = sorted(present & set(self.fabric.switch_by_name))
        if taken:
            raise SetupError(f"Open vSwitch bridges {', '.join(taken[:5])} already exist and were not made by "
                            f"this run; the testbed will not touch them (rename or remove them first)")
        with IPRoute() as ipr:
            clash = [n for n in self._root_interfaces() if ipr.link_lookup(ifname=n)]
        if clash:
            raise SetupError(f"interfaces {', '.join(clash[:5])} already exist; the testbed will not touch them")

    def __enter__(self) -> "EmulatedFabric":
        setLogLevel("error")
        self._check_names_free()
        t0 = time.monotonic()
        # Recorded before creation: a run killed half-way still has them on its list.
        self.record.add_bridges(sorted(self.fabric.switch_by_name))
        self.record.add_interfaces(self._root_interfaces())
        try:
            # OpenFlow 1.5 for select groups that hash the 5-tuple; 1.3 stays available to other apps.
            # batch: one ovs-vsctl transaction creates every bridge (80 separate ones took 10.5 s
            # of a k=8 fat-tree's bring-up, measured)
            switch = partial(OVSSwitch, datapath=self.datapath, protocols="OpenFlow13,OpenFlow15",
                             failMode="secure", batch=True)
            self.net = Mininet(topo=to_mininet_topo(self.fabric), switch=switch, controller=None, link=Link,
                               autoSetMacs=False, autoStaticArp=False, build=False)
            self.net.addController(ListeningController("c0", ip=self.controller_ip, port=self.controller_port))
            self.net.build()
            for node in self.net.hosts + self.net.switches:
                self.record.add_process(node.pid)
                self._host_pids.append((node.pid, node.name))
            self.net.start()
            self.timings["net_start_s"] = time.monotonic() - t0
            t1 = time.monotonic()
            self.ports.attach(self.net, self.fabric)
            self.ports.configure()
            self.timings["ports_configure_s"] = time.monotonic() - t1
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def flow_stats(self) -> dict[str, list[dict]]:
        """Every switch's flow entries with their packet counters: {switch: [{rule, n_packets}]}.
        Open vSwitch credits a rule with its datapath flows' packets only when its revalidators
        next dump them (every ~0.5 s): a CI run read a dateline switch's rule 119 packets short
        right after the traffic. So first two full revalidation cycles (the one under way may have
        begun before the last packets); where Open vSwitch cannot wait on them (more than one
        datapath type in use), the counters are read until they hold still over a cycle."""
        waited = all(subprocess.run(["ovs-appctl", "revalidator/wait"], capture_output=True, timeout=30).returncode == 0
                     for _ in range(2))
        out = self._dump_flows()
        deadline = time.monotonic() + 10
        while not waited and time.monotonic() < deadline:
            time.sleep(REVALIDATE_S)
            again = self._dump_flows()
            waited, out = again == out, again
        return out

    def _dump_flows(self) -> dict[str, list[dict]]:
        out = {}
        for s in self.fabric.switches:
            text = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-flows", s.name],
                                  capture_output=True, text=True, check=True).stdout
            rules = []
            for line in text.splitlines():
                fields = line.strip().split(", ")
                if not line.startswith(" ") or not fields:
                    continue  # the reply header
                stats = dict(f.split("=", 1) for f in fields[:-1] if "=" in f)
                keep = [f for f in fields if not f.startswith(("duration=", "n_packets=", "n_bytes=", "idle_age=",
                                                               "hard_age=", "table=0"))]
                rules.append({"rule": ", ".join(keep), "n_packets": int(stats.get("n_packets", 0))})
            out[s.name] = rules
        return out

    def group_stats(self) -> dict[str, list[dict]]:
        """Every switch's groups and the ports their buckets output to: {switch: [{group_id,
        out_ports}]} (ECMP's select groups hold the routes flow entries only point at)."""
        out = {}
        for s in self.fabric.switches:
            text = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", s.name],
                                  capture_output=True, text=True, check=True).stdout
            out[s.name] = [{"group_id": int(m.group(1)),
                            "out_ports": [int(x) for x in re.findall(r"output:(\d+)", line)]}
                           for line in text.splitlines() if (m := re.match(r"\s+group_id=(\d+),", line))]
        return out

    def ovs_socket_drops(self) -> dict[str, int]:
        """Packets the kernel dropped at ovs-vswitchd's per-port receive sockets (full buffer), by
        port, as `ss` reads them over sock_diag: Open vSwitch itself never sees these."""
        mine = set(self._root_interfaces())
        out = subprocess.run(["ss", "-0", "-m", "-p", "-n", "-H"], capture_output=True, text=True).stdout
        drops = {}
        for line in out.splitlines():
            if "ovs-vswitchd" not in line or "skmem:(" not in line:
                continue
            ifname = next((tok.split(":", 1)[1] for tok in line.split()[:6] if tok.split(":", 1)[-1] in mine), None)
            if ifname:
                mem = line.split("skmem:(", 1)[1].split(")", 1)[0].split(",")
                drops[ifname] = next((int(m[1:]) for m in mem if m.startswith("d") and m[1:].isdigit()), 0)
        return drops

    def host_pid(self, name: str) -> int:
        return self.net.get(name).pid

    def __exit__(self, *exc) -> bool:
        # Teardown must finish even if the user presses Ctrl-C again.
        with signals_held():
            t0 = time.monotonic()
            self.ports.close()
            if self.net is not None:
                try:
                    self._stop_net()
                except Exception as e:
                    # An interrupt inside a node's shell command leaves Mininet unable to stop
                    # (its shells assert they are idle): our own cleanup below does the rest.
                    self.stop_error = repr(e)
                finally:
                    self.net = None
            self._kill_hosts()
            t1 = time.monotonic()
            self._remove_leftovers()
            self.timings["teardown_leftovers_s"] = time.monotonic() - t1
            self.timings["teardown_s"] = time.monotonic() - t0
        return False

    def _stop_net(self) -> None:
        """Mininet's stop() deletes every link end through a node's shell, one command each (8.8 s
        of a k=8 fat-tree's 19.6 s teardown, measured). Instead: every node's shell stopped (a
        host's namespace, with the veths in it and their peers, goes with it), the switch-to-switch
        veths deleted over netlink, then every bridge in one ovsdb transaction, which is quicker
        once its ports are gone."""
        net = self.net
        for node in net.controllers + net.switches + net.hosts:
            node.terminate()
        t0 = time.monotonic()
        self._delete_root_interfaces()
        argv = ["ovs-vsctl", "--timeout=30"]
        for sw in net.switches:
            argv += ["--", "--if-exists", "del-br", sw.name]
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            self.stop_error = f"ovs-vsctl del-br: {out.stderr.strip()}"
        self.timings["teardown_bridges_s"] = time.monotonic() - t0

    def _delete_root_interfaces(self) -> None:
        mine = set(self._root_interfaces())
        with IPRoute() as ipr:
            present = [(l["index"], l.get_attr("IFLA_IFNAME")) for l in ipr.get_links()]
            for index, name in present:
                if name in mine:
                    try:
                        ipr.link("del", index=index)
                    except NetlinkError as e:
                        if e.code != errno.ENODEV:  # its namespace's teardown took the peer just now
                            raise

    def _kill_hosts(self) -> None:
        """Host shells Mininet did not stop (their namespaces go with them)."""
        for pid, name in self._host_pids:
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue  # already gone
            if f"mininet:{name}".encode() in cmdline:  # not a reused PID
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _remove_leftovers(self) -> None:
        """What a half-built net may have left (Mininet only stops what it finished making)."""
        mine = set(self.fabric.switch_by_name)
        wait_for_inflight_commands(mine | set(self._root_interfaces()))
        for br in sorted(existing_bridges() & mine):
            subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br], check=False)
        self._delete_root_interfaces()
