"""Stage 2 of a run's analysis: every packet accounted for.

A packet sent and never received was dropped somewhere that counts drops (a switch port's buffer,
a leaf qdisc, Open vSwitch, a socket, a veth, a failed link, a receiver's ICRC check after a corrupt
fault's bit errors), or was still queued when the traffic
ended, or was a resent copy still on its way. What no counter explains is `unaccounted`, and a run
with any is a failed run.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from testbed.analysis.tables import FAULT_WINDOW_NS, RunInputs, Tables, in_flight_before_ns


@dataclass(frozen=True)
class LossAccount:
    sent: int
    received: int
    lost: int                      # sent, never received, and not a resent copy still on its way
    resent_in_flight_at_end: int
    port_buffer_drops: int         # the emulated switch buffers (the BPF port program)
    qdisc_drops: int               # switch ports' leaf qdiscs
    queued_at_end: int
    receiver_socket_drops: int
    dropped_inside_ovs: int
    ovs_rx_socket_drops: int
    veth_drops: int
    lost_inside_emulator: int      # lost data packets the emulator's plumbing explains, not a policy's queue
    lost_on_failed_links: int
    icrc_drops: int                # data frames the receivers dropped for a bad ICRC (a corrupt fault's bit errors)
    corrupted_frames: int          # frames the corrupt faults hit, as the switch ports counted them
    lost_to_bit_errors: int        # lost transmissions a receiver's ICRC drop names, frame by frame
    unaccounted: int
    problems: tuple[str, ...]      # what makes the run a failed one

    def counters(self) -> dict:
        """The summary's packet counters (without the problems)."""
        d = asdict(self)
        del d["problems"]
        return d


def fault_mask(pkts: pd.DataFrame, faults: list[dict]) -> pd.Series:
    """Packets in flight on a link when it goes down vanish with the link's queue, which no counter
    reports: packets sent from before a link or switch failure, by as long as a packet then took to
    arrive (tables.in_flight_before_ns), until its reroute is confirmed are the failure's."""
    in_fault = pd.Series(False, index=pkts.index)
    for f in faults:
        if f["action"] in ("link_down", "switch_down"):
            end = f["t_ns"] + int(((f["reroute_ms"] or FAULT_WINDOW_NS / 1e6) + 100) * 1e6)
            in_fault |= (pkts["tx_ns"] >= f["t_ns"] - in_flight_before_ns(pkts, f["t_ns"])) & (pkts["tx_ns"] <= end)
    return in_fault


def bit_error_losses(pkts: pd.DataFrame, events: pd.DataFrame | None) -> int:
    """Lost transmissions that a receiver's ICRC drop names (qp event icrc_dropped: its queue pair,
    message and sequence): each drop names the latest transmission of that frame sent before it and
    never received, and each transmission is named once."""
    if events is None or events.empty or "event" not in events:
        return 0
    ev = events[events["event"] == "icrc_dropped"]
    if ev.empty:
        return 0
    value = ev["value"].to_numpy(dtype="uint64")
    drops = pd.DataFrame({"flow": ev["flow"].to_numpy(dtype="int64"), "msg": (value >> np.uint64(32)).astype("int64"),
                          "seq": (value & np.uint64(0xFFFFFFFF)).astype("int64"), "at_ns": ev["t_ns"].to_numpy()})
    lost = pkts.loc[pkts["rx_ns"].isna(), ["flow", "msg", "seq", "tx_ns"]].astype(
        {"flow": "int64", "msg": "int64", "seq": "int64"})
    m = drops.merge(lost, on=["flow", "msg", "seq"])
    m = m[m["tx_ns"] <= m["at_ns"]].sort_values("tx_ns", kind="stable")
    named = m.groupby(["flow", "msg", "seq", "at_ns"]).tail(1)
    return int(len(named.drop_duplicates(["flow", "msg", "seq", "tx_ns"])))


