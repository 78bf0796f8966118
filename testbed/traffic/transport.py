"""The RoCE transport's parameters, as the compiled data plane (testbed/traffic/nic/nicdp.c) runs it.

Go-back-N and DCQCN themselves live there, once, and the unit tests drive that code through
testbed.traffic.nic. What stays here is pure configuration:

- go-back-N per queue pair: the sender numbers packets with PSNs (24 bits on the wire), keeps
  every unacknowledged packet, goes back to a NAKed PSN, and to the oldest unacknowledged one
  after a retransmission timeout; the receiver accepts only the expected PSN, ACKs every
  ``ack_every`` packets and at each message's end, NAKs the first packet past a gap once;
- DCQCN's reaction point, as HPCC's rdma-hw.cc runs it, with its parameters time-dilated to the
  emulated link (dcqcn_params).
"""
from __future__ import annotations

# Rate-machine events, as recorded per queue pair (testbed.records.QP_EVENT kinds).
RATE_CUT, RATE_FAST_RECOVERY, RATE_ADDITIVE, RATE_HYPER = 6, 7, 8, 9


def dcqcn_params(spec: dict, link_bps: float) -> dict:
    """A [dcqcn] table, given for spec["ref_gbps"], as the engine runs it on a link of link_bps:
    every time multiplied and every rate divided by the dilation factor."""
    scale = spec["time_scale"] or spec["ref_gbps"] * 1e9 / link_bps

    def ns(us):
        return int(round(us * 1e3 * scale))

    def bps(mbps):
        return mbps * 1e6 / scale

    return {"time_scale": scale, "line_bps": link_bps,
            "cnp_interval_ns": ns(spec["cnp_interval_us"]),
            "alpha_interval_ns": max(1, ns(spec["alpha_interval_us"])),
            "rate_decrease_interval_ns": ns(spec["rate_decrease_interval_us"]),
            "rate_increase_timer_ns": max(1, ns(spec["rate_increase_timer_us"])),
            "byte_counter_bytes": spec["byte_counter_bytes"], "g": spec["g"],
            "fast_recovery_rounds": spec["fast_recovery_rounds"],
            "rai_bps": bps(spec["rai_mbps"]), "rhai_bps": bps(spec["rhai_mbps"]),
            "min_rate_bps": min(link_bps, bps(spec["min_rate_mbps"])),
            "rate_on_first_cnp": spec["rate_on_first_cnp"], "clamp_target_rate": spec["clamp_target_rate"]}
