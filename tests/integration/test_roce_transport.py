"""The RoCE transport on real runs (root): DCQCN holds an incast's bottleneck queue near the
marking threshold and shares the port fairly where the same incast without congestion control
fills the buffer; go-back-N completes every message over a fabric that drops; captures decode as
RoCE in tshark."""
import json
import subprocess
from collections import defaultdict

import pandas as pd
import pytest
from scapy.contrib.roce import BTH
from scapy.utils import rdpcap

from helpers import NOTHING_FAILED, assert_ran, run_dirs, run_testbed, summary_of

pytestmark = pytest.mark.root

K_BYTES = 100_000           # dcqcn-incast's step-marking threshold
BUFFER_BYTES = 16 << 20     # and its RoCE class buffer


def run_one(tmp_path, name, *sets):
    # no report: these tests read the run's records, and matplotlib's seconds a run add up
    args = [a for s in (*sets, "run.report=false") for a in ("--set", s)]
    out = run_testbed(tmp_path, "run", name, *args)
    assert_ran(out)
    run_dir = run_dirs(tmp_path)[-1]
    return run_dir, summary_of(run_dir)


# Without congestion control the same incast with twice the bytes: enough to fill the buffer (the
# 3 MiB a sender of the 8:1 case sends peaked the queue at 12 MB). DCQCN (HPCC's dcqcn_paper) holds
# the median near K; the peaks of its sawtooth (the queue's p99) and its fairness depend on how many
# senders overshoot together: 2:1 stays within 1.5 K and 3 K with Jain's index >= 0.95 (6 runs: median 0,
# p99 116 KB, Jain 1.0 measured), 8:1 within dcqcn-incast's own expectations (from 23 runs: median
# 29-295 KB, p99 1.26-1.79 MB, Jain 0.906-1.0; the least or most plus 1.5 x the range: 4.28 K,
# 20.5 K and 0.86; the scenario's file)
@pytest.mark.parametrize("senders,per_sender,per_sender_off,p50_k,p99_k,jain",
                         [(2, "10MiB", "20MiB", 1.5, 3, 0.95), (8, "3MiB", "6MiB", 4.28, 20.5, 0.86)])
def test_dcqcn_holds_the_queue_near_k_and_shares_fairly_where_no_cc_fills_the_buffer(tmp_path, suite_runs, senders,
                                                                                  per_sender, per_sender_off, p50_k,
                                                                                  p99_k, jain):
    if (senders, per_sender) == (8, "3MiB"):   # the scenario as shipped: the session's suite run
        r = suite_runs.get("dcqcn-incast")
        run_dir, s = r.run_dir, r.summary
    else:
        sets = (f"workload.senders={senders}", f"workload.bytes_per_rank={per_sender}")
        run_dir, s = run_one(tmp_path / "dcqcn", "dcqcn-incast", *sets)
    tr = s["transport"]
    assert s["status"] in NOTHING_FAILED and s["packets"]["lost"] == 0 and s["qos"]["queues"]["buffer_drops"] == 0
    assert tr["cc"] == "dcqcn" and tr["cnps_sent"] > 0 and tr["rate_cuts"] > 0
    assert tr["dcqcn"]["reference"] == "HPCC dcqcn_paper" and tr["dcqcn"]["overrides"] == []
    assert tr["agents"]["receiver_socket_drops"] == 0
    st = tr["steady_state"]
    assert st["flows"] == senders, st
    # fairness is a performance figure, judged (as the harness judges one) only on a run the
    # emulation ran faithfully: on unfaithful runs of the 2:1 case, with the data plane late for
    # the DCQCN-held queue pairs, Jain's index ranged 0.87-1.0 (8 runs, bench/README.md)
    if s["fidelity"]["valid"]:
        assert st["jain_index"] >= jain, st
    bq = st["bottleneck_queue"]
    assert (bq["port"], bq["class_name"]) == ("leaf0-eth1", "roce")
    assert bq["p50_bytes"] <= p50_k * K_BYTES and bq["p99_bytes"] <= p99_k * K_BYTES, bq
    link_mbps = s["dilation"]["emulated"]["link_mbps"]
    assert st["total_mbps"] >= 0.75 * link_mbps, st  # the queue is short because senders slowed, not starved
    # every queue pair's rate trajectory is recorded: each was cut and recovered
    ev = pd.read_parquet(run_dir / "qp_events.parquet")
    rates = ev[ev["event"].str.startswith("rate_")]
    assert set(rates["flow"]) == set(range(senders))
    assert (rates["rate_bps"] <= link_mbps * 1e6 + 1).all() and (rates["rate_bps"] > 0).all()
    assert set(ev.loc[ev["event"] == "cnp_received", "flow"]) == set(range(senders))

    # without congestion control the scenario's expectations, which are DCQCN's outcome, fail: the
    # run regresses (exit 1), as make sabotage's dcqcn-off must
    out = run_testbed(tmp_path / "none", "run", "dcqcn-incast", "--set", f"workload.senders={senders}",
                      "--set", f"workload.bytes_per_rank={per_sender_off}", "--set", "transport.cc=none")
    assert out.returncode == 1, out.stdout[-6000:] + out.stderr[-3000:]
    off = summary_of(run_dirs(tmp_path / "none")[-1])
    broken = {e["metric"] for e in off["expectations"] if e["ok"] is False}
    assert {"transport.cnps_sent", "transport.rate_cuts"} <= broken, off["expectations"]
    bq_off = off["transport"]["steady_state"]["bottleneck_queue"]
    assert off["status"] in ("regressed", "failed") and off["transport"]["cnps_sent"] == 0
    # without it the queue runs up to the buffer's limit (its peak over the run: the steady window
    # of an incast without CC can close while the queue drains, as in a CI run of the 8:1 case whose
    # window peaked at 14.2 MB of the 16.8 MB the run reached, dropping 6702 frames) and sits far
    # above K through the steady state
    assert bq_off["run_max_bytes"] >= 0.9 * BUFFER_BYTES and bq_off["p50_bytes"] >= 10 * K_BYTES, bq_off
    assert off["qos"]["queues"]["buffer_drops"] > 0


