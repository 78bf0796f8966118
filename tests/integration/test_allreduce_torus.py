"""Real runs of allreduce-torus on Mininet, Open vSwitch and os-ken (root)."""
import json
import subprocess

import pandas as pd
import pytest

from helpers import NOTHING_FAILED, SMALL, assert_ran, bridges, fabric_interfaces, run_dirs, run_testbed, summary_of
from testbed.records import read_engine_progress
from testbed.traffic.packets import HEADER_BYTES

pytestmark = pytest.mark.root



@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    before_br, before_if = bridges(), fabric_interfaces()
    out = run_testbed(results, "run", "allreduce-torus", *SMALL)
    assert_ran(out)
    (run_dir,) = run_dirs(results)
    return {"out": out, "run_dir": run_dir, "before": (before_br, before_if)}


def test_run_completes_and_every_packet_arrives(small_run):
    s = summary_of(small_run["run_dir"])
    assert s["status"] in NOTHING_FAILED, s["problems"]
    assert s["packets"]["sent"] == s["packets"]["received"] > 0
    assert s["packets"]["lost"] == 0 and s["packets"]["qdisc_drops"] == 0
    assert s["collective"]["iterations_complete"] == 2
    assert "results:" in small_run["out"].stdout
    # the traffic agents kept up with line-rate traffic: every host sent and received, nothing
    # dropped at their sockets, every message acknowledged
    agents = s["transport"]["agents"]
    assert agents["receiver_socket_drops"] == 0
    assert all(h["tx_pps"] > 0 and h["rx_pps"] > 0 for h in agents["hosts"]) and len(agents["hosts"]) == 4
    msgs = pd.read_parquet(small_run["run_dir"] / "messages.parquet")
    assert msgs["fct_ns"].notna().all() and (msgs["recv_bytes"] == msgs["bytes"]).all()
    # the engine's last heartbeat, what the progress display shows, says the same
    p = read_engine_progress(small_run["run_dir"] / "raw" / "engine_heartbeat")
    assert p.messages == len(msgs) == p.messages_done == p.messages_acked
    assert p.payload_bytes == p.payload_bytes_done == msgs["bytes"].sum()


def test_summary_agrees_with_packets_parquet(small_run):
    run_dir = small_run["run_dir"]
    s = summary_of(run_dir)
    pkts = pd.read_parquet(run_dir / "packets.parquet")
    assert len(pkts) == s["packets"]["sent"]
    assert pkts["rx_ns"].notna().sum() == s["packets"]["received"]
    # the kernel's stamps, mapped to the one monotonic clock: handoff <= departure < arrival
    assert pkts["depart_ns"].notna().all() and (pkts["depart_ns"] >= pkts["tx_ns"]).all()
    lat_us = (pkts["rx_ns"] - pkts["depart_ns"]).astype(float) / 1e3
    assert lat_us.min() > 0
    assert lat_us.median() == pytest.approx(s["latency_us"]["p50"])
    assert lat_us.max() == pytest.approx(s["latency_us"]["max"])
    # packets of a flow leave in PSN order, one PSN each
    for _, g in pkts.groupby("flow"):
        assert list(g.sort_values("tx_ns")["psn"]) == list(range(len(g)))


