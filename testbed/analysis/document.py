"""A run's results as one document, and its three renderings: report.md, report.html and the
command line's (rich). The document is a list of blocks: ("h", level, text), ("p", text),
("table", header, rows), ("img", file, caption); what a run says is decided once, here, from its
summary, and each renderer only lays it out. Pure: no plotting (testbed.analysis.report draws the
plots the "img" blocks name).
"""
from __future__ import annotations

import base64
import html
from pathlib import Path

import numpy as np

from testbed.scenario.schema import dcqcn_described

PLOTS = (("queues", "Queue depth over time"), ("latency_cdf", "Latency CDF per class"),
         ("link_utilisation", "Link utilisation"), ("timeline", "Collective timeline"),
         ("pauses", "PFC pauses per port and class, hop by hop"), ("dcqcn", "DCQCN rate and CNPs per queue pair"),
         ("ecn_tuning", "ECN tuning: the profile each window judged, and what it saw"))


def _num(v, spec="{:.3g}"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, float):
        return spec.format(v)
    return str(v)


PORT_ROWS = 12


def blocks(s: dict, drawn: list[str] = (), ports: list[dict] = (), port_count: int = 0) -> list[tuple]:
    """The whole document of one run: its verdicts first, then what it measured. ports: the worst
    rows of the run's port counter table (testbed.analysis.ports), of port_count in all."""
    out: list[tuple] = [("h", 1, f"{s['scenario']}: {s['status'].upper()}")]
    sets = "".join(f", --set {o}" for o in s.get("overrides") or ())
    out.append(("p", f"Run {s['run_id']}, commit {s.get('git_commit') or '-'}, datapath "
                     f"{s['mechanisms'].get('datapath', '-')}{sets}."))
    out += _fidelity(s["fidelity"]) + _problems(s) + _expectations(s) + _hardware(s) + _workload(s) + _packets(s)
    out += _qos(s)
    out += _transport(s) + _background(s) + _latency_and_fct(s) + _links(s) + _ports(ports, port_count)
    if drawn:
        captions = dict(PLOTS)
        out.append(("h", 2, "Plots"))
        out += [("img", f"plots/{name}.png", captions[name]) for name in drawn]
    out.append(("p", "Tables: messages, iterations, flows, latency, fct, links, ports, link_utilisation (.parquet and "
                     ".csv); packets, queues, qp_events (.parquet); summary.json. trace.json: the run's messages, "
                     "compute, pauses and DCQCN rates in hardware time, for ui.perfetto.dev or chrome://tracing. "
                     "interactive.html: the time plots on one time axis, to zoom in a browser."))
    return out


def _fidelity(fid: dict) -> list[tuple]:
    lf = fid.get("links") or {}
    verdict = {"kept_up": "VALID: the emulation kept up",
               "not_judged": "NOT JUDGED: too little was busy to tell whether the emulation kept up; "
                             "the numbers below are no result"}.get(
        fid["verdict"], "INVALID: the emulation could not keep up; the numbers below may not be the "
                        "configured fabric's")
    hw = (fid.get("hosts") or {}).get("worst") or {}
    rows = [("busy links judged", _num(lf.get("busy_links"))),
            ("drain within tolerance, worst link / all", f"{_num(lf.get('worst_share'), '{:.1%}')} / "
                                                         f"{_num(lf.get('overall_share'), '{:.1%}')}"),
            ("criterion", f"each busy link >= {_num(lf.get('min_share'), '{:.0%}')} of its backlogged "
                          f"windows of max({_num(lf.get('min_window_ms'))} ms, {_num(lf.get('window_frames'))} "
                          f"frame times) within {_num(lf.get('tolerance'), '{:.0%}')} of its rate plus one "
                          f"{_num(lf.get('frame_bytes'))} B frame, and all its windows together within "
                          f"{_num(lf.get('tolerance'), '{:.0%}')}"),
            ("machine CPU idle / busy / steal", f"{_num(fid.get('machine_cpu_idle_fraction'), '{:.0%}')} / "
                                                f"{_num(fid.get('machine_busy_fraction'), '{:.0%}')} / "
                                                f"{_num(fid.get('machine_steal_fraction'), '{:.1%}')}"),
            ("ovs-vswitchd / engine cores", f"{_num((fid.get('cores_used') or {}).get('ovs-vswitchd'), '{:.2f}')} / "
                                            f"{_num((fid.get('cores_used') or {}).get('engine'), '{:.2f}')}"),
            ("sending hosts judged", _num((fid.get("hosts") or {}).get("judged_hosts"))),
            ("worst sending host: windows within tolerance / idle with work",
             f"{_num(hw.get('share'), '{:.1%}')} / {_num(hw.get('idle_share'), '{:.2%}')}")]
    return [("h", 2, f"Fidelity: {verdict}"), ("table", ("", ""), rows)] + [("p", f"- {n}") for n in fid["notes"]]