def test_go_back_n_completes_every_message_with_every_byte_over_a_dropping_fabric(suite_runs):
    r = suite_runs.get("lossy-fabric")
    run_dir, s = r.run_dir, r.summary
    tr, p = s["transport"], s["packets"]
    assert s["status"] in NOTHING_FAILED and p["unaccounted"] == 0
    assert p["lost"] > 0 and s["qos"]["queues"]["buffer_drops"] > 0
    msgs = pd.read_parquet(run_dir / "messages.parquet")
    assert msgs["complete"].all() and (msgs["recv_bytes"] == msgs["bytes"]).all()
    # the sender's work completion comes after the last byte arrived; the FCT from the wire
    # (first departure to last arrival) lies within release-to-arrival
    assert msgs["wc_ns"].notna().all() and (msgs["wc_ns"] >= msgs["duration_ns"]).all()
    assert msgs["fct_ns"].notna().all() and (msgs["fct_ns"] <= msgs["duration_ns"]).all()
    assert tr["messages_with_wrong_bytes"] == 0 and tr["icrc_errors"] == 0
    # retransmissions counted three ways agree: per packet, per queue pair, in the summary
    pkts = pd.read_parquet(run_dir / "packets.parquet")
    flows = pd.read_parquet(run_dir / "flows.parquet")
    assert tr["retransmitted_packets"] == int(pkts["retransmit"].sum()) == int(flows["retransmitted_packets"].sum()) > 0
    assert tr["retransmitted_bytes"] == int(pkts.loc[pkts["retransmit"], "bytes"].sum())
    assert tr["naks"] > 0 and tr["go_backs"] > 0
    ev = pd.read_parquet(run_dir / "qp_events.parquet")
    assert {"nak_sent", "nak_received", "go_back_nak"} <= set(ev["event"])


def tshark_fields(pcap, *fields):
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "infiniband", "-T", "fields",
                          *[a for f in fields for a in ("-e", f)]], capture_output=True, text=True, check=True)
    return [line.split("\t") for line in out.stdout.splitlines() if line]


