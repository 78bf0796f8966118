"""Port QoS on real runs (root): ECN marking follows its RED profile per packet, PFC makes an
incast lossless with pauses spreading upstream and head-of-line blocking a victim, priority
queuing protects an AllReduce from bulk traffic, and PFC on a torus ring without a dateline
deadlocks (detected, reported, the run ending cleanly) while the dateline avoids it; the controller's QoS app sends the policy and changes it at run time."""
import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from testbed.fabric import qos
from testbed.fabric.routing import compute_routes
from testbed.scenario import build_fabric, load_scenario

from helpers import NOTHING_FAILED, ROOT, assert_ran, cli_argv, env_with_results, run_dirs, run_testbed, summary_of

pytestmark = pytest.mark.root


def run_one(tmp_path, name, *sets, expect_rc=0):
    # no report: these tests read the run's records, and matplotlib's seconds a run add up
    args = [a for s in (*sets, "run.report=false") for a in ("--set", s)]
    out = run_testbed(tmp_path, "run", name, *args)
    if expect_rc == 0:
        assert_ran(out)
    elif expect_rc is not None:
        assert out.returncode == expect_rc, out.stdout + out.stderr
    run_dir = run_dirs(tmp_path)[-1]
    return run_dir, summary_of(run_dir)


def test_incast_ecn_marks_by_the_profile_on_the_congested_port_only(suite_runs):
    r = suite_runs.get("incast-ecn")
    run_dir, s = r.run_dir, r.summary
    q = s["qos"]
    assert s["status"] in NOTHING_FAILED and s["packets"]["lost"] == 0
    # only the port toward the receiver marks, and it marks in its RoCE class
    assert [(m["port"], m["class"]) for m in q["ecn"]["marking_ports"]] == [("leaf0-eth1", 1)]
    (prof,) = q["ecn"]["profiles"]
    kmin, kmax, pmax = prof["kmin_bytes"], prof["kmax_bytes"], prof["pmax"]
    below = [b for b in prof["buckets"] if b["depth_to_bytes"] <= kmin]
    above = [b for b in prof["buckets"] if b["depth_from_bytes"] >= kmax]
    ramp = [b for b in prof["buckets"] if b["depth_from_bytes"] >= kmin and b["depth_to_bytes"] <= kmax]
    assert below and above and ramp, prof
    assert sum(b["marked"] for b in below) == 0                       # never below Kmin
    assert all(b["marked"] == b["ect_packets"] for b in above)        # every ECT packet above Kmax
    # in between: the marked count matches the profile (binomial, 4 sigma)
    n = sum(b["ect_packets"] for b in ramp)
    want = sum(b["ect_packets"] * b["profile_fraction"] for b in ramp)
    got = sum(b["marked"] for b in ramp)
    sd = math.sqrt(sum(b["ect_packets"] * b["profile_fraction"] * (1 - b["profile_fraction"]) for b in ramp))
    assert n > 100 and abs(got - want) <= 4 * sd + 2, (got, want, sd)
    # what receivers saw: CE only on ECT flows; the Not-ECT sender's packets are never marked
    pkts = pd.read_parquet(run_dir / "packets.parquet")
    plan = json.loads((run_dir / "raw" / "plan.json").read_text())
    not_ect = {f["id"] for f in plan["flows"] if not f["ect"]}
    assert len(not_ect) == 1
    assert (pkts.loc[pkts["flow"].isin(not_ect), "ecn"] == 0).all()
    assert (pkts.loc[~pkts["flow"].isin(not_ect), "ecn"] == 3).sum() == q["ecn"]["marked"]
    # the telemetry agrees: no sample interval lying wholly below Kmin gained a mark
    tel = pd.read_parquet(run_dir / "queues.parquet")
    port = tel[(tel["port"] == "leaf0-eth1") & (tel["class"] == 1)].sort_values("t_ns")
    gained = port["mark_pkts"].diff() > 0
    low = (port["depth_bytes"] < kmin) & (port["depth_bytes"].shift() < kmin - 4 * 4154)
    assert not (gained & low).any()
    # ...over enough samples to mean something (how fast the agent sampled is bench's to judge,
    # not a test's: a loaded machine samples less often, and every interval is still checked)
    assert len(port) >= 200 and q["telemetry"]["rows"] >= len(port)