def _hardware(s: dict) -> list[tuple]:
    """The run in the hardware fabric's time, each value beside the emulated one it came from."""
    d = s.get("dilation")
    if not d:
        return []
    hw, emu, m = d["hardware"], d["emulated"], d["metrics"]

    def row(label, key, hw_unit, emu_unit, spec="{:.4g}"):
        v = m.get(key) or {}
        a, b = v.get(f"hardware_{hw_unit}"), v.get(f"emulated_{emu_unit}")
        return None if a is None and b is None else (label, f"{_num(a, spec)} {hw_unit}", f"{_num(b, spec)} {emu_unit}")

    how = {"auto": "auto (calibrated)", "set": "set (run.dilation)", "version1": "1 (a version 1 file)"}.get(
        d["chosen_by"], d["chosen_by"])
    rows = [("dilation D", f"{d['factor']:g}", how),
            ("link rate", f"{hw['link_gbps']:g} Gb/s", f"{emu['link_mbps']:.4g} Mb/s"),
            ("link delay / switch latency", f"{_num(hw['link_delay_ns'])} / {_num(hw['switch_latency_ns'])} ns",
             f"{_num(emu['link_delay_ns'] / 1e3)} / {_num(emu['switch_latency_ns'] / 1e3)} us")]
    rows += [r for r in (
        row("time per iteration", "iteration_s", "s", "s", "{:.4g}"),
        row("analytical bound", "bound_s", "s", "s", "{:.4g}"),
        row("bus bandwidth", "busbw", "gbps", "mbps", "{:.4g}"),
        row("message FCT p50", "fct_p50", "us", "s"), row("message FCT p99", "fct_p99", "us", "s"),
        row("one-way latency p50", "one_way_latency_p50", "us", "us"),
        row("one-way latency p99", "one_way_latency_p99", "us", "us"),
        row("bottleneck queueing delay p99", "bottleneck_queueing_delay_p99", "us", "us"),
        row("longest PFC pause", "longest_pause", "us", "ms"), row("PFC paused, all ports", "paused_total", "us", "ms"),
        row("PFC headroom covers (2 x link delay + response)", "pfc_headroom_time", "us", "us", "{:.4g}"),
        row("slowest PFC pause, the switch agent's", "pfc_reaction_max", "us", "us", "{:.4g}"),
        row("DCQCN final rate p50", "dcqcn_final_rate_p50", "gbps", "mbps")) if r]
    e = d.get("emulator_latency") or {}
    if e.get("per_hop_ns_hardware") is not None:
        verdict = (f"{_num(e['share'], '{:.1%}')} of the configured {_num(e['configured_per_hop_ns'])} ns "
                   f"(at most {_num(e['max_share'], '{:.0%}')})" if e["judged"] else "no latency configured: not judged")
        rows.append(("emulator's own latency a hop", f"{_num(e['per_hop_ns_hardware'])} ns, {verdict}",
                     f"{_num(e['per_hop_us_emulated'])} us"))
    return [("h", 2, f"Hardware time (D = {d['factor']:g})"), ("table", ("", "hardware", "emulated"), rows)]


def _problems(s: dict) -> list[tuple]:
    if not s["problems"]:
        return []
    out = [("h", 2, "Problems")] + [("p", f"- {p}") for p in s["problems"]]
    dl = ((s.get("qos") or {}).get("pfc") or {}).get("deadlock")
    if s["status"] == "deadlock" and dl:
        cycle = " -> ".join(f"{m['port']}[{m['class']}]" for m in dl["cycle"])
        out.append(("p", f"DEADLOCK: PFC pauses formed a cycle that stopped all progress: {cycle}"))
    return out


def _expectations(s: dict) -> list[tuple]:
    if not s.get("expectations"):
        return []
    return [("h", 2, "Expectations"),
            ("table", ("metric", "expected", "actual", "verdict"),
             [(e["metric"], f"{e['op']} {e['expected']}", _num(e["actual"]),
               "ok" if e["ok"] else f"FAILED {e.get('why') or ''}".strip() if e["ok"] is False
               else f"not judged {e.get('why') or ''}".strip())
              for e in s["expectations"]])]