def account(inp: RunInputs, t: Tables, faults: list[dict], port_buffer_drops: int,
            qp_events: pd.DataFrame | None = None) -> LossAccount:
    pkts, engine, switches = t.packets, inp.engine, inp.switches
    queues = inp.queues_end
    sent = len(pkts)
    received = int(pkts["rx_ns"].notna().sum())
    # A host NIC's leaf "drops" what the engine offered while it was full (paused): the engine got
    # ENOBUFS and kept the packet, so only switch ports' leaf drops are losses.
    qdisc_drops = int(sum(q["drops"] for q in queues if q["node"] in switches))
    # Packets still in a queue when the traffic ended (a spurious retransmission behind a pause).
    queued_at_end = int(sum(q["qlen"] for q in queues))
    switch_queued = int(sum(q["qlen"] for q in queues if q["node"] in switches))
    # a veth refusing a frame (its peer's receive backlog full: netdev_max_backlog) counts it in
    # the peer's rx_dropped, and some kernels also in the sender's tx_dropped: may over-report
    link_drops = int(sum(d["tx_dropped"] + d["rx_dropped"] for d in inp.links_moved.values()))
    socket_drops = int(sum(h["socket_drops"] for h in engine["hosts"]))
    # a frame a corrupt fault hit is dropped by its receiver's ICRC check, unless a queue behind
    # the fault dropped it first; none arrives corrupt otherwise
    icrc_drops = int(sum(h.get("icrc_errors", 0) for h in engine["hosts"]))
    corrupted = int(sum(inp.corrupted.values()))
    named = bit_error_losses(pkts, qp_events)
    in_fault = fault_mask(pkts, faults)
    lost_to_faults = int((in_fault & pkts["rx_ns"].isna()).sum())
    resent_in_flight = resent_in_flight_at_end(pkts, engine["end_ns"], in_fault)
    ovs_dropped = ovs_internal_drops(inp.links_moved, switches,
                                     qdisc_drops + port_buffer_drops + switch_queued + inp.ovs_socket_drops)
    counted = (qdisc_drops + port_buffer_drops + ovs_dropped + inp.ovs_socket_drops + socket_drops + lost_to_faults
               + queued_at_end + link_drops + icrc_drops)
    lost = sent - received - resent_in_flight
    problems = []
    if engine["reason"] != "complete":
        problems.append(f"traffic did not complete: {engine['reason']} "
                        f"({engine['messages_completed']}/{engine['messages']} messages)")
    if lost and engine["transport"]["reliability"] == "none":
        problems.append(f"{lost} of {sent} packets lost "
                        f"(qdisc drops {qdisc_drops}, receiver socket drops {socket_drops})")
    # Every lost packet must have been dropped somewhere that counts drops (ACK drops count too,
    # so this can only under-report). At a time limit, packets still in flight are not drops.
    unexplained = lost - counted
    if unexplained > 0 and engine["reason"] in ("complete", "stalled"):
        problems.append(f"{unexplained} lost packets are not accounted for: {lost} data packets lost, drops "
                        f"counted {counted} (port buffers {port_buffer_drops}, leaf qdiscs {qdisc_drops}, "
                        f"still queued at the end {queued_at_end}, inside Open vSwitch {ovs_dropped}, "
                        f"Open vSwitch receive sockets {inp.ovs_socket_drops}, receiver sockets {socket_drops}, "
                        f"veth drops {link_drops}, "
                        f"in flight on failed links {lost_to_faults}, bad ICRC at receivers {icrc_drops})")
    if icrc_drops > corrupted:
        problems.append(f"receivers dropped {icrc_drops} frames for a bad ICRC, and the corrupt faults hit "
                        f"{corrupted}: frames arrived damaged that no fault damaged")
    if named < icrc_drops and engine["reason"] in ("complete", "stalled"):
        problems.append(f"receivers dropped {icrc_drops} frames for a bad ICRC, and {named} of them name a lost "
                        f"transmission")
    # data packets the emulator's own plumbing lost, not a switch queue the policy runs: a real
    # fabric would not have lost them (what each place dropped may include ACKs and other frames)
    plumbing = ovs_dropped + inp.ovs_socket_drops + link_drops
    beyond_queues = max(0, lost - qdisc_drops - port_buffer_drops - queued_at_end - lost_to_faults - icrc_drops)
    return LossAccount(
        sent=sent, received=received, lost=lost, resent_in_flight_at_end=resent_in_flight,
        port_buffer_drops=port_buffer_drops, qdisc_drops=qdisc_drops, queued_at_end=queued_at_end,
        receiver_socket_drops=socket_drops, dropped_inside_ovs=ovs_dropped, ovs_rx_socket_drops=inp.ovs_socket_drops,
        veth_drops=link_drops, lost_inside_emulator=min(beyond_queues, plumbing + socket_drops),
        lost_on_failed_links=lost_to_faults, icrc_drops=icrc_drops, corrupted_frames=corrupted, lost_to_bit_errors=named,
        unaccounted=max(0, unexplained), problems=tuple(problems))


