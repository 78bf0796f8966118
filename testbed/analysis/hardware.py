"""summary.dilation: the run in the hardware fabric's time, and the emulator's own latency.

A run at dilation D emulates the hardware fabric D times slower (testbed.scenario.dilation): a
time measured here is D times the hardware's, a rate 1/D of it, bytes are the same. Every value
below is given in hardware units first, with the emulated value it came from beside it.

The emulator's own forwarding latency (Open vSwitch, the veths, the kernel's softirq work) is
not dilated: its share of each hardware event shrinks by D. It is estimated per queue pair as
the least one-way latency of its data frames less the path latency the delay line added and the
frame's time on the wire (`link_ns`: its wait behind its queue pair's frames ahead of it, which
the NIC shaper's burst keeps a frame or two long for as long as a stream lasts, and its own frame
time; both are the fabric's), per switch on its path, over the frames that crossed a fabric with
no switch queue: no switch port held more than a frame at any telemetry sample from a sample
before the frame left to a sample after it arrived (`queue_free`). Any other frame may have waited
in a switch queue or behind a pause, which is the fabric's time, not the emulator's: in a PFC
incast or a paused ring every frame of every queue pair did, and the least over them measured the
pauses (11-101 ns a hop in hardware time at every D on incast-fattree-pfc, 254 ns on
pfc-watchdog-torus), not the emulator. The least over queue pairs, / D, is held against the
configured per-hop latency (link delay plus switch latency): over MAX_EMULATOR_SHARE of it, the
emulator, not the fabric, sets the latency and the fidelity verdict says the run could not keep
up. A run with no such frame cannot tell: `judged` false, and `frames` / `queue_free_frames` say
why.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MAX_EMULATOR_SHARE = 0.10


def _pair(hw, emulated, unit_hw: str, unit_emulated: str) -> dict:
    return {f"hardware_{unit_hw}": hw, f"emulated_{unit_emulated}": emulated}


def _scaled(v, k):
    return None if v is None else v * k


def queue_free(depart_ns: np.ndarray, rx_ns: np.ndarray, t_ns: np.ndarray, queued: np.ndarray) -> np.ndarray:
    """Per frame, whether no sample from the last before its departure to the first after its
    arrival saw a switch queue (queued: per sample of the telemetry grid t_ns, any switch port
    holding more than a frame)."""
    if not len(t_ns):
        return np.zeros(len(depart_ns), dtype=bool)
    before = np.maximum(np.searchsorted(t_ns, depart_ns, side="right") - 1, 0)
    after = np.minimum(np.searchsorted(t_ns, rx_ns, side="left"), len(t_ns) - 1)
    seen = np.concatenate([[0], np.cumsum(queued.astype(np.int64))])
    return (seen[after + 1] - seen[before]) == 0


def emulator_latency(pkts: pd.DataFrame, plan: dict, fabric_links, factor: float, hw_per_hop_ns: float,
                     queues: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """The emulator's own per-hop latency (see the module's docstring). queues: the telemetry
    grid and, per sample, whether any switch port held more than a frame (None: no telemetry,
    every frame counted)."""
    flows = {f["id"]: f for f in plan["flows"]}
    got = pkts[pkts["rx_ns"].notna() & pkts["depart_ns"].notna()]
    frames = len(got)
    if queues is not None and len(got):
        got = got[queue_free(got["depart_ns"].to_numpy(np.int64), got["rx_ns"].to_numpy(np.int64), *queues)]
    per_flow = []
    if not got.empty:
        link = got["link_ns"].astype("float64").fillna(0.0)
        lat = (got["rx_ns"].astype("float64") - got["depart_ns"].astype("float64") - link).groupby(got["flow"]).min()
        for flow, least_ns in lat.items():
            f = flows.get(int(flow))
            if f is None:
                continue
            switches = max(1, fabric_links(f["src"], f["dst"]) - 1)
            per_flow.append((least_ns - f.get("delay_ns", 0)) / switches)
    counted = {"frames": frames, "queue_free_frames": len(got)}
    if not per_flow:
        return {"per_hop_ns_hardware": None, "per_hop_us_emulated": None, "configured_per_hop_ns": hw_per_hop_ns,
                "share": None, "max_share": MAX_EMULATOR_SHARE, "judged": False, "ok": True, **counted}
    emu_ns = float(min(per_flow))
    hw_ns = emu_ns / factor
    judged = hw_per_hop_ns > 0
    share = hw_ns / hw_per_hop_ns if judged else None
    return {"per_hop_ns_hardware": hw_ns, "per_hop_us_emulated": emu_ns / 1e3,
            "configured_per_hop_ns": hw_per_hop_ns, "share": share, "max_share": MAX_EMULATOR_SHARE,
            "judged": judged, "ok": (share <= MAX_EMULATOR_SHARE) if judged else True,
            "median_over_queue_pairs_ns_hardware": float(np.median(per_flow)) / factor, **counted,
            "method": "least over queue pairs of (least one-way latency of the frames that met no switch queue - "
                      "configured path latency) per switch, / D"}


def dilation_section(sc: dict, collective: dict, latency: dict, transport: dict, qos: dict | None,
                     emulator: dict, final_rates_bps: list) -> dict:
    """summary.dilation from the finished sections (all in emulated units)."""
    d = sc.get("dilation") or {}
    factor = float(d.get("factor", 1.0))
    f = sc["fabric"]
    fct = transport.get("message_fct_s") or {}
    steady = transport.get("steady_state") or {}
    queue = steady.get("bottleneck_queue") or {}
    rates = [r for r in final_rates_bps if r is not None and not np.isnan(r)]
    pfc = (qos or {}).get("pfc") or {}
    paused = pfc.get("paused_time") or []
    link_bps = f["bw_mbps"] * 1e6
    q99 = queue.get("p99_bytes")
    react = pfc.get("reaction_us") or {}
    hw = {
        "iteration_s": _pair(_scaled(collective.get("mean_time_s"), 1 / factor), collective.get("mean_time_s"), "s", "s"),
        "bound_s": _pair(_scaled(collective.get("bound_s"), 1 / factor), collective.get("bound_s"), "s", "s"),
        "bound_ratio": collective.get("bound_ratio"),
        "busbw": _pair(_scaled(collective.get("busbw_mbps"), factor / 1e3), collective.get("busbw_mbps"),
                       "gbps", "mbps"),
        "fct_p50": _pair(_scaled(fct.get("p50"), 1e6 / factor), fct.get("p50"), "us", "s"),
        "fct_p99": _pair(_scaled(fct.get("p99"), 1e6 / factor), fct.get("p99"), "us", "s"),
        "one_way_latency_p50": _pair(_scaled(latency.get("p50"), 1 / factor), latency.get("p50"), "us", "us"),
        "one_way_latency_p99": _pair(_scaled(latency.get("p99"), 1 / factor), latency.get("p99"), "us", "us"),
        # the same bytes drain D times faster in hardware
        "bottleneck_queueing_delay_p99": _pair(None if q99 is None else q99 * 8 / (link_bps * factor) * 1e6,
                                               None if q99 is None else q99 * 8 / link_bps * 1e6, "us", "us"),
        "longest_pause": _pair(_scaled(max((p["longest_ms"] for p in paused), default=None), 1e3 / factor),
                               max((p["longest_ms"] for p in paused), default=None), "us", "ms"),
        "paused_total": _pair(_scaled(sum(p["paused_ms"] for p in paused) if paused else None, 1e3 / factor),
                              sum(p["paused_ms"] for p in paused) if paused else None, "us", "ms"),
        # the emulator's own reaction against the time PFC headroom covers (qos.headroom_time_s)
        "pfc_headroom_time": _pair(_scaled(react.get("allowance"), 1 / factor), react.get("allowance"), "us", "us"),
        "pfc_reaction_max": _pair(_scaled(react.get("max"), 1 / factor), react.get("max"), "us", "us"),
        "dcqcn_final_rate_p50": _pair(float(np.median(rates)) * factor / 1e9 if rates else None,
                                      float(np.median(rates)) / 1e6 if rates else None, "gbps", "mbps"),
    }
    return {
        "factor": factor, "chosen_by": d.get("chosen_by", "version1"),
        "hardware": {"link_gbps": d.get("hw_bw_gbps", f["bw_mbps"] / 1e3),
                     "uplink_gbps": d.get("hw_uplink_bw_gbps") or None,
                     "link_delay_ns": d.get("link_delay_ns", 0.0), "switch_latency_ns": d.get("switch_latency_ns", 0.0)},
        "emulated": {"link_mbps": f["bw_mbps"], "uplink_mbps": f.get("uplink_bw_mbps") or None,
                     "link_delay_ns": f.get("link_delay_ns", 0.0), "switch_latency_ns": f.get("switch_latency_ns", 0.0)},
        "calibration": d.get("calibration"),
        "emulator_latency": emulator,
        "metrics": hw,
    }