def _workload(s: dict) -> list[tuple]:
    col, lat = s["collective"], s.get("latency_us") or {}
    rows = [("workload", f"{col['algorithm']}, {col['ranks']} ranks, {col['bytes_per_rank'] / 2**20:g} MiB per rank, "
                         f"{col['link_bw_mbps']:g} Mb/s links"),
            ("iterations complete", f"{col['iterations_complete']} of {col['iterations']}"),
            ("time per iteration (s)", ", ".join(_num(t, "{:.4f}") for t in col["time_s"])),
            ("analytical bound (s)", f"{_num(col['bound_s'], '{:.4f}')} ({col['bound_formula']})"),
            ("bound / measured (mean, worst)", f"{_num(col['bound_ratio'])}, {_num(col['bound_ratio_min'])}"),
            ("bus bandwidth (Mb/s)", _num(col.get("busbw_mbps"), "{:.1f}"))]
    colls = col.get("collectives", [])
    rows += [(f"  {c['name']} (s)", ", ".join(_num(x, "{:.3f}") for x in c["time_s"])) for c in colls[:6]]
    if len(colls) > 6:
        rows.append((f"  ... {len(colls) - 6} more collectives", "summary.json"))
    rows += [(f"  phase {name} (s)", ", ".join(_num(x, "{:.3f}") for x in spans)) for name, spans in col.get("phases_s", {}).items()]
    for name, j in (s.get("jobs") or {}).items():
        rows.append((f"job {name} (tenant {j['tenant']}, {j['workload']}, {len(j['hosts'])} hosts)",
                     f"{_num(j['mean_time_s'], '{:.4f}')} s an iteration; alone {_num(j['alone_mean_time_s'], '{:.4f}')}"
                     f"{'' if j['alone_kept_up'] in (True, None) else ' (could not keep up)'}; slowdown "
                     f"{_num(j['slowdown'], '{:.3f}')}"))
    iso = s.get("isolation")
    if iso:
        rows.append(("tenant isolation", f"{iso['cross_tenant_delivered']} of {iso['cross_tenant_sent']} cross-tenant "
                                         f"probes delivered, {iso['same_tenant_delivered']} of {iso['same_tenant_sent']} "
                                         f"within tenants ({iso['mechanism']})"))
    par = col.get("parallelism")
    if par:
        rows.append(("parallel layout", f"TP {par['tp']} x PP {par['pp']} x DP {par['dp']}, EP {par['ep']} "
                                        f"({par['rank_order']})"))
        rows += [(f"  {kind}, p50 / bound (ms)", f"{_num(x['time_s_p50'] * 1e3, '{:.2f}')} / "
                                                 f"{_num(x['bound_s'] * 1e3, '{:.2f}')} ({x['instances_per_iteration']} "
                                                 f"an iteration)")
                 for kind, x in par["layer_collectives"].items()]
        share = par["iteration_split"]["share"]
        if share:
            rows.append(("  iteration split", ", ".join(f"{k} {v:.0%}" for k, v in share.items())))
    rows += [("one-way latency p50 / p99 / max (us)", " / ".join(_num(lat.get(k), "{:.0f}") for k in ("p50", "p99", "max"))),
             ("goodput, all ranks (Mb/s)", _num((s.get("goodput") or {}).get("aggregate_mbps"), "{:.1f}")),
             ("routes ready after (s)", _num((s.get("timings_s") or {}).get("routes_ready"), "{:.2f}"))]
    sd = (s.get("fct_slowdown") or {}).get("all") or {}
    if sd.get("messages"):
        rows.append(("message FCT slowdown p50 / p99", f"{sd['p50']:.2f} / {sd['p99']:.2f}"))
    return [("h", 2, "Workload"), ("table", ("", ""), rows)]


def _packets(s: dict) -> list[tuple]:
    pk = s["packets"]
    return [("h", 2, "Packets"), ("table", ("", ""), [
        ("sent / received / lost", f"{pk['sent']} / {pk['received']} / {pk['lost']}"),
        ("retransmitted / NAKs / timeouts", f"{pk['retransmitted']} / {pk['naks']} / {pk['timeouts']}"),
        ("port buffer drops", _num(pk["port_buffer_drops"])), ("ECN CE-marked", _num(pk["ecn_ce_marked"])),
        ("bit errors: frames hit / dropped by the receivers' ICRC check",
         f"{_num(pk.get('corrupted_frames'))} / {_num(pk.get('icrc_drops'))}"),
        ("PFC pauses", _num((s.get("qos") or {}).get("pfc", {}).get("pauses")))])]