def run_variant(tmp_path, base, extra_toml, *sets):
    """Run a shipped scenario with tables appended to its file (faults, policy changes), and --set
    overrides."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    name = f"{base}-variant"
    (scenarios / f"{name}.toml").write_text((ROOT / "scenarios" / f"{base}.toml").read_text() + "\n" + extra_toml)
    args = [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cli_argv("run", name, *args), cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**env_with_results(tmp_path), "TESTBED_SCENARIO_DIR": str(scenarios)})
    return out, run_dirs(tmp_path)[-1]


def peers(name):
    """Each switch port's peer interface: whom a PFC frame from that port pauses."""
    fabric = build_fabric(load_scenario(name).fabric)
    return {fabric.intf_name(sw, port): fabric.intf_name(peer, peer_port if peer in fabric.switch_by_name else 0)
            for sw, ports in fabric.ports.items() for port, (peer, peer_port, _) in ports.items()}


def assert_ingress_accounting_balanced(run_dir):
    """Every frame an (ingress port, class) counted in left the switch, none was written off as
    lost, and nothing is still held."""
    ingress = json.loads((run_dir / "raw" / "agent.json").read_text())["ingress_end"]
    assert ingress
    for row in ingress:
        assert row["in_pkts"] == row["out_pkts"] and row["in_bytes"] == row["out_bytes"], row
        assert row["lost_bytes"] == row["held_bytes"] == 0, row
    return ingress


def assert_flows_arrived_in_order(run_dir, s):
    """Every queue pair's first transmissions reached its receiver in PSN order, and nothing was
    resent that was not lost: pauses move a port's qdisc between CPUs, whose backlogs reordered
    flows in 8 of 20 incast-pfc runs before every link end had per-flow receive steering."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    links = len(json.loads((run_dir / "raw" / "fabric.json").read_text())["links"])
    assert manifest["mechanisms"]["receive_steering"].startswith(f"rps on {2 * links} veth receive queues")
    pkts = pd.read_parquet(run_dir / "packets.parquet")
    first = pkts[~pkts["retransmit"] & pkts["rx_ns"].notna()].sort_values("rx_ns", kind="stable")
    behind = first.groupby("flow")["psn"].diff().dropna() < 0
    assert not behind.any(), first[behind.reindex(first.index, fill_value=False)].head()
    assert not s["packets"]["resent_without_loss"] and s["transport"]["naks"] == 0, s["transport"]


def late_overruns(s):
    return [r for r in s["qos"]["pfc"]["headroom_overruns"] if r["late"]]


def emulator_overruns(s):
    """The rows past their headroom that the emulator explains: a late pause, or a link that had
    delivered beyond its rate by at least the overrun (testbed.analysis.qos.headroom_overruns)."""
    return [r for r in s["qos"]["pfc"]["headroom_overruns"] if r["emulators"]]


def test_a_late_pause_is_the_emulators_and_the_run_says_so(tmp_path):
    # The agent stopped (SIGSTOP) until 60 ms into the traffic: its rows outgrow XOFF plus
    # headroom long before it pauses, and the bottleneck drops. A switch that reacts in time would
    # not have, so the run says the emulation did not keep up, names the late pause, and does not
    # call the drops a regression of the policy.
    # at D = 1000 (its 100 Gb/s at 100 Mb/s): the agent's 60 ms away is then long enough to overrun
    proc = subprocess.Popen(cli_argv("run", "incast-pfc", "--set", "run.dilation=1000"), cwd=ROOT,
                            env=env_with_results(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    def ready(name):
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(f"incast-pfc/*/raw/{name}")) and proc.poll() is None:
            assert time.monotonic() < deadline, name
            time.sleep(0.002)
        (path,) = tmp_path.glob(f"incast-pfc/*/raw/{name}")
        return path
    try:
        agent = int(ready("agent_ready").read_text())
        os.kill(agent, signal.SIGSTOP)   # from before the traffic starts
        try:
            ready("engine_ready")
            # the traffic is flowing once the bottleneck port has sent a few frames
            sent = Path("/sys/class/net/leaf0-eth1/statistics/tx_bytes")
            deadline = time.monotonic() + 60
            while int(sent.read_text()) < 100_000:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.0005)
            time.sleep(0.06)
        finally:
            os.kill(agent, signal.SIGCONT)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    s = summary_of(run_dirs(tmp_path)[-1])
    pfc = s["qos"]["pfc"]
    assert pfc["reaction_us"]["max"] > 40_000 > pfc["reaction_us"]["allowance"]
    # every row past its headroom is the emulator's, the late pause's among them (a row paused in
    # time may still have been overrun by its link's running ahead as the fabric caught up)
    assert late_overruns(s) and emulator_overruns(s) == pfc["headroom_overruns"], pfc["headroom_overruns"]
    assert_only_the_emulator_overran(s)
    assert s["fidelity"]["verdict"] == "could_not_keep_up"
    assert any("paused later than the PFC headroom allows" in n for n in s["fidelity"]["notes"])
    # the drops it caused are not judged against the policy: inconclusive (4), not regressed (1)
    assert s["packets"]["port_buffer_drops"] > 0, s["packets"]
    (drops,) = [e for e in s["expectations"] if e["metric"] == "packets.port_buffer_drops"]
    assert drops["ok"] is None and "emulator" in drops["why"]
    assert proc.returncode == 4 and "INCONCLUSIVE" in out, out[-3000:]


def assert_only_the_emulator_overran(s):
    """The headroom's claim, which holds in every run: a lossless row whose pauses all came within
    the reaction its headroom is sized for, behind a link that delivered at its rate, never held
    more than XOFF plus that headroom; and a frame a switch queue dropped was dropped behind a row
    that outgrew it after a late pause or behind a link that ran ahead (either makes the run one
    that did not keep up). A pause that did not hold fails it: its link, at its rate, overruns by
    more than it ran ahead."""
    pfc = s["qos"]["pfc"]
    assert all(r["emulators"] for r in pfc["headroom_overruns"]), pfc["headroom_overruns"]
    assert s["packets"]["port_buffer_drops"] == 0 or emulator_overruns(s), (s["packets"], pfc["headroom_overruns"])
    if emulator_overruns(s):
        assert s["fidelity"]["verdict"] == "could_not_keep_up"


def lateness(s):
    """Why a run paused late, for the record: its slowest pause, the agent's longest blind spot
    and how often it was blind for over 1 ms, and the hypervisor's steal."""
    t = s["qos"]["telemetry"]
    return {"max_reaction_us": s["qos"]["pfc"]["reaction_us"]["max"], "blind_max_us": t.get("blind_max_us"),
            "blind_over_1ms": t.get("blind_over_1ms"), "steal": s["fidelity"].get("machine_steal_fraction"),
            "overruns": [(r["port"], r["max_held_bytes"] - r["limit_bytes"], r["ahead_bytes"], r["late"])
                         for r in emulator_overruns(s)]}


