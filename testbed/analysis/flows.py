"""Per-flow and per-class views of a run's packets and messages: one-way latency distributions and
message completion times against the ideal (the fct.txt convention of HPCC-style simulators).
Pure functions of the packet and message tables."""
from __future__ import annotations

import numpy as np
import pandas as pd

ROCE_UDP_PORT = 4791
QUANTILES = {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9}


def class_of_dscp(classes: list[dict]) -> dict[int, str]:
    """DSCP -> traffic class name, as the scenario's [[classes]] map them (the default class takes the
    DSCPs no class names)."""
    out = {}
    default = next((c["name"] for c in classes if c.get("default")), None)
    for c in classes:
        for d in c.get("dscp", ()):
            out[int(d)] = c["name"]
    if default:
        for d in range(64):
            out.setdefault(d, default)
    return out


def _dist(lat_us: np.ndarray) -> dict:
    if not len(lat_us):
        return {"packets": 0, "mean_us": None, "min_us": None, **{f"{k}_us": None for k in QUANTILES},
                "max_us": None}
    return {"packets": int(len(lat_us)), "mean_us": float(lat_us.mean()), "min_us": float(lat_us.min()),
            **{f"{k}_us": float(np.percentile(lat_us, q)) for k, q in QUANTILES.items()},
            "max_us": float(lat_us.max())}


def latency_table(pkts: pd.DataFrame, flows: pd.DataFrame, classes: dict[int, str]) -> pd.DataFrame:
    """One row per (flow, DSCP) with the one-way latency distribution of its delivered packets, and
    one row per class over all its flows (flow = -1)."""
    got = pkts[pkts["rx_ns"].notna()]
    lat = got["latency_ns"].astype("float64") / 1e3
    rows = []
    meta = flows.set_index("flow") if len(flows) else pd.DataFrame()
    for (flow, dscp), idx in got.groupby(["flow", "dscp"]).groups.items():
        m = meta.loc[flow] if flow in meta.index else None
        rows.append({"flow": int(flow), "src": m["src"] if m is not None else "", "dst": m["dst"] if m is not None else "",
                     "tag": m["tag"] if m is not None else "", "dscp": int(dscp),
                     "class": classes.get(int(dscp), ""), **_dist(lat.loc[idx].to_numpy())})
    for dscp, idx in got.groupby("dscp").groups.items():
        rows.append({"flow": -1, "src": "", "dst": "", "tag": "", "dscp": int(dscp), "class": classes.get(int(dscp), ""),
                     **_dist(lat.loc[idx].to_numpy())})
    return pd.DataFrame(rows)


def class_latency(pkts: pd.DataFrame, classes: dict[int, str]) -> dict:
    """Per class name: the latency distribution of all its delivered packets."""
    got = pkts[pkts["rx_ns"].notna()]
    names = got["dscp"].astype(int).map(classes).fillna("")
    lat = got["latency_ns"].astype("float64") / 1e3
    return {str(name): _dist(lat[names == name].to_numpy()) for name in sorted(names.unique())}


def fct_table(msgs: pd.DataFrame, pkts: pd.DataFrame, flows: pd.DataFrame, bw_bps: float) -> pd.DataFrame:
    """Every network message with its completion time from the wire (its first departure onto the
    host link to its last packet's arrival) against the ideal: its frames but the last back to back
    at line rate, plus its flow's base one-way latency, the least any of that flow's packets saw in
    this run (the path unloaded). A departure stamp marks the start of a frame's time on the wire,
    so the last frame's own time is inside the one-way latency. Columns follow HPCC's fct.txt (sip dip sport dport
    size start fct standalone_fct), with names and units."""
    net = msgs[msgs["flow"] >= 0]
    if net.empty:
        return pd.DataFrame(columns=["msg", "src", "dst", "sport", "dport", "size_bytes", "start_ns", "fct_ns",
                                     "ideal_fct_ns", "slowdown", "tag", "dscp"])
    first = pkts[~pkts["retransmit"]]
    wire = first.groupby("msg")["bytes"].sum() - first.sort_values("seq").groupby("msg")["bytes"].last()
    base_owd = pkts.groupby("flow")["latency_ns"].min().astype("float64")
    meta = flows.set_index("flow")
    out = pd.DataFrame({
        "msg": net["msg"].to_numpy(), "src": net["src"].to_numpy(), "dst": net["dst"].to_numpy(),
        "sport": meta["udp_sport"].reindex(net["flow"]).to_numpy() if "udp_sport" in meta else 0,
        "dport": ROCE_UDP_PORT, "size_bytes": net["bytes"].to_numpy(),
        "start_ns": net["first_depart_ns"].astype("float64").to_numpy(),
        "fct_ns": net["fct_ns"].astype("float64").to_numpy(),
        "nic_wait_ns": net["nic_wait_ns"].astype("float64").to_numpy(),
        "tag": net["tag"].to_numpy() if "tag" in net else "collective",
        "dscp": meta["dscp"].reindex(net["flow"]).to_numpy() if "dscp" in meta else 0})
    serial_ns = wire.reindex(net["msg"]).fillna(0).to_numpy(dtype="float64") * 8 / bw_bps * 1e9
    out["ideal_fct_ns"] = serial_ns + base_owd.reindex(net["flow"]).fillna(0).to_numpy()
    out["slowdown"] = out["fct_ns"] / out["ideal_fct_ns"]
    return out


def slowdown_summary(fct: pd.DataFrame) -> dict:
    done = fct[fct["fct_ns"].notna() & (fct["ideal_fct_ns"] > 0)]

    def stats(s: pd.Series) -> dict:
        v = s.to_numpy(dtype="float64")
        return {"messages": int(len(v)), "p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)),
                "p99": float(np.percentile(v, 99)), "max": float(v.max())} if len(v) else {"messages": 0}
    return {"definition": "fct (first departure to last arrival) / (all frames but the last at line rate + "
                          "the flow's least one-way latency)",
            "all": stats(done["slowdown"]),
            "by_tag": {str(t): stats(g["slowdown"]) for t, g in done.groupby("tag")}}