def _qos(s: dict) -> list[tuple]:
    q = s.get("qos")
    if not q:
        return []
    rows = []
    busiest = q["queues"]["busiest"][0] if q["queues"]["busiest"] else None
    if busiest:
        rows.append(("deepest queue (bytes)", f"{busiest['max_depth_bytes']} on {busiest['port']} class {busiest['class']}"))
    rows.append(("ECN marked / ECT packets (summed over ports)", f"{q['ecn']['marked']} / {q['ecn']['ect_packets']}"))
    pfc = q["pfc"]
    react = pfc["reaction_us"]
    rows.append((f"PFC pauses (ports), {pfc.get('accounting', 'egress')} rule / reaction p50, p99, max (us)",
                 f"{pfc['pauses']} ({pfc['paused_ports']}) / {_num(react['p50'], '{:.0f}')}, "
                 f"{_num(react['p99'], '{:.0f}')}, {_num(react['max'], '{:.0f}')}"))
    if react.get("allowance"):
        over = pfc.get("headroom_overruns") or []
        rows.append(("PFC headroom: reaction allowed (us) / pauses later / rows past headroom (late, link ahead)",
                     f"{react['allowance']:.0f} / {react['over_allowance']} / {len(over)} ({sum(r['late'] for r in over)}, "
                     f"{sum(bool(r.get('link_ahead')) for r in over)})"))
    ing = pfc.get("ingress")
    if ing and ing["busiest"]:
        top = ing["busiest"][0]
        rows.append(("PFC ingress: most held (bytes) / its XOFF / write-offs",
                     f"{top['max_held_bytes']} on {top['port']} class {top['class']} / {top.get('xoff_bytes', '-')} / "
                     f"{ing['resyncs']}"))
    ib = q.get("ovs_input_backlog")
    if ib and ib["samples"]:
        rows.append((f"OVS input backlog: max (KiB) / samples over {ib['busy_threshold_bytes'] // 1024} KiB",
                     f"{ib['max_bytes'] // 1024} / {ib['busy_samples'] / ib['samples']:.1%}"))
    tel = q["telemetry"]
    rows.append(("telemetry rate (Hz) / agent cores / longest blind spot (us)",
                 f"{tel['achieved_hz']:.0f} / {tel['agent_cores']:.2f} / {_num(tel.get('blind_max_us'), '{:.0f}')}"))
    return [("h", 2, "Queues, ECN and PFC"), ("table", ("", ""), rows)] + _ecn_tuning(q.get("ecn_tuning"))


def _ecn_tuning(t: dict | None) -> list[tuple]:
    """What the ECN tuning did: per class where it started and ended, and every change."""
    if not t:
        return []
    tg = t["target"]

    def prof(p):
        return f"Kmin {p['kmin_bytes']}, Kmax {p['kmax_bytes']}, Pmax {p['pmax']:.3g}"
    out = [("h", 2, "ECN tuning"),
           ("p", f"Target: queue p99 <= {tg['queue_p99_bytes']} B at utilisation >= {tg['utilisation']:g} on the "
                 f"marking ports; windows of {t['window_us']:g} us (hardware time; {t['window_wall_s']:.2f} s "
                 f"wall-clock); {t['changes']} change(s).")]
    out.append(("table", ("class", "start", "end", "changes (harder, gentler, taken back)", "judged windows (target met)",
                          "Kmin over the 2nd half (B)", "converged"),
                [(name, prof(c["start"]), prof(c["end"]), f"{c['changes']} ({c['harder']}, {c['gentler']}, {c.get('reverted', 0)})",
                  f"{c['judged_windows']} ({c['met_windows']})",
                  "-" if not c["kmin_bytes_second_half"] else "{} .. {}".format(*c["kmin_bytes_second_half"]),
                  _num(c["converged"])) for name, c in t["classes"].items()]))
    if t["history"]:
        out.append(("table", ("t (us)", "class", "move", "to", "because p99 (B) / utilisation at"),
                    [(f"{h['t_us']:.0f}", h["class"], h["direction"], prof(h["after"]),
                      f"{_num(h['p99_bytes'])} / {_num(h['utilisation'])} at {h['worst_port']}")
                     for h in t["history"]]))
    return out