def test_incast_pfc_lossless_with_pauses_upstream_and_hol_blocking(tmp_path, suite_runs):
    # Lossless is the claim of a switch that pauses within the reaction its headroom is sized for.
    # This machine now and then keeps the agent off its CPU for 3-9 ms (CI once did in three runs
    # in a row, while quiet runs here paused within 1.6 ms in 11 of 11). Every run is held to the
    # part of the claim that is its own: rows paused in time behind links at their rate kept within
    # their headroom, and every drop is the emulator's (a late pause, or a link that delivered
    # beyond its rate: its port's bucket after an idle spell, or frames bunched behind a late
    # softirq, by up to 8 KB on host links and 20-70 KB on uplinks at 33-41% steal). A run with
    # either says it did not keep up and is no test of the whole claim
    # (test_a_late_pause_is_the_emulators_and_the_run_says_so): up to three runs for one that is,
    # and without one the claim is untested here, with the numbers saying why. The first is the
    # suite's run of incast-pfc (its defaults, as here), not one more of its own.
    late_runs = []
    for attempt in range(3):
        if attempt == 0:
            r = suite_runs.get("incast-pfc")
            run_dir, s = r.run_dir, r.summary
        else:
            run_dir, s = run_one(tmp_path, "incast-pfc", expect_rc=None)
        # drops behind a late pause are the emulator's: not judged, so never a regression
        assert s["status"] in NOTHING_FAILED, (s["problems"], s["expectations"])
        assert_only_the_emulator_overran(s)
        if not emulator_overruns(s):
            break
        late_runs.append(lateness(s))
    else:
        pytest.skip(f"inconclusive: in every run a row outgrew its headroom behind a late pause or a link "
                    f"that ran ahead of its rate: {late_runs}")
    pfc = s["qos"]["pfc"]
    assert s["status"] in NOTHING_FAILED
    # lossless on thresholds derived from the rates and the reaction time alone: nothing dropped
    # anywhere, no transmission lost (a rare NAK after a reordering inside Open vSwitch can still
    # make go-back-N resend: not a loss)
    assert s["packets"]["port_buffer_drops"] == 0 and s["packets"]["lost"] == 0, s["packets"]
    assert s["packets"]["timeouts"] == 0
    assert pfc["pauses"] > 0 and pfc["pauses"] == pfc["resumes"]
    events = [json.loads(l) for l in (run_dir / "raw" / "pfc_events.jsonl").read_text().splitlines()]
    pauses = [e for e in events if e["event"] == "pause"]
    # as 802.1Qbb: what an (ingress port, class) holds pauses that port's peer, and only it
    peer = peers("incast-pfc")
    assert all(e["accounting"] == "ingress" and e["port"] == peer[e["cause"]] for e in pauses), pauses
    # hop by hop: the bottleneck leaf pauses the spine and its local senders, the spine pauses
    # the other leaves' uplinks, and those pause their hosts
    assert {"spine0-eth1", "h0_1-eth0"} <= {e["port"] for e in pauses if e["cause"].startswith("leaf0-")}
    assert any(e["node"].startswith("leaf") for e in pauses if e["cause"].startswith("spine"))
    assert any(e["node"].startswith("h3") for e in pauses if e["cause"].startswith("leaf3"))
    assert pfc["reaction_us"]["p50"] < 1000
    # what the controller's apps hear of it: every telemetry summary names the leaves paused then,
    # for how long, and the queues holding each (its ingress row, which names the paused peer)
    ctl = [json.loads(l) for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    heard = [p for e in ctl if e["event"] == "qos_telemetry" for p in e["paused"]]
    assert heard, "no telemetry summary caught a paused leaf"
    paused_by = {(e["port"], e["class"]): set() for e in pauses}
    for e in pauses:
        paused_by[(e["port"], e["class"])].add(qos.queue_key(e["cause"], e["cause_class"]))
    for port, cls, paused_ns, causes in heard:
        assert paused_ns >= 0 and causes and set(causes) <= paused_by[(port, cls)], (port, cls, causes)
        assert all(peer[k.rpartition(":")[0]] == port for k in causes)
    assert_ingress_accounting_balanced(run_dir)
    assert_flows_arrived_in_order(run_dir, s)
    (victim,) = [b for b in s["background"] if b["tag"] == "victim"]
    # the same run without PFC (a sabotaged policy): the bottleneck drops, the scenario's
    # expectations catch it, and nothing holds the victim back but the uplink it shares. Its
    # slowdown measured 1.36-1.78 so (10 runs), 3.48-4.94 behind the pauses (20 runs): at least
    # 1.96 times as slow, at 1 MiB buffers (bench/README.md). At the D of the run it is compared
    # with: like for like, and without a calibration of its own (PFC off is another fabric to auto)
    _, off = run_one(tmp_path, "incast-pfc", "qos.pfc=false", f"run.dilation={s['dilation']['factor']:g}",
                     expect_rc=1)
    assert off["status"] == "regressed"
    assert {e["metric"] for e in off["expectations"] if not e["ok"]} >= {"packets.port_buffer_drops", "qos.pfc.pauses"}
    assert off["packets"]["port_buffer_drops"] > 0
    assert off["qos"]["pfc"]["pauses"] == 0
    (victim_off,) = [b for b in off["background"] if b["tag"] == "victim"]
    assert victim["slowdown"] > 1.5 * victim_off["slowdown"], (victim, victim_off)


def test_ingress_tags_count_every_frame_across_a_fat_tree_and_leave_no_trace(tmp_path):
    # ECMP incast over edge, aggregation and core switches: each switch counts a frame at the
    # ingress it entered by, its flows carry that ingress in the Ethernet source to the egress,
    # and the egress puts the sender's address back
    run_dir, s = run_one(tmp_path, "incast-fattree-pfc", "run.capture=true", expect_rc=None)
    assert s["packets"]["port_buffer_drops"] == 0 and s["packets"]["lost"] == 0, s["packets"]
    ingress = assert_ingress_accounting_balanced(run_dir)
    assert {r["node"][0] for r in ingress} == {"e", "a", "c"}
    events = [json.loads(l) for l in (run_dir / "raw" / "pfc_events.jsonl").read_text().splitlines()]
    peer = peers("incast-fattree-pfc")
    pauses = [e for e in events if e["event"] == "pause"]
    assert pauses and all(e["port"] == peer[e["cause"]] for e in pauses)
    plan = json.loads((run_dir / "raw" / "plan.json").read_text())
    mac = {h["ip"]: h["mac"] for h in plan["hosts"]}
    receiver = plan["flows"][0]["dst"]
    out = subprocess.run(["tshark", "-r", str(run_dir / "pcap" / f"{receiver}.pcap"), "-Y", "ip", "-T", "fields",
                          "-e", "eth.src", "-e", "ip.src"], capture_output=True, text=True, check=True)
    frames = [line.split("\t") for line in out.stdout.splitlines() if line]
    assert len(frames) > 1000
    assert {src for src, _ in frames} <= set(mac.values())
    assert all(src == mac[ip] for src, ip in frames)


def test_pfc_pauses_follow_a_reroute(tmp_path):
    # incast-fattree-pfc with a core link into the receiver's pod going down 0.1 s into the traffic:
    # ECMP moves the incast onto the other core links. Whom a pause reaches comes from where the
    # bytes entered, not from the routes at start, so after the reroute every pause still goes to
    # the peer that sent them; frames the failure destroyed inside a switch are written off, and
    # nothing stays counted or paused
    out, run_dir = run_variant(tmp_path, "incast-fattree-pfc",
                               '[[faults]]\nat_s = 0.0001\naction = "link_down"\nlink = "a0_0-c0_0"\n')
    s = summary_of(run_dir)
    assert out.returncode in (0, 1, 4), out.stdout + out.stderr
    assert s["faults"] and s["collective"]["iterations_complete"] == 1, s["problems"]
    assert s["packets"]["port_buffer_drops"] == 0, s["packets"]
    assert s["packets"]["unaccounted"] == 0, s["packets"]
    ctl = [json.loads(l) for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    # the fault's reroute (the fabric's teardown after the traffic reports every link down again)
    done = next(e for e in ctl if e["event"] == "reroute_done")
    events = [json.loads(l) for l in (run_dir / "raw" / "pfc_events.jsonl").read_text().splitlines()]
    peer = peers("incast-fattree-pfc")
    after = [e for e in events if e["event"] == "pause" and e["t_ns"] > done["t_ns"]]
    assert after and all(e["port"] == peer[e["cause"]] for e in after), after
    # the incast reached pod 0 through the remaining cores after the reroute: their ingresses paused
    assert {e["cause"] for e in after} & {"a0_0-eth4", "a0_1-eth3", "a0_1-eth4"}
    pfc = s["qos"]["pfc"]
    assert pfc["pauses"] == pfc["resumes"]
    for row in json.loads((run_dir / "raw" / "agent.json").read_text())["ingress_end"]:
        assert row["in_bytes"] == row["out_bytes"] + row["lost_bytes"], row


def test_the_qos_app_hears_of_a_reroute_and_pauses_by_the_new_routes(tmp_path):
    # The same failure under the egress rule, whose pause map comes from the routes: the routing
    # app publishes the reroute (an os-ken event), the QoS app sends the agent the pause map the
    # new routes make, and every pause after that is one the new routes call for
    fault = '[[faults]]\nat_s = 0.0001\naction = "link_down"\nlink = "a0_0-c0_0"\n'
    out, run_dir = run_variant(tmp_path, "incast-fattree-pfc", fault, "qos.pfc_accounting=egress")
    assert out.returncode in (0, 1, 4), out.stdout + out.stderr
    ctl = [json.loads(l) for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    (changed,) = [e for e in ctl if e["event"] == "qos_routes_changed" and e["down_links"] == ["a0_0-c0_0"]]
    assert changed["pause_map_changed"]
    sc = load_scenario("incast-fattree-pfc", ["qos.pfc_accounting=egress"])
    fabric = build_fabric(sc.fabric)
    old = qos.policy(sc, fabric, compute_routes(fabric, sc.controller.routing)).pause_map
    new = qos.policy(sc, fabric, compute_routes(fabric, sc.controller.routing,
                                                frozenset({fabric.link_by_name("a0_0-c0_0")}))).pause_map
    assert new != old
    events = [json.loads(l) for l in (run_dir / "raw" / "pfc_events.jsonl").read_text().splitlines()]
    # the agent applied it: an update with a pause map, after the controller sent it
    assert any(e["event"] == "policy_applied" and e["kind"] == "update" and e["t_ns"] > changed["t_ns"]
               for e in events), [e for e in events if e["event"] == "policy_applied"]
    applied = next(e["t_ns"] for e in events if e["event"] == "policy_applied" and e["kind"] == "update"
                   and e["t_ns"] > changed["t_ns"])
    after = [e for e in events if e["event"] == "pause" and e["t_ns"] > applied]
    assert after, "no pause after the reroute"
    assert all(f"{e['port']}:{e['class']}" in new[f"{e['cause']}:{e['cause_class']}"] for e in after), after


def test_a_resumed_port_does_not_release_the_bucket_its_pause_saved_up(tmp_path, suite_runs):
    # HTB saves up its whole bucket while a class is paused; the agent resumes it with a one-frame
    # bucket. The ports' own bucket is two frames now, so the run sets the 60 KiB (15 frames) they
    # had, which a scenario may still set and which the numbers below were measured with. What the port paused most (spine0-eth1) sent beyond its rate
    # over the 2 ms after each resume that left it backlogged, p90 of a run, on incast-pfc's
    # derived thresholds (30-35 resumes a run): resumed with one frame -0.44 to 2.76 frames (9 runs,
    # one of them CI's), with the saved-up bucket released 4.69-6.10 (5 runs of the agent without
    # the one-frame bucket, 2026-12-02); the limit sits between (bench/README.md). Whatever else
    # the run shows: a late pause or a frame behind Open vSwitch's input backlog is the lossless
    # test's to judge. At the D the suite's run of incast-pfc got: the same frames through Open
    # vSwitch, and no calibration of a burst no shipped scenario has
    d = suite_runs.get("incast-pfc").summary["dilation"]["factor"]
    _, s = run_one(tmp_path, "incast-pfc", "fabric.htb_burst_bytes=61440", f"run.dilation={d:g}", expect_rc=None)
    most = s["qos"]["pfc"]["resume_release"]["by_port"][0]
    assert most["resumes"] >= 5, most
    assert most["frames_over_rate_p90"] <= 3.7, most


def test_priority_queuing_protects_allreduce_from_bulk(tmp_path, suite_runs):
    mix = suite_runs.get("priority-mix").summary
    _, alone = run_one(tmp_path, "priority-mix", "workload.bulk_shift=0", expect_rc=None)
    _, fifo = run_one(tmp_path, "priority-mix", "qos.scheduling=fifo", expect_rc=None)  # priority sabotaged
    # the scenario's expectation catches the sabotage: as a regression on a faithful run; on one
    # the machine could not run faithfully it is a performance metric not judged (exit 4), which
    # says it would have failed
    (bound,) = [e for e in fifo["expectations"] if e["metric"] == "collective.bound_ratio"]
    if fifo["fidelity"]["valid"]:
        assert fifo["status"] == "regressed" and bound["ok"] is False, bound
    else:
        assert bound["ok"] is None and bound["why"].endswith("(it would have failed)"), bound
    assert mix["status"] in NOTHING_FAILED
    # without bulk traffic the expectations that the AllReduce beats bulk (its packets' latency, its
    # flows' slowdown) have nothing to compare with: they fail, as an unchecked policy must (issue
    # 26), and nothing else does
    against_bulk = {"latency_by_dscp_us.26.p50": "latency_by_dscp_us.0.p50",
                    "fct_slowdown.by_tag.collective.p99": "fct_slowdown.by_tag.bulk.p99"}
    vs = {e["metric"]: e for e in alone["expectations"] if e["metric"] in against_bulk}
    assert vs.keys() == against_bulk.keys(), alone["expectations"]
    for metric, other in against_bulk.items():
        assert vs[metric]["ok"] is False and vs[metric]["why"] == f"not in the summary: {other}", vs[metric]
    assert alone["status"] == "regressed" and sorted(alone["problems"]) == sorted(
        f"expectation failed: {m} < {o} (is {vs[m]['actual']}, {vs[m]['why']})" for m, o in against_bulk.items())
    # in hardware time: each run gets its own D (bulk traffic is more demand, so a larger one)
    t_alone, t_mix, t_fifo = (x["dilation"]["metrics"]["iteration_s"]["hardware_s"] for x in (alone, mix, fifo))
    bulk = [b for b in mix["background"] if b["tag"] == "bulk"]
    assert len(bulk) == 16 and all(b["fct_s"] for b in bulk)
    # the bulk really competed: it finished after the AllReduce's first iteration
    assert min(b["fct_s"] for b in bulk) > mix["collective"]["time_s"][0]   # both emulated, one run
    assert t_mix <= 1.2 * t_alone, (t_mix, t_alone)
    assert t_fifo >= 1.3 * t_alone, (t_fifo, t_alone)


def test_pfc_on_a_torus_ring_deadlocks_without_dateline_and_not_with_it(ring_without_dateline, suite_runs):
    # pfc-deadlock-torus's ring and traffic, without the dateline and with it (dateline-torus)
    out, run_dir = ring_without_dateline
    assert out.returncode == 1, out.stdout + out.stderr
    s = summary_of(run_dir)
    assert s["status"] == "deadlock"
    cycle = s["qos"]["pfc"]["deadlock"]["cycle"]
    assert len(cycle) == 8 and all(m["depth_bytes"] > 0 for m in cycle)
    assert (run_dir / "raw" / "deadlock.json").exists()
    ok = suite_runs.get("dateline-torus").summary
    # completes, losslessly, with pauses and no deadlock
    assert ok["status"] in NOTHING_FAILED, ok["problems"]
    assert ok["collective"]["iterations_complete"] == 1
    assert ok["packets"]["lost"] == 0 and ok["packets"]["port_buffer_drops"] == 0, ok["packets"]
    assert ok["qos"]["pfc"]["deadlock"] is None and ok["qos"]["pfc"]["pauses"] > 0


def test_the_pfc_watchdog_breaks_a_deadlock_and_stops_ignoring_a_queue_once_it_drains(suite_runs):
    # pfc-watchdog-torus: the ring that deadlocks without a dateline, with a 100 us watchdog (hardware
    # time): every port paused that long is resumed and the rows pausing it are ignored (their
    # queues may drop instead) until they fall below XON; the traffic then completes, with no
    # deadlock reported
    r = suite_runs.get("pfc-watchdog-torus")
    run_dir, s = r.run_dir, r.summary
    pfc = s["qos"]["pfc"]
    assert s["collective"]["iterations_complete"] == 1 and pfc["deadlock"] is None, s["problems"]
    assert s["packets"]["unaccounted"] == 0
    events = [json.loads(l) for l in (run_dir / "raw" / "pfc_events.jsonl").read_text().splitlines()]
    fired = [e for e in events if e["event"] == "watchdog"]
    assert pfc["watchdog_fired"] == len(fired) > 0
    resumed = {e["port"] for e in events if e["event"] == "resume" and e["reason"] == "watchdog"}
    assert {e["port"] for e in fired} <= resumed
    assert all(e["paused_ns"] >= 0.1e6 * s["dilation"]["factor"] for e in fired)   # 100 us of hardware
    # an ignored row asks again once it drained: restorations, and nothing left paused at the end
    assert any(e["event"] == "watchdog_restored" for e in events)
    assert pfc["pauses"] == pfc["resumes"]


def test_controller_changes_the_policy_at_run_time(tmp_path):
    # incast-ecn whose controller turns marking off 0.25 s into the traffic
    out, run_dir = run_variant(tmp_path, "incast-ecn",
                               '[[policy_changes]]\nat_s = 0.00025\nclass_name = "roce"\nfield = "ecn"\nvalue = false\n')
    assert_ran(out)
    ctl = [json.loads(l) for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in ctl]
    assert "qos_policy_sent" in kinds and "qos_traffic_started" in kinds and "qos_telemetry" in kinds
    (changed,) = [e for e in ctl if e["event"] == "qos_policy_changed"]
    assert changed["field"] == "ecn" and changed["value"] is False and changed["queues_changed"] > 0
    started = next(e["t_ns"] for e in ctl if e["event"] == "qos_traffic_started")
    # 0.25 ms of hardware time, dilated
    at_ns = 0.00025e9 * summary_of(run_dir)["dilation"]["factor"]
    assert at_ns <= changed["t_ns"] - started < at_ns + 0.05e9
    agent = [json.loads(l) for l in (run_dir / "raw" / "pfc_events.jsonl").read_text().splitlines()]
    (applied,) = [e for e in agent if e["event"] == "policy_applied" and e["kind"] == "update"]
    # marks before the change, none after it took effect (the first sample after it may still
    # count marks made between the last sample before it and the change itself)
    tel = pd.read_parquet(run_dir / "queues.parquet")
    port = tel[(tel["port"] == "leaf0-eth1") & (tel["class"] == 1)].sort_values("t_ns")
    before = port[port["t_ns"] <= applied["t_ns"]]["mark_pkts"].max()
    after = port[port["t_ns"] > applied["t_ns"] + 1_000_000]["mark_pkts"]
    assert before > 0 and len(after) and (after == after.iloc[0]).all()


def test_a_classs_weight_and_buffer_change_at_run_time(tmp_path):
    # incast-ecn's leaf under weighted scheduling, marking off: h0_1..h0_3's incast (roce) and
    # h0_4's bulk (the only bulk into h0_0) meet at h0_0's port, both backlogged, 1:1. Then
    # the controller gives roce weight 8 on every port and NIC, and grows bulk's buffer from the
    # 256 KiB the port was built with to 4 MiB.
    out, run_dir = run_variant(
        tmp_path, "incast-ecn",
        '[[policy_changes]]\nat_s = 0.00006\nclass_name = "roce"\nfield = "weight"\nvalue = 8\n'
        '[[policy_changes]]\nat_s = 0.0001\nclass_name = "bulk"\nfield = "buffer_bytes"\nvalue = "4MiB"\n',
        "qos.scheduling=weighted", "qos.ecn=false", "workload.senders=3", "workload.not_ect_senders=0",
        "workload.bulk_shift=1", "workload.bulk_bytes=2MiB")
    s = summary_of(run_dir)
    # incast-ecn's own expectations fail, as they must with marking off and bulk's 256 KiB dropping
    # (recovered by go-back-N); nothing else does
    assert out.returncode == 1 and s["status"] == "regressed", out.stdout + out.stderr
    assert sorted(p.split(" (")[0] for p in s["problems"]) == [
        "expectation failed: packets.lost == 0", "expectation failed: qos.ecn.marked > 0"], s["problems"]
    assert s["collective"]["iterations_complete"] == 3 and all(b["fct_s"] for b in s["background"])
    ctl = [json.loads(l) for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    changed = [e for e in ctl if e["event"] == "qos_policy_changed"]
    assert [(e["field"], e["value"]) for e in changed] == [("weight", 8), ("buffer_bytes", 4 << 20)]
    agent = [json.loads(l) for l in (run_dir / "raw" / "pfc_events.jsonl").read_text().splitlines()]
    reweighted, regrown = [e for e in agent if e["event"] == "policy_applied" and e["kind"] == "update"]
    # roce's leaf on each of the 12 link ends (the leaf's 6 ports, the spine's one, 5 host NICs);
    # bulk's queue on the 7 switch ports
    assert reweighted["reweighted"] == 12 and regrown["reweighted"] == 0 and regrown["queues"] == 7
    tel = pd.read_parquet(run_dir / "queues.parquet")
    port = tel[tel["port"] == "leaf0-eth1"]
    roce, bulk = (port[port["class"] == c].set_index("t_ns").sort_index() for c in (1, 2))
    both = pd.merge(roce, bulk, left_index=True, right_index=True, suffixes=("_roce", "_bulk"))
    # what each class drained over the sample spans in which both were backlogged throughout
    busy = (both["depth_bytes_roce"] > 0) & (both["depth_bytes_bulk"] > 0)
    spans = pd.DataFrame({"t_ns": both.index[1:], "busy": (busy.values[1:] & busy.values[:-1]),
                          "roce": np.diff(both["deq_bytes_roce"].astype(np.int64).values),
                          "bulk": np.diff(both["deq_bytes_bulk"].astype(np.int64).values)})
    spans = spans[spans["busy"]]
    before = spans[spans["t_ns"] < reweighted["t_ns"]]
    after = spans[spans["t_ns"] > reweighted["t_ns"] + 1_000_000]
    assert len(before) >= 20 and len(after) >= 20, (len(before), len(after))
    share_before = before["roce"].sum() / before["bulk"].sum()
    share_after = after["roce"].sum() / after["bulk"].sum()
    # deficit round robin with quanta of 1 and 8 frames: 1.000-1.014 before and 7.39-7.78 after in
    # 5 runs (2026-12-05, D 6300-8000)
    assert 0.9 <= share_before <= 1.1, share_before
    assert 7.0 <= share_after <= 8.5, share_after
    # bulk held to the 256 KiB it was built with until the change, then past the kernel queue's
    # old depth (its buffer and four frames) within the new one
    old_kernel_limit = (256 << 10) + 4 * (9000 + 14)
    held = bulk[bulk.index < regrown["t_ns"]]["depth_bytes"].max()
    grown = bulk[bulk.index > regrown["t_ns"]]["depth_bytes"].max()
    assert held <= 256 << 10 and old_kernel_limit < grown <= 4 << 20, (held, grown)
    assert bulk[bulk.index < regrown["t_ns"]]["drop_pkts"].max() > 0