def packets_section(acc: LossAccount, inp: RunInputs, t: Tables) -> dict:
    """The summary's packets section: the loss account and what the transport did."""
    pkts, engine = t.packets, inp.engine
    flows = engine["flows"]
    c = acc.counters()
    return {"sent": c["sent"], "received": c["received"], "lost": c["lost"],
            "resent_in_flight_at_end": c["resent_in_flight_at_end"],
            "retransmitted": int(pkts["retransmit"].sum()),
            "discarded_out_of_order": int(sum(f["out_of_order"] for f in flows)),
            "duplicates": int(sum(f["duplicates"] for f in flows)),
            "naks": int(sum(f["naks"] for f in flows)),
            "timeouts": int(sum(f["timeouts"] for f in flows)),
            "acks": int(sum(h["acks_tx"] for h in engine["hosts"])),
            **{k: c[k] for k in ("port_buffer_drops", "qdisc_drops", "queued_at_end", "receiver_socket_drops",
                                 "dropped_inside_ovs", "ovs_rx_socket_drops", "veth_drops", "lost_inside_emulator",
                                 "lost_on_failed_links", "icrc_drops", "corrupted_frames", "lost_to_bit_errors",
                                 "unaccounted")},
            "ovs_drop_counters": inp.manifest.get("ovs_drops_during_traffic", {}),
            "stray": int(sum(h["stray"] for h in engine["hosts"])),
            "ecn_ce_marked": int((pkts["ecn"] == 3).sum()),
            "resent_without_loss": resent_without_loss(pkts, acc.lost, inp.scenario)}


def resent_without_loss(pkts: pd.DataFrame, lost: int, sc: dict) -> bool:
    """Nothing was lost and no link changed, yet go-back-N resent: frames arrived out of order or
    late, which a flow's fixed path through real switches does not do (Open vSwitch's per-port
    threads reorder now and then)."""
    return bool(int(pkts["retransmit"].sum()) and not lost and not sc.get("faults"))


def ovs_internal_drops(moved: dict[str, dict], switches: set[str], accounted: int) -> int:
    """Frames Open vSwitch's ports took in during the traffic but never sent on, less those
    already accounted for on the way (dropped or still held by a switch port's queue, dropped at
    ovs-vswitchd's receive sockets): pipeline drops and sends the kernel refused, which OVS drops
    silently. Any non-RoCE frame it dropped counts too, so this can only over-report."""
    ports = [d for name, d in moved.items() if name.rsplit("-eth", 1)[0] in switches]
    return max(0, sum(d["rx_packets"] - d["tx_packets"] for d in ports) - accounted)


def resent_in_flight_at_end(pkts: pd.DataFrame, end_ns: int, in_fault: pd.Series) -> int:
    """Copies go-back-N resent whose data another copy delivered, never received, and sent less
    than the run's longest one-way latency before the traffic ended: they were still on their way
    when the receivers stopped listening (the engine ends once every message is acknowledged), so
    they are not losses. A CI run of a k=8 fat-tree at 10 Mb/s had 352, every one's data delivered,
    sent 4-609 ms before the end against a 955 ms longest latency. Not those around a fault, which
    are its."""
    received = pkts["rx_ns"].notna()
    if received.all() or not received.any():
        return 0
    longest = int(pkts.loc[received, "latency_ns"].max())
    late = ~received & pkts["retransmit"].astype(bool) & (pkts["tx_ns"] > end_ns - longest) & ~in_fault
    if not late.any():
        return 0
    delivered = pd.MultiIndex.from_frame(pkts.loc[received, ["msg", "seq"]])
    return int(pd.MultiIndex.from_frame(pkts.loc[late, ["msg", "seq"]]).isin(delivered).sum())