def test_captures_decode_as_rocev2_in_tshark(tmp_path):
    run_dir, s = run_one(tmp_path, "dcqcn-incast", "workload.senders=2", "workload.bytes_per_rank=2MiB",
                         "run.capture=true")
    plan = json.loads((run_dir / "raw" / "plan.json").read_text())
    cap = json.loads((run_dir / "manifest.json").read_text())["capture"]
    assert set(cap) == {h["name"] for h in plan["hosts"]}
    for c in cap.values():
        assert c["dropped_by_kernel"] == 0 and c["captured"] == c["received_by_filter"] > 0, c
    receiver = plan["flows"][0]["dst"]
    # data packets: one 2 MiB message per queue pair as RC SEND FIRST (opcode 0), MIDDLE (1) and
    # LAST (2), PSNs 0, 1, 2, ... in order
    psns, ops = defaultdict(list), defaultdict(list)
    for opcode, qp, psn in tshark_fields(run_dir / "pcap" / f"{receiver}.pcap", "infiniband.bth.opcode",
                                         "infiniband.bth.destqp", "infiniband.bth.psn"):
        if opcode in ("0", "1", "2", "4"):
            psns[int(qp, 16)].append(int(psn))
            ops[int(qp, 16)].append(int(opcode))
    flows = pd.read_parquet(run_dir / "flows.parquet")
    assert sorted(psns) == sorted(0x100 + f for f in flows["flow"])
    for qp, seq in psns.items():
        assert seq == list(range(512)), qp
        assert ops[qp] == [0] + [1] * 510 + [2], qp
    # CNPs (opcode 0x81) reach each sender for its own queue pair, with BECN set
    for f in plan["flows"]:
        rows = tshark_fields(run_dir / "pcap" / f"{f['src']}.pcap", "infiniband.bth.opcode", "infiniband.bth.destqp",
                             "ip.dsfield.dscp")
        cnps = [int(qp, 16) for op, qp, _ in rows if op == "129"]
        # CNPs and ACKs travel in the control class (DSCP 48), ahead of data
        assert {dscp for op, _, dscp in rows if op in ("129", "17")} == {"48"}
        got = int(flows.loc[flows["flow"] == f["id"], "cnps_received"].iloc[0])
        assert got > 0 and cnps == [0x100 + f["id"]] * got
        becn = [p[BTH].becn for p in rdpcap(str(run_dir / "pcap" / f"{f['src']}.pcap"))
                if BTH in p and p[BTH].opcode == 0x81]
        assert becn == [1] * got


def behind_without_work(run_dir) -> tuple[int, int]:
    """(spans, ns) the data plane recorded as a queue pair behind its DCQCN rate at a time that
    queue pair had nothing to send: no message of it released and not yet all sent."""
    from testbed import records
    gaps = records.read(run_dir / "raw" / "nic_gaps.bin", records.NIC_GAP)
    gaps = gaps[gaps["kind"] == 1]
    msgs = pd.read_parquet(run_dir / "messages.parquet")
    spans, idle_ns = 0, 0
    for g in gaps:
        mine = msgs[msgs["flow"] == g["flow"]]
        if not ((mine["release_ns"] <= g["start_ns"]) & (mine["last_tx_ns"] >= g["start_ns"])).any():
            spans += 1
            idle_ns += int(g["end_ns"] - g["start_ns"])
    return spans, idle_ns


def test_a_queue_pair_idle_between_its_messages_is_not_counted_behind_its_rate(tmp_path):
    # DCQCN leaves each sender's queue pair below the line rate at the end of an iteration, and the
    # next iteration's message comes only once every sender's has completed. That wait is no
    # lateness of the data plane; counted as such, an all-to-all's hosts were judged to idle with
    # work waiting and the run could not keep up (2026-12-06, docs/ecn-tuning.md)
    run_dir, s = run_one(tmp_path, "dcqcn-incast", "workload.senders=2", "workload.bytes_per_rank=1MiB",
                         "workload.iterations=3", "run.report=false")
    assert s["status"] in NOTHING_FAILED and s["packets"]["retransmitted"] == 0
    assert s["transport"]["rate_cuts"] > 0 and s["collective"]["iterations_complete"] == 3
    msgs = pd.read_parquet(run_dir / "messages.parquet")
    assert msgs.groupby("flow")["iteration"].nunique().eq(3).all()   # each queue pair idles between
    assert behind_without_work(run_dir) == (0, 0)