def test_each_rank_moves_2_n_minus_1_over_n_of_the_data(small_run):
    run_dir = small_run["run_dir"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    n = len(manifest["ranks"])
    S = manifest["scenario"]["workload"]["bytes_per_rank"]
    msgs = pd.read_parquet(run_dir / "messages.parquet")
    pkts = pd.read_parquet(run_dir / "packets.parquet")
    assert msgs["complete"].all()
    per_rank = msgs[msgs["iteration"] == 0].groupby("src")["bytes"].sum()
    assert len(per_rank) == n
    assert (per_rank == 2 * (n - 1) * S // n).all()
    # the wire carried exactly those payload bytes plus one header per packet
    assert int(pkts["bytes"].sum()) == int(msgs["bytes"].sum()) + HEADER_BYTES * len(pkts)


def test_iteration_times_match_the_message_table(small_run):
    run_dir = small_run["run_dir"]
    s = summary_of(run_dir)
    msgs = pd.read_parquet(run_dir / "messages.parquet")
    for it, t in enumerate(s["collective"]["time_s"]):
        g = msgs[msgs["iteration"] == it]
        assert t == pytest.approx((g["complete_ns"].max() - g["release_ns"].min()) / 1e9)
    bound = s["collective"]["bound_s"]
    assert s["collective"]["bound_ratio"] == pytest.approx(bound / s["collective"]["mean_time_s"])
    # a step cannot start before the chunk it forwards has arrived
    prev = msgs[["iteration", "step", "dst", "complete_ns"]].assign(step=msgs["step"] + 1)
    pairs = msgs.merge(prev, left_on=["iteration", "step", "src"], right_on=["iteration", "step", "dst"],
                       suffixes=("", "_prev"))
    assert len(pairs) == (msgs["step"] > 0).sum()
    assert (pairs["first_tx_ns"] >= pairs["complete_ns_prev"]).all()


def test_results_folder_is_complete(small_run):
    run_dir = small_run["run_dir"]
    for name in ("manifest.json", "summary.json", "packets.parquet", "messages.parquet", "iterations.parquet",
                 "flows.parquet", "qp_events.parquet", "raw/qp_events.bin", "raw/tx.bin", "raw/rx.bin", "raw/controller_events.jsonl", "raw/fabric.json"):
        assert (run_dir / name).exists(), name
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["mechanisms"]["datapath"] and m["versions"]["openvswitch"] and m["versions"]["os_ken"]
    assert m["scenario"]["fabric"]["dims"] == [2, 2]


def test_nothing_left_behind_and_a_second_run_works(small_run, foreign_bridge, tmp_path):
    before_br, before_if = small_run["before"]
    assert bridges() - {foreign_bridge} == before_br
    assert fabric_interfaces() == before_if
    out = run_testbed(tmp_path, "run", "allreduce-torus", *SMALL)
    assert_ran(out)
    assert foreign_bridge in bridges()
    assert bridges() - {foreign_bridge} == before_br and fabric_interfaces() == before_if


def test_analysis_is_rerunnable(small_run):
    run_dir = small_run["run_dir"]
    first = summary_of(run_dir)
    out = run_testbed(run_dir.parent, "analyze", str(run_dir))
    assert_ran(out)
    again = summary_of(run_dir)
    assert again == first


def test_report_tables_and_fidelity_verdict(small_run):
    run_dir = small_run["run_dir"]
    s = summary_of(run_dir)
    for name in ("latency", "fct", "links", "link_utilisation", "messages", "iterations", "flows"):
        assert (run_dir / f"{name}.parquet").exists() and (run_dir / f"{name}.csv").exists(), name
    for png in ("queues.png", "latency_cdf.png", "link_utilisation.png", "timeline.png"):
        assert (run_dir / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    page = (run_dir / "report.html").read_text()
    # self-contained: every plot drawn is inlined (pauses and DCQCN rates only where the run had them)
    assert page.count("data:image/png;base64,") == len(list((run_dir / "plots").glob("*.png"))) >= 4
    assert "Fidelity: " in (run_dir / "report.md").read_text()
    fid = s["fidelity"]
    # the verdict follows its evidence: valid only when something was busy enough to judge (a
    # switch port's backlog or a host's link) and every busy link and every host passed; otherwise
    # its notes say what failed or that too little was busy
    lf, hosts = fid["links"], fid["hosts"]
    judged = lf["busy_links"] > 0 or hosts["judged_hosts"] > 0
    assert fid["valid"] == (judged and not lf["failing_links"] and hosts["valid"] and not fid["notes"]), fid
    assert fid["valid"] or fid["notes"]
    if fid["verdict"] == "not_judged":
        assert not judged and len(fid["notes"]) == 1 and fid["notes"][0].startswith("too little was busy"), fid
    assert 0 <= fid["machine_cpu_idle_fraction"] <= 1 and lf["min_share"] == 0.99
    printed = {"kept_up": "FIDELITY VALID", "not_judged": "FIDELITY NOT JUDGED",
               "could_not_keep_up": "FIDELITY INVALID"}[fid["verdict"]]
    assert printed in small_run["out"].stdout
    assert (small_run["out"].returncode == 0) == fid["valid"]
    # each host's downlink carried what its ring neighbour sent: 2(N-1)/N of S per iteration, 2
    # iterations (the telemetry's first and last millisecond in the window may miss a frame or three)
    links = pd.read_csv(run_dir / "links.csv")
    host_ports = links[links["to"].str.startswith("h")]
    assert len(host_ports) == 4 and (host_ports["bytes"] > 0.97 * 2 * 1.5 * 1024 * 1024).all()
    fct = pd.read_parquet(run_dir / "fct.parquet")
    assert len(fct) == len(pd.read_parquet(run_dir / "messages.parquet"))
    # FCT runs from the first frame's departure onto the host link; the host NIC's shaper lets at
    # most its burst (fabric.nic_burst_frames) out back to back after an idle period, so a message
    # beats its line-rate ideal by no more than that burst's time on the wire
    sc = json.loads((run_dir / "manifest.json").read_text())["scenario"]
    frame = sc["workload"]["payload_bytes"] + 58
    burst_ns = sc["fabric"]["nic_burst_frames"] * frame * 8 / (sc["fabric"]["bw_mbps"] * 1e6) * 1e9
    assert fct["fct_ns"].notna().all() and (fct["slowdown"] > 0).all()
    assert (fct["fct_ns"] >= fct["ideal_fct_ns"] - burst_ns).all()


def rc_order_violations(pkts: pd.DataFrame) -> int:
    """First transmissions of a queue pair whose message is not the one it was sending: RC sends
    a QP's messages one after another, so each message's packets form one unbroken run."""
    bad = 0
    for _, g in pkts[~pkts["retransmit"]].sort_values("tx_ns", kind="stable").groupby("flow"):
        runs = (g["msg"] != g["msg"].shift()).sum()
        bad += runs - g["msg"].nunique()
    return int(bad)


def test_each_queue_pair_sends_its_messages_in_order(small_run):
    pkts = pd.read_parquet(small_run["run_dir"] / "packets.parquet")
    msgs = pd.read_parquet(small_run["run_dir"] / "messages.parquet")
    assert (msgs.groupby("flow")["msg"].count() > 1).all()   # several messages on every QP
    assert rc_order_violations(pkts) == 0
    # and a message's packets leave in sequence
    for _, g in pkts[~pkts["retransmit"]].sort_values("tx_ns", kind="stable").groupby("msg"):
        assert g["seq"].is_monotonic_increasing


def test_channels_spread_a_pairs_messages_over_queue_pairs_each_in_order(tmp_path):
    out = run_testbed(tmp_path, "run", "allreduce-torus", *SMALL, "--set", "transport.channels=2")
    assert_ran(out)
    (run_dir,) = run_dirs(tmp_path)
    plan = json.loads((run_dir / "raw" / "plan.json").read_text())
    pairs = {(f["src"], f["dst"]) for f in plan["flows"]}
    assert len(plan["flows"]) == 2 * len(pairs) and {f["channel"] for f in plan["flows"]} == {0, 1}
    msgs = pd.read_parquet(run_dir / "messages.parquet")
    per_flow = msgs[msgs["flow"] >= 0].groupby("flow")["msg"].count()
    assert per_flow.max() - per_flow.min() <= 1 * 2   # the pair's messages alternate between channels
    assert rc_order_violations(pd.read_parquet(run_dir / "packets.parquet")) == 0
    assert summary_of(run_dir)["status"] in NOTHING_FAILED


def test_a_message_is_released_when_its_last_dependency_completed(small_run):
    """Released at the dependency's completion (its last frame's kernel receive stamp, or its
    compute's end), not when the data plane got round to it: the time it takes to react is NIC
    idling with work to send, judged by the host side of the verdict."""
    raw = small_run["run_dir"] / "raw"
    plan = json.loads((raw / "plan.json").read_text())
    m = json.loads((raw / "messages.json").read_text())
    release, complete = m["release_ns"], m["complete_ns"]
    waiting = [(m["id"], m["deps"]) for m in plan["messages"] if m["deps"]]
    assert len(waiting) == 44   # 4 ranks x 6 ring steps x 2 iterations, less each rank's first
    assert [i for i, deps in waiting if release[i] != max(complete[d] for d in deps)] == []
    computes = [(m["id"], m["duration_ns"]) for m in plan["messages"] if m["flow"] < 0]
    assert [i for i, dur in computes if complete[i] != release[i] + dur] == []