def _transport(s: dict) -> list[tuple]:
    tr = s.get("transport")
    if not tr:
        return []
    cc = tr["cc"]
    if tr["dcqcn"]:
        d = tr["dcqcn"]
        cc += f" ({d['time_scale']:g}x time-dilated: CNP interval {d['cnp_interval_ns'] / 1e6:g} ms)"
        if "overrides" in d:   # runs analysed before the reference configuration was named have none
            cc += f"; {dcqcn_described(d['overrides'])}"
    rows = [("congestion control", cc)]
    td = s.get("time_dilation") or {}
    if td.get("dilated_reference_rtt_us") and td.get("fabric_base_rtt_us"):
        rows.append(("base RTT: dilated reference / emulated fabric (us)",
                     f"{td['dilated_reference_rtt_us']:.0f} / {td['fabric_base_rtt_us']:.0f}"))
    rows += [("CNPs sent / rate cuts", f"{tr['cnps_sent']} / {tr['rate_cuts']}"),
             ("retransmitted (packets / KiB) / NAKs / timeouts",
              f"{tr['retransmitted_packets']} / {tr['retransmitted_bytes'] // 1024} / {tr['naks']} / {tr['timeouts']}")]
    st = tr["steady_state"]
    if st:
        rows.append((f"steady state ({st['duration_s']:.2f} s): Jain index / total Mb/s",
                     f"{_num(st['jain_index'], '{:.3f}')} / {st['total_mbps']:.1f}"))
        bq = st["bottleneck_queue"]
        if bq:
            rows.append((f"  {bq['port']} {bq['class_name']} queue p50 / p99 / run max (KB)",
                         f"{bq['p50_bytes'] / 1e3:.0f} / {bq['p99_bytes'] / 1e3:.0f} / {bq['run_max_bytes'] / 1e3:.0f}"))
    ag = tr["agents"]
    rows.append(("engine: packets/s (busiest host) / cores vs ovs-vswitchd",
                 f"{ag['packets_per_s']:.0f} ({ag['max_host_pps']:.0f}) / "
                 f"{_num(ag['engine_cores'], '{:.2f}')} vs {_num(ag['ovs_vswitchd_cores'], '{:.2f}')}"))
    out = [("h", 2, "Transport"), ("table", ("", ""), rows)]
    if td.get("warning"):
        out.append(("p", f"Time dilation: {td['warning']}"))
    return out


def _background(s: dict) -> list[tuple]:
    bg = s.get("background") or []
    if not bg:
        return []
    return [("h", 2, "Traffic beside the workload"),
            ("table", ("traffic", "FCT (s)", "slowdown"),
             [(f"{b['tag']} {b['src']}->{b['dst']}", _num(b["fct_s"], "{:.3f}"), _num(b["slowdown"], "{:.2f}")) for b in bg])]


def _latency_and_fct(s: dict) -> list[tuple]:
    out = []
    lat = s.get("latency_by_class_us") or {}
    if lat:
        out.append(("h", 2, "One-way latency per class (us)"))
        out.append(("table", ("class", "packets", "p50", "p99", "p99.9", "max"),
                    [(c, _num(d["packets"]), _num(d["p50_us"], "{:.0f}"), _num(d["p99_us"], "{:.0f}"),
                      _num(d["p999_us"], "{:.0f}"), _num(d["max_us"], "{:.0f}")) for c, d in lat.items()]))
    fct = s.get("fct_slowdown") or {}
    if fct.get("by_tag"):
        out.append(("h", 2, "Message completion: slowdown against the ideal"))
        out.append(("p", fct["definition"]))
        out.append(("table", ("traffic", "messages", "p50", "p95", "p99", "max"),
                    [(t, _num(d["messages"]), _num(d.get("p50")), _num(d.get("p95")), _num(d.get("p99")),
                      _num(d.get("max"))) for t, d in fct["by_tag"].items()]))
    return out


