"""The tenant-isolation check of a run with [[jobs]] of two or more tenants: before the traffic,
frames from a host of every tenant to a host of every other tenant, and to another host of its
own, each counted where it should or should not arrive. Written to raw/isolation.json, judged in
the summary (isolation.cross_tenant_delivered must be 0, same_tenant_delivered must not be).

The probes are UDP datagrams (port PROBE_PORT, not RoCE's, so the host NIC's program lets them
through) in the tenant's own class, built with Scapy, sent and counted on packet sockets opened in
the hosts' namespaces; nothing is sent through the hosts' IP stacks.
"""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from testbed.fabric.netns import netns_of
from testbed.fabric.tenants import mechanism
from testbed.run.procs import WaitFailed, wait_until

PROBE_PORT = 9797
MARK = b"tenant-isolation-probe"
PROBES_PER_PAIR = 8
ETH_P_ALL = 0x0003
SOL_PACKET, PACKET_IGNORE_OUTGOING = 263, 23
ISOLATION_VERSION = 1


def probe_pairs(sc) -> list[tuple[str, str]]:
    """(src, dst) host pairs: the first host of each tenant to the first host of every other, and
    to its own tenant's next host (the control: what must arrive)."""
    first = {}
    for j in sc.jobs:
        first.setdefault(j.tenant, []).extend(j.hosts)
    pairs = [(a[0], b[0]) for ta, a in first.items() for tb, b in first.items() if ta != tb]
    pairs += [(hosts[0], hosts[1]) for hosts in first.values() if len(hosts) > 1]
    return pairs


def _frame(fabric, sc, src: str, dst: str, seq: int) -> bytes:
    s, d = fabric.host_by_name[src], fabric.host_by_name[dst]
    dscp = sc.job_of(src).workload.dscp
    pkt = (Ether(src=s.mac, dst=d.mac) / IP(src=s.ip, dst=d.ip, tos=dscp << 2) /
           UDP(sport=PROBE_PORT, dport=PROBE_PORT) / (MARK + f" {src}>{dst} {seq}".encode()))
    return bytes(pkt)


def check_isolation(sc, fabric, host_pids: dict[str, int], out: Path, log) -> dict:
    pairs = probe_pairs(sc)
    tenant = {h: j.tenant for j in sc.jobs for h in j.hosts}
    dsts = sorted({d for _, d in pairs})
    rx, tx = {}, {}
    try:
        for h in dsts:
            with netns_of(host_pids[h]):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                # arrivals only: the host's own frames out (its ICMP answer quotes the probe) are not
                s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
                s.bind((fabric.host_by_name[h].intf, ETH_P_ALL))
                s.setblocking(False)
                rx[h] = s
        for src in sorted({s for s, _ in pairs}):
            with netns_of(host_pids[src]):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                s.bind((fabric.host_by_name[src].intf, 0))
                tx[src] = s
        for src, dst in pairs:
            for seq in range(PROBES_PER_PAIR):
                tx[src].send(_frame(fabric, sc, src, dst, seq))
        got = {(s, d): 0 for s, d in pairs}
        same = [(s, d) for s, d in pairs if tenant[s] == tenant[d]]

        def drain() -> bool:
            for h, sock in rx.items():
                while True:
                    try:
                        data = sock.recv(65535)
                    except BlockingIOError:
                        break
                    at = data.find(MARK)
                    # a probe itself: IPv4, UDP to the probe port (an ICMP error quoting one is not)
                    if at >= 0 and data[12:14] == b"\x08\x00" and data[23] == 17 and \
                            data[36:38] == PROBE_PORT.to_bytes(2, "big"):
                        src, dst = data[at + len(MARK):].split()[0].decode().split(">")
                        if dst == h and (src, dst) in got:
                            got[(src, dst)] += 1
            return all(got[p] >= PROBES_PER_PAIR for p in same)
        # every same-tenant probe in (or 2 s), then as long again for anything cross-tenant on its way
        t0 = time.monotonic()
        try:
            wait_until(drain, 2.0, "the same-tenant isolation probes")
        except WaitFailed:   # counted below: a control that did not arrive makes the check void
            pass
        deadline = time.monotonic() + max(0.2, time.monotonic() - t0)
        while time.monotonic() < deadline:
            drain()
            time.sleep(0.01)
    finally:
        for sock in (*rx.values(), *tx.values()):
            sock.close()
    rows = [{"src": s, "dst": d, "src_tenant": tenant[s], "dst_tenant": tenant[d], "sent": PROBES_PER_PAIR,
             "received": got[(s, d)]} for s, d in pairs]
    cross = [r for r in rows if r["src_tenant"] != r["dst_tenant"]]
    own = [r for r in rows if r["src_tenant"] == r["dst_tenant"]]
    result = {"isolation_version": ISOLATION_VERSION, "mechanism": mechanism(sc), "pairs": rows,
              "cross_tenant_sent": sum(r["sent"] for r in cross),
              "cross_tenant_delivered": sum(r["received"] for r in cross),
              "same_tenant_sent": sum(r["sent"] for r in own),
              "same_tenant_delivered": sum(r["received"] for r in own)}
    out.write_text(json.dumps(result, indent=1))
    log(f"tenant isolation ({result['mechanism']}): {result['cross_tenant_delivered']} of "
        f"{result['cross_tenant_sent']} cross-tenant probes delivered, {result['same_tenant_delivered']} of "
        f"{result['same_tenant_sent']} within tenants")
    return result