def _links(s: dict) -> list[tuple]:
    out = []
    links, lf = s.get("links") or {}, s["fidelity"].get("links") or {}
    if links.get("busiest"):
        out.append(("h", 2, "Busiest links"))
        out.append(("table", ("port", "to", "utilisation", "deepest queue (B)"),
                    [(b["port"], b["to"], _num(b["utilisation"], "{:.1%}"), _num(b["max_queue_bytes"], "{:.0f}"))
                     for b in links["busiest"]]))
    if lf.get("links"):
        out.append(("h", 2, "Links that drained least faithfully"))
        out.append(("table", ("port", "rate (Mb/s)", "windows (ms each)", "within tolerance", "slow", "fast",
                              "long-run drain / rate"),
                    [(c["port"], _num(c["rate_mbps"]), f"{_num(c['windows'])} ({_num(c['window_ms'], '{:.1f}')})",
                      _num(c["share"], "{:.1%}"), _num(c["slow_windows"]), _num(c["fast_windows"]),
                      _num(c["drain_ratio"], "{:.4f}"))
                     for c in lf["links"][:8]]))
    return out


def _ports(ports: list[dict], count: int) -> list[tuple]:
    if not ports:
        return []
    return [("h", 2, f"Port counters, worst first ({len(ports)} of {count} switch ports; hardware time)"),
            ("table", ("port", "link", "Gb/s", "utilisation", "queue peak / p99 (B)", "ECN marked / ECT", "drops",
                       "CRC errors", "pauses received / sent", "paused (us)"),
             [(p["port"], p["link"], _num(p["hardware_gbps"], "{:g}"), _num(p["utilisation_pct"], "{:.1f}%"),
               f"{_num(p['queue_peak_bytes'], '{:.0f}')} / {_num(p['queue_p99_bytes'], '{:.0f}')}",
               f"{_num(p['ecn_marked'])} / {_num(p['ect_packets'])}", _num(p["drops"]), _num(p.get("crc_errors", 0)),
               f"{_num(p['pauses_received'])} / {_num(p['pauses_sent'])}", _num(p["paused_us"], "{:.2f}"))
              for p in ports])]


def to_markdown(bl: list[tuple]) -> str:
    lines = []
    for b in bl:
        if b[0] == "h":
            lines += ["#" * b[1] + " " + b[2], ""]
        elif b[0] == "p":
            lines += [b[1], ""]
        elif b[0] == "table":
            header, rows = b[1], b[2]
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join("---" for _ in header) + "|")
            lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
            lines.append("")
        elif b[0] == "img":
            lines += [f"![{b[2]}]({b[1]})", ""]
    return "\n".join(lines)


def to_html(bl: list[tuple], root: Path) -> str:
    """Self-contained: the plots are inlined, read from under root (the run folder)."""
    e = html.escape
    body = []
    for b in bl:
        if b[0] == "h":
            cls = ""
            if b[2].startswith("Fidelity:"):
                cls = ' class="ok"' if b[2].startswith("Fidelity: VALID:") else ' class="bad"'
            body.append(f"<h{b[1]}{cls}>{e(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            body.append(f"<p>{e(b[1])}</p>")
        elif b[0] == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in b[1]) if any(b[1]) else ""
            rows = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in b[2])
            body.append(f"<table>{'<tr>' + head + '</tr>' if head else ''}{rows}</table>")
        elif b[0] == "img":
            data = base64.b64encode((root / b[1]).read_bytes()).decode()
            body.append(f'<figure><img alt="{e(b[2])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{e(b[2])}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
             "text-align:left}.ok{color:#17692c}.bad{color:#b00020}img{max-width:100%}")
    title = e(bl[0][2]) if bl and bl[0][0] == "h" else "report"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def to_console(bl: list[tuple], console) -> None:
    """The document on a terminal or in a log (rich): headings, tables, paragraphs; plots by file."""
    from rich import box
    from rich.table import Table
    for b in bl:
        if b[0] == "h":
            console.print(f"[bold]{b[2]}[/]" if b[1] == 1 else f"\n[bold]{b[2]}[/]", highlight=False)
        elif b[0] == "p":
            console.print(b[1], highlight=False, markup=False)
        elif b[0] == "table":
            headed = any(b[1])
            t = Table(show_header=headed, box=box.SIMPLE_HEAD if headed else None, pad_edge=False)
            for i, h in enumerate(b[1]):
                # a name folds rather than loses its end (two metrics differ only there)
                t.add_column(h, justify="left" if i == 0 else "right", overflow="fold" if i == 0 else "ellipsis")
            for r in b[2]:
                t.add_row(*(str(c) for c in r))
            console.print(t)
        elif b[0] == "img":
            console.print(f"plot: {b[1]} ({b[2]})", highlight=False)
