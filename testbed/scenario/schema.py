"""The scenario schema: every field of a scenario file, its unit (in its name), default, range and
meaning, declared once (spec()), as frozen dataclasses; the pure fabric a [fabric] table describes.
docs/scenario-reference.md is generated from it (testbed.reference)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from topologies.fattree import fattree
from topologies.leafspine import leafspine
from topologies.model import Fabric
from topologies.torus import torus

# 2: the file describes the hardware fabric (rates in Gb/s, every time in hardware time) and runs
# dilated by run.dilation; 1: rates in emulated Mb/s, read as hardware at D = 1 (docs/dilation.md)
SCENARIO_VERSION = 2
READABLE_VERSIONS = (1, 2)


def spec(default, doc: str, kind: str, lo=None, hi=None, choices=None, length=None):
    """A scenario field: kind is int, float, str, bytes (int or "4MiB"), bool or int_list."""
    meta = dict(doc=doc, kind=kind, lo=lo, hi=hi, choices=choices, length=length)
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=meta)
    return field(default=default, metadata=meta)


# The most a switch queue may buffer, in a file or set at run time: the switch ports' kernel
# queues are built this deep (testbed.fabric.ports), so a buffer grown at run time is the port
# program's limit alone.
MAX_BUFFER_BYTES = 64 << 20


@dataclass(frozen=True)
class FabricSpec:
    topology: str = spec("torus", "fabric kind", "str", choices=("torus", "fattree", "leafspine"))
    dims: tuple = spec((4, 4), "torus: size per dimension (2 or 3 numbers)", "int_list", 1, 16, length=(2, 3))
    hosts_per_switch: int = spec(1, "torus: hosts attached to each switch", "int", 1, 15)
    k: int = spec(4, "fattree: switch radix k (even)", "int", 2, 16)
    leaves: int = spec(4, "leafspine: leaf switches", "int", 1, 64)
    spines: int = spec(2, "leafspine: spine switches", "int", 1, 32)
    hosts_per_leaf: int = spec(4, "leafspine: hosts per leaf", "int", 1, 64)
    uplink_bw_mbps: float = spec(0.0, "version 1, leafspine: leaf-spine link rate, Mb/s (0: bw_mbps)", "float",
                                 0.0, 10000.0)
    bw_mbps: float = spec(100.0, "version 1: rate of every (host) link, Mb/s (a run reads it as the emulated "
                          "rate, hardware rate / run.dilation)", "float", 1.0, 10000.0)
    bw_gbps: float = spec(100.0, "version 2: the hardware rate of every (host) link, Gb/s; the emulation runs it "
                          "at bw_gbps / run.dilation", "float", 0.001, 10000.0)
    uplink_bw_gbps: float = spec(0.0, "version 2, leafspine: the hardware leaf-spine link rate, Gb/s (0: bw_gbps)",
                                 "float", 0.0, 10000.0)
    link_delay_ns: float = spec(0.0, "propagation delay of every link, ns of hardware time (emulated dilated, at "
                                "the receiving NIC, per path: docs/dilation.md)", "float", 0.0, 1e9)
    switch_latency_ns: float = spec(0.0, "forwarding latency of every switch, ns of hardware time (emulated like "
                                    "link_delay_ns)", "float", 0.0, 1e9)
    mtu_bytes: int = spec(9000, "MTU of every veth, bytes", "int", 1500, 9000)
    queue_limit_bytes: int = spec(262144, "default buffer of each class of every egress port, bytes", "bytes", 4096,
                                  MAX_BUFFER_BYTES)
    htb_burst_bytes: int = spec(0, "HTB burst and cburst of every shaped switch port, bytes; 0: two frames of "
                                "workload.payload_bytes, as a port that serialises at line rate sends back to back "
                                "(a larger bucket lets a port send above its rate after an idle spell)", "bytes",
                                0, 1 << 20)
    nic_burst_frames: int = spec(2, "HTB burst and cburst of every host NIC, in frames of workload.payload_bytes: "
                                 "a NIC serialises at line rate, so after an idle period it releases no more "
                                 "than this back to back", "int", 1, 256)


@dataclass(frozen=True)
class ControllerSpec:
    app: str = spec("proactive_routing", "the routing app: proactive_routing (controllers/), or none when an app of "
                    "controller.apps installs the routes and writes routes_ready (docs/controller-apps.md)", "str",
                    choices=("proactive_routing", "none"))
    apps: tuple = spec((), "os-ken apps of your own, as .py files (relative to the scenario file's folder), run "
                       "beside the built-in ones; the run waits for each one's app_ready (docs/controller-apps.md)",
                       "str_list")
    routing: str = spec("dimension_order", "route algorithm (dimension_order: torus only; ecmp: select "
                        "groups hashing the 5-tuple; dmodk: one static path per destination, spread by "
                        "destination index, the fat-tree's classic routing)", "str",
                        choices=("dimension_order", "shortest_path", "ecmp", "dmodk"))
    dateline: bool = spec(False, "torus: dateline virtual channels for the workload's class", "bool")
    survive_controller_loss: bool = spec(False, "if the controller dies, let the switches keep forwarding on "
                                         "their installed rules and finish the run (else stop it at once)", "bool")
    vc1_dscp: int = spec(27, "DSCP that carries the workload's class on virtual channel 1", "int", 0, 63)
    tenant_isolation: bool = spec(True, "[[jobs]] of two or more tenants: each tenant's hosts reach only their "
                                  "own tenant's (one 802.1Q VLAN per tenant, pushed at the edge switch, matched by "
                                  "every route, popped toward the host); false removes it (what the isolation "
                                  "check must catch)", "bool")
    reroute: bool = spec(True, "when a link goes down (or comes back), recompute the routes without it and "
                         "install the ones that changed; false leaves every route as installed, into the failed "
                         "link (what a regression test of failover must catch)", "bool")
    remote: str = spec("", "an OpenFlow controller you started yourself, as IP:PORT (e.g. 127.0.0.1:6653): the switches "
                       "connect to it and none of the testbed's routing runs; the run waits until the switches' flow "
                       "tables forward every host pair the workload uses, after a warm-up frame each way for a "
                       "reactive controller (testbed/run/remote.py); the QoS app still sends the port policy to the "
                       "switch agent (docs/controller-apps.md)", "str")
    ecn_tuning: str = spec("off", "ECN tuning in the loop: adaptive runs the ecn_tuning app (controllers/), which "
                           "reads the switch agent's telemetry and moves every marking class's Kmin, Kmax and Pmax "
                           "within the ecn_tuning_* bounds toward queue p99 <= ecn_tuning_queue_p99_bytes at "
                           "utilisation >= ecn_tuning_utilisation on the ports that mark (docs/ecn-tuning.md)", "str",
                           choices=("off", "adaptive"))
    ecn_tuning_queue_p99_bytes: int = spec(200_000, "adaptive: the queue budget, the 99th percentile of the depth ECN-"
                                           "capable frames find at a marking port, bytes", "bytes", 1000, 64 << 20)
    ecn_tuning_utilisation: float = spec(0.95, "adaptive: the least share of its rate a marking port must send",
                                         "float", 0.1, 1.0)
    ecn_tuning_kmin_bytes: tuple = spec((10_000, 1_000_000), "adaptive: the bounds of Kmin, bytes [lo, hi]",
                                        "int_list", 1, 64 << 20, length=(2, 2))
    ecn_tuning_kmax_bytes: tuple = spec((10_000, 2_000_000), "adaptive: the bounds of Kmax, bytes [lo, hi]",
                                        "int_list", 1, 64 << 20, length=(2, 2))
    ecn_tuning_pmax_min: float = spec(0.01, "adaptive: the least Pmax", "float", 0.0, 1.0)
    ecn_tuning_pmax_max: float = spec(1.0, "adaptive: the most Pmax", "float", 0.0, 1.0)
    ecn_tuning_window_us: float = spec(200.0, "adaptive: how long the app looks before it judges, in hardware time "
                                       "(at least the switch agent's report period, 100 ms of wall-clock time)",
                                       "float", 1.0, 1e6)
    ecn_tuning_hysteresis_windows: int = spec(2, "adaptive: windows in a row that must ask for the same move before "
                                              "the app makes it", "int", 1, 100)
    qos_app: str = spec("qos_policy", "os-ken app in controllers/ that owns the port QoS policy (sends it to "
                        "the switch agent, receives its telemetry and events, changes it at run time)",
                        "str", choices=("qos_policy",))


@dataclass(frozen=True)
class WorkloadSpec:
    type: str = spec("ring_allreduce", "traffic: a collective (ring_allreduce, halving_doubling: Rabenseifner's "
                     "AllReduce, torus2d_allreduce: reduce-scatter along X, AllReduce along Y, all-gather along X, "
                     "allgather, reducescatter: rings, alltoall), pipeline (1F1B training steps of pp stages, "
                     "dp replicas with a DP AllReduce per stage), ddp (data parallelism with gradient buckets, "
                     "each bucket's ring AllReduce overlapped with the backward pass), parameter_server (workers push gradient shards "
                     "to ps_servers servers and pull the parameters back), chakra or simai (replay "
                     "workload.trace), shift (rank r sends to rank r + shift) or incast (senders hosts send to "
                     "receiver at once), or jobs (the scenario's [[jobs]], each its own workload on its own hosts)",
                     "str",
                     choices=("ring_allreduce", "halving_doubling", "torus2d_allreduce", "allgather", "reducescatter",
                              "alltoall", "pipeline", "ddp", "parameter_server", "chakra", "simai", "shift", "incast",
                              "jobs"))
    trace: str = spec("", "chakra: a folder of <name>.<rank>.et files; simai: a SimAI/ASTRA-sim text workload "
                      "(relative to the project root)", "str")
    comm_groups: str = spec("", "chakra: ASTRA-sim's communicator-group configuration, a JSON object from each "
                            "process group's name to its ranks, for COMM_COLL nodes with a pg_name (default: "
                            "comm_group.json in the trace folder, if there is one; relative to the project root)", "str")
    collective_algorithm: str = spec("ring", "chakra and simai: how their collectives run (ring, or "
                                     "halving_doubling for AllReduce)", "str", choices=("ring", "halving_doubling"))
    placement: str = spec("fabric", "rank order over the hosts: fabric (a ring that follows the fabric: a snake "
                          "through a torus, fabric order elsewhere; a torus's own grid for torus2d_allreduce), "
                          "hosts (the fabric's host order) or random (shuffled with run.seed)", "str",
                          choices=("fabric", "hosts", "random"))
    grid_x: int = spec(0, "torus2d_allreduce: ranks per row X (0: the torus's first dimension with placement "
                       "fabric, else the largest divisor of the rank count up to its square root)", "int", 0, 4096)
    shift: int = spec(1, "shift: destination offset in rank order", "int", 1, 4095)
    receiver: str = spec("", "incast: the receiving host (default: the first host)", "str")
    senders: int = spec(15, "incast: number of senders (the hosts after the receiver, in fabric order)",
                        "int", 1, 4095)
    not_ect_senders: int = spec(0, "incast: this many of the senders (the last ones) send Not-ECT packets",
                                "int", 0, 4095)
    ect: bool = spec(True, "data packets are ECN-capable (ECT(0)), as RoCEv2 NICs send them", "bool")
    bulk_shift: int = spec(0, "background bulk traffic: every host also sends bulk_bytes to the host this "
                           "far ahead in fabric order (0: none)", "int", 0, 4095)
    bulk_bytes: int = spec(8 << 20, "bulk: bytes per host", "bytes", 1024, 1 << 30)
    bulk_dscp: int = spec(0, "bulk: DSCP of its packets", "int", 0, 63)
    victim: str = spec("", "a victim flow <src host>><dst host> (e.g. h3_4>h2_4) sending victim_bytes at "
                       "once, in the workload's class", "str")
    victim_bytes: int = spec(1 << 20, "victim: bytes", "bytes", 1024, 1 << 30)
    bytes_per_rank: int = spec(4 << 20, "collective buffer per rank (AllReduce and reduce-scatter input, "
                               "all-gather output, all-to-all send buffer), bytes", "bytes", 1024, 1 << 30)
    iterations: int = spec(3, "collective iterations (a barrier separates them)", "int", 1, 1000)
    payload_bytes: int = spec(4096, "RoCE payload per packet (path MTU), bytes", "int", 256, 8900)
    pp: int = spec(4, "pipeline: stages (tp hosts each)", "int", 2, 1024)
    dp: int = spec(1, "pipeline: data-parallel replicas of the pipeline (a DP AllReduce per stage when > 1)",
                   "int", 1, 1024)
    tp: int = spec(1, "pipeline: tensor-parallel hosts per stage: each holds 1/tp of the stage's activations and "
                   "weights, and every layer's two blocks AllReduce their output over the tp hosts, forward and "
                   "backward (TP inside a server, over NVLink, is not on the fabric: give its hosts as one)",
                   "int", 1, 64)
    tp_sequence_parallel: bool = spec(False, "pipeline: Megatron's sequence parallelism: each block's TP "
                                      "AllReduce becomes an all-gather before it and a reduce-scatter after it",
                                      "bool")
    ep: int = spec(1, "pipeline: expert-parallel hosts: a MoE layer's experts spread over ep hosts of the same "
                   "stage and TP rank in consecutive replicas (ep divides dp), its tokens dispatched and combined "
                   "by all-to-alls over them, forward and backward", "int", 1, 1024)
    moe_every: int = spec(0, "pipeline: layers 0, k, 2k, ... of the model (numbered across stages) are MoE, their "
                          "MLP block its experts (Megatron's moe_layer_freq; 0: no MoE)", "int", 0, 1024)
    moe_topk: int = spec(2, "pipeline: experts each token is routed to (sets the all-to-alls' bytes)", "int", 1, 64)
    num_experts: int = spec(0, "pipeline: experts of a MoE layer (Megatron's num_experts), num_experts / ep whole "
                            "ones on each EP host, each an MLP of 8 h^2 weights split over TP; their gradients are "
                            "AllReduced over the expert-data-parallel group (the dp / ep replicas holding the same "
                            "experts), the dense ones over all dp (0: one expert per EP host)", "int", 0, 4096)
    rank_order: str = spec("tp-dp-pp", "pipeline: how the TP, DP and PP groups nest over the placed ranks, innermost "
                           "first: Megatron's default tp-dp-pp (a TP group on consecutive ranks, the replicas of a "
                           "stage next, the stages outermost) or tp-pp-dp (a replica's stages on consecutive ranks)",
                           "str", choices=("tp-dp-pp", "tp-pp-dp"))
    microbatches: int = spec(8, "pipeline: micro-batches per replica and step", "int", 1, 4096)
    micro_batch_size: int = spec(1, "pipeline: sequences per micro-batch", "int", 1, 4096)
    seq_len: int = spec(2048, "pipeline: tokens per sequence", "int", 1, 1 << 20)
    hidden: int = spec(4096, "pipeline: hidden size", "int", 1, 1 << 17)
    layers_per_stage: int = spec(4, "pipeline: transformer layers per stage (12 hidden^2 weights each)",
                                 "int", 1, 1024)
    bytes_per_element: int = spec(2, "pipeline: bytes per activation and gradient element (2: bf16)", "int", 1, 8)
    fwd_compute_ms: float = spec(10.0, "pipeline: forward compute per micro-batch and stage; ddp: a rank's whole "
                                 "forward, ms", "float", 0.0, 1e6)
    bwd_compute_ms: float = spec(20.0, "pipeline: backward compute per micro-batch and stage; ddp: a rank's whole "
                                 "backward, ms", "float", 0.0, 1e6)
    ddp_first_bucket_bytes: int = spec(1 << 20, "ddp: the first gradient bucket's bytes (it holds the last "
                                       "layers, ready first; PyTorch DDP's 1 MiB)", "bytes", 1, 1 << 40)
    ddp_bucket_cap_bytes: int = spec(25 << 20, "ddp: every later bucket's bytes, the last holding what is left "
                                     "(PyTorch DDP's bucket_cap_mb, 25 MiB)", "bytes", 1, 1 << 40)
    ddp_overlap: bool = spec(True, "ddp: each bucket's AllReduce starts once the backward has produced it, and "
                             "the next forward waits only for the bucket it needs (false: after the whole "
                             "backward, and the next forward waits for every bucket)", "bool")
    bytes_scale: float = spec(1.0, "pipeline, chakra, simai: every transfer's size is multiplied by this (fit a "
                              "real model to the emulated links; results state it)", "float", 1e-9, 1e6)
    time_scale: float = spec(1.0, "pipeline, chakra, simai: every compute time is multiplied by this", "float",
                             1e-9, 1e6)
    ps_servers: int = spec(1, "parameter_server: server shards (one host each); a worker's bytes_per_rank of "
                           "gradients and parameters split evenly over them", "int", 1, 1024)
    ps_workers: int = spec(0, "parameter_server: workers (0: every host not a dedicated server)", "int", 0, 4096)
    ps_placement: str = spec("dedicated", "parameter_server: servers on hosts of their own, after the workers "
                             "in rank order (dedicated), or on the first workers' hosts (colocated: their own "
                             "shard's push and pull stay on the host)", "str", choices=("dedicated", "colocated"))
    ps_sync: str = spec("bsp", "parameter_server: bsp (a shard is updated once every worker's push is in, and a "
                        "worker's next iteration waits for every updated shard) or async (each push updated and "
                        "answered alone; a worker waits only for its own pulls)", "str", choices=("bsp", "async"))
    ps_compute_ms: float = spec(20.0, "parameter_server: a worker's compute per iteration (forward and backward), "
                                "ms", "float", 0.0, 1e6)
    ps_aggregate_ms: float = spec(1.0, "parameter_server: a server's aggregation of one update of its shard, ms",
                                  "float", 0.0, 1e6)
    dscp: int = spec(26, "DSCP of data packets", "int", 0, 63)


@dataclass(frozen=True)
class TransportSpec:
    reliability: str = spec("go_back_n", "per queue pair: go_back_n (RoCE RC: ACK/NAK, go-back-N, "
                            "timeout) or none (a lost packet stalls its message)", "str",
                            choices=("go_back_n", "none"))
    rto_ms: float = spec(200.0, "retransmission timeout, ms (version 2: of hardware time, default 1): keep it "
                         "above the worst queueing delay (hops x queue_limit_bytes x 8 / bw)", "float", 1e-6, 10000.0)
    nak_interval_us: float = spec(500.0, "go_back_n: a receiver NAKs a gap again when a frame past it arrives "
                                  "this long after its last NAK, as HPCC's does (its m_nack_interval, 500 us): "
                                  "a lost NAK or resend then waits this, not rto_ms (version 2: hardware "
                                  "time); 0: one NAK per gap", "float", 0.0, 1e7)
    ack_every_packets: int = spec(16, "coalescing: one ACK per this many packets (and per message end)",
                                  "int", 1, 4096)
    ack_dscp: int = spec(48, "DSCP of ACK, NAK and CNP packets (a high-priority class)", "int", 0, 63)
    cc: str = spec("none", "congestion control per queue pair: none (line rate) or dcqcn (receivers send "
                   "CNPs for CE-marked packets, senders run DCQCN's rate machine and pace to its rate; "
                   "parameters in [dcqcn])", "str", choices=("none", "dcqcn"))
    verify_icrc: bool = spec(False, "receivers check every data packet's ICRC and drop bad ones, as a RoCE "
                             "NIC does (the receiver then copies whole frames instead of their headers)", "bool")
    channels: int = spec(1, "queue pairs per (source, destination, traffic kind): messages between the same "
                         "two hosts are spread over them in turn, as NCCL's channels are; each is in order",
                         "int", 1, 64)
    nic_lead_us: float = spec(40000.0, "frames the data plane keeps queued in each host NIC class, as time at "
                              "the link rate, us of wall clock: the kernel's shaper serialises them at line rate "
                              "while the data plane is off the CPU (1-4 ms on a quiet VM, 15-55 ms on one losing "
                              "10-36% of its CPU to steal); never less than four frames at the link rate, within "
                              "the class buffer, and with DCQCN within a quarter of its rate-increase period",
                              "float", 0.0, 1e6)
    engine_batch_us: float = spec(200.0, "the data plane serves its sockets at most once per this interval, us: "
                                  "a longer one costs less CPU per packet and delays reactions (ACKs, CNPs, "
                                  "releasing a dependent message) by up to as much", "float", 0.0, 10000.0)


# The one DCQCN configuration the testbed ships: HPCC's `dcqcn_paper` (simulation/run.py of
# alibaba-edu/High-Precision-Congestion-Control), the published DCQCN parameters as HPCC's
# Mellanox-model reaction point runs them. Its rate steps scale with the link (5 and 50 x Gb/s / 25,
# in Mb/s); its timers do not.
DCQCN_REFERENCE = "HPCC dcqcn_paper"


def dcqcn_reference_rates(ref_gbps: float) -> dict:
    """HPCC dcqcn_paper's rate steps for a link of ref_gbps: R_AI = 5 x bw / 25, R_HAI = 50 x bw / 25 Mb/s."""
    return {"rai_mbps": 5 * ref_gbps / 25, "rhai_mbps": 50 * ref_gbps / 25}


@dataclass(frozen=True)
class DcqcnSpec:
    """DCQCN (Zhu et al., SIGCOMM 2015, as HPCC's rdma-hw.cc runs it) given for a reference link rate.
    Every default is HPCC's `dcqcn_paper` configuration (docs/transport.md); a field set here departs
    from it, and the summary names each one that does. The engine runs it time-dilated to the emulated
    link: times are multiplied and rates divided by time_scale = ref_gbps / link rate, so the control
    loop sees the same bytes per interval as the reference NIC does (the queue thresholds, in bytes,
    carry over unchanged)."""
    ref_gbps: float = spec(100.0, "the link rate the values below are given for, Gb/s (version 2: the "
                           "fabric's bw_gbps when unset)", "float", 0.001, 1000.0)
    time_scale: float = spec(0.0, "dilation factor (0: ref_gbps / the sender's link rate)", "float", 0.0, 1e6)
    # HPCC's simulations give every link 1 us of delay: a 4-link path (host, ToR, spine, ToR, host)
    # is 8 us there and back
    ref_base_rtt_us: float = spec(8.0, "the base RTT of the fabric the values below are tuned for, us: the "
                                  "summary compares it, dilated, with the emulated fabric's", "float", 0.01, 1e6)
    # HPCC's receiver echoes a mark on every ACK and its sender cuts at most once per decrease
    # period; this receiver sends CNPs, at most one per N = 50 us as in Zhu et al., the same period
    cnp_interval_us: float = spec(50.0, "receiver: at most one CNP per queue pair per this interval, us",
                                  "float", 0.0, 1e6)
    alpha_interval_us: float = spec(50.0, "sender: alpha update period, us", "float", 0.1, 1e6)
    rate_decrease_interval_us: float = spec(50.0, "sender: at most one rate cut per this interval, us",
                                            "float", 0.0, 1e6)
    rate_increase_timer_us: float = spec(55.0, "sender: rate increase timer period (T), us", "float", 0.1, 1e6)
    byte_counter_bytes: int = spec(0, "sender: a rate increase event per this many bytes sent "
                                   "(B; 0: timer only, as HPCC's Mellanox model)", "bytes", 0, 1 << 34)
    g: float = spec(1 / 256, "alpha gain", "float", 0.0, 1.0)
    fast_recovery_rounds: int = spec(1, "F: increase events of fast recovery before additive increase",
                                     "int", 0, 1000)
    rai_mbps: float = spec(20.0, "additive increase step R_AI, Mb/s (unset: 5 x ref_gbps / 25)",
                           "float", 0.0, 1e6)
    rhai_mbps: float = spec(200.0, "hyper increase step R_HAI, Mb/s (unset: 50 x ref_gbps / 25)",
                            "float", 0.0, 1e6)
    min_rate_mbps: float = spec(1000.0, "lowest rate a cut may reach, Mb/s", "float", 0.0, 1e6)
    rate_on_first_cnp: float = spec(1.0, "fraction of the current rate kept at a queue pair's first CNP "
                                    "(before the first cut)", "float", 0.01, 1.0)
    clamp_target_rate: bool = spec(False, "every cut also lowers the target rate (else only cuts after an "
                                   "increase event)", "bool")


def dcqcn_overrides(dcqcn: dict) -> list[str]:
    """The fields of a [dcqcn] table (as a dict) that depart from the reference configuration at
    its own ref_gbps: empty when the run used HPCC dcqcn_paper as published."""
    ref = {**{f.name: f.default for f in dataclasses.fields(DcqcnSpec)}, **dcqcn_reference_rates(dcqcn["ref_gbps"])}
    skip = ("ref_gbps", "time_scale", "ref_base_rtt_us")
    return sorted(k for k, v in ref.items() if k not in skip and k in dcqcn and not math.isclose(v, dcqcn[k]))


def dcqcn_described(overrides: list[str]) -> str:
    """The configuration in words, as the manifest and the report give it."""
    return DCQCN_REFERENCE + (f" with {', '.join(overrides)} changed" if overrides else "")


@dataclass(frozen=True)
class QosSpec:
    scheduling: str = spec("strict", "how a port (and a host NIC) serves its classes: strict priority in "
                           "[[classes]] order, weighted (by each class's weight), or fifo (one queue: "
                           "priority queuing off)", "str", choices=("strict", "weighted", "fifo"))
    ecn: bool = spec(False, "ECN marking on the classes that have ecn = true", "bool")
    pfc: bool = spec(False, "PFC-like pause on the classes that have pfc = true", "bool")
    pfc_accounting: str = spec("ingress", "what a PFC pause counts and whom it pauses: ingress (as 802.1Qbb "
                               "switches: the bytes each (ingress port, priority) holds in the switch, "
                               "pausing that port's peer) or egress (the egress queue's depth, pausing every "
                               "upstream a route can feed into it: the older rule, kept to compare)", "str",
                               choices=("ingress", "egress"))
    pfc_response_ns: float = spec(500.0, "hardware time from a lossless queue passing XOFF to its upstream "
                                  "port stopping, beyond the link's round trip: the switch's detection and "
                                  "PAUSE, and the sender's response (3840 bytes, about 0.3 us at 100 Gb/s, "
                                  "in the Mellanox headroom rule; 802.3's upper bound is about 3 us at "
                                  "100 Gb/s). Derived PFC headroom covers the link's rate over "
                                  "2 x fabric.link_delay_ns plus this, and three frames", "float", 0.0, 1e6)
    pfc_watchdog_ms: float = spec(0.0, "PFC watchdog: a port paused this long stops honouring pauses "
                                  "(its queue drops instead) until the cause clears; 0: off", "float", 0.0, 60000.0)
    deadlock_detect_ms: float = spec(300.0, "report a PFC deadlock when a cycle of paused, non-empty queues "
                                     "has made no progress this long (wall clock; never before twice the PFC "
                                     "watchdog)", "float", 10.0, 60000.0)
    telemetry_hz: float = spec(1000.0, "queue telemetry sampling rate, per second", "float", 10.0, 20000.0)
    agent_poll_hz: float = spec(2000.0, "how often the switch agent checks queues against XOFF/XON, per "
                                "second (with PFC on)", "float", 100.0, 50000.0)


@dataclass(frozen=True)
class ClassSpec:
    name: str = spec("", "class name (e.g. control, roce, bulk)", "str")
    dscp: tuple = spec((), "DSCP values of this class", "int_list", 0, 63, length=(0, 64))
    default: bool = spec(False, "this class also takes every DSCP no class lists", "bool")
    weight: int = spec(1, "share of the link under scheduling = weighted", "int", 1, 1000)
    buffer_bytes: int = spec(0, "this class's buffer on every port, bytes (0: fabric.queue_limit_bytes)",
                             "bytes", 0, MAX_BUFFER_BYTES)
    ecn: bool = spec(False, "mark ECT packets of this class when qos.ecn is on", "bool")
    ecn_kmin_bytes: int = spec(32768, "RED Kmin: no marks below this queue depth, bytes", "bytes", 0, 64 << 20)
    ecn_kmax_bytes: int = spec(131072, "RED Kmax: every ECT packet marked at or above it, bytes (= Kmin: "
                               "step marking)", "bytes", 0, 64 << 20)
    ecn_pmax: float = spec(0.2, "RED Pmax: marking probability just below Kmax", "float", 0.0, 1.0)
    pfc: bool = spec(False, "lossless: pause upstream senders of this class when qos.pfc is on", "bool")
    xoff_bytes: int = spec(0, "pause upstream when what this class holds reaches this many bytes: per "
                           "(ingress port, class) under qos.pfc_accounting = ingress, per egress queue under "
                           "egress (0: derived from the buffer and the headroom, testbed/fabric/qos.py)", "bytes",
                           0, 64 << 20)
    xon_bytes: int = spec(0, "resume upstream when it falls below this many bytes (0: derived, "
                          "testbed/fabric/qos.py)", "bytes", 0, 64 << 20)
    headroom_bytes: int = spec(0, "what a paused upstream may still deliver above XOFF while the pause "
                               "takes effect, bytes (0: per upstream port, its rate times the agent's "
                               "reaction time plus the frames its paused shaper and the wire hold)",
                               "bytes", 0, 64 << 20)


DEFAULT_CLASSES = (
    ClassSpec(name="control", dscp=(46, 48)),
    ClassSpec(name="roce", dscp=(26, 27), ecn=True, pfc=True),
    ClassSpec(name="bulk", default=True),
)
MAX_CLASSES = 8


@dataclass(frozen=True)
class RunSpec:
    seed: int = spec(1, "random seed", "int", 0, 2**31 - 1)
    dilation: Any = spec("auto", "version 2: time dilation factor D >= 1 (every link runs at its hardware rate / D, "
                         "every hardware time x D), or \"auto\": the smallest D at which this machine keeps up, "
                         "from its calibration (testbed calibrate), the scenario's demand and the spare CPU; "
                         "version 1 files run at 1", "dilation")
    time_limit_s: float = spec(300.0, "traffic phase time limit, s of wall-clock time (a guard, not dilated: "
                               "a run at a larger D takes longer, as auto picks on a busier machine)",
                               "float", 1.0, 3600.0)
    routes_ready_timeout_s: float = spec(60.0, "wait for the controller's routes, s", "float", 1.0, 600.0)
    stall_timeout_s: float = spec(3.0, "end the traffic phase after this long without progress, s of wall-clock "
                                  "time (a run raises it to twice the dilated transport.rto_ms)",
                                  "float", 0.1, 600.0)
    capture: bool = spec(False, "capture every traffic host's packets (tcpdump in its namespace) to "
                         "pcap/<host>.pcap under the run's folder", "bool")
    capture_snaplen_bytes: int = spec(128, "capture: bytes kept of each packet (128 keeps every header and "
                                      "the payload stamp)", "int", 64, 65535)
    fidelity_min_share: float = spec(0.99, "fidelity: the run is valid when every busy link drained at its "
                                     "configured rate in at least this share of its backlogged intervals",
                                     "float", 0.0, 1.0)
    fidelity_tolerance: float = spec(0.03, "fidelity: how far from rate x window a backlogged window of "
                                     "max(1 ms, 20 frame times) may drain, plus one frame (the counter's "
                                     "quantum), and how far from the rate a link may drain over all its "
                                     "windows together", "float", 0.0, 1.0)
    report: bool = spec(True, "analysis: draw the plots and write report.md and report.html", "bool")
    measure_alone: bool = spec(True, "jobs: before the jobs run together, run each alone on the same fabric, so "
                               "that summary.jobs.<name>.slowdown compares the two in the same invocation", "bool")
    api_port: int = spec(8650, "the northbound API's TCP port on 127.0.0.1 during the traffic (docs/api.md): "
                         "reads, changes with the token the run prints, a 10 Hz stream, Prometheus's /metrics and "
                         "the live view; 0 turns it off (a calibration rung never serves it)", "int", 0, 65535)


@dataclass(frozen=True)
class FaultSpec:
    at_s: float = spec(0.0, "when, seconds of hardware time after traffic starts", "float", 0.0, 3600.0)
    action: str = spec("link_down", "what happens: link_down/link_up (field link), switch_down/switch_up "
                       "(field switch: all its links), controller_kill (SIGKILL, as a crash), corrupt (bit "
                       "errors on a link from then on: fields link and frame_error_rate, 0 ending them)", "str",
                       choices=("link_down", "link_up", "switch_down", "switch_up", "controller_kill", "corrupt"))
    link: str = spec("", "link_down/link_up/corrupt: the link, as <node>-<node> (e.g. s0_0-s1_0); corrupt also "
                     "takes \"*\", every link", "str")
    switch: str = spec("", "switch_down/switch_up: the switch", "str")
    frame_error_rate: float = spec(0.0, "corrupt: the share of the RoCE data frames a switch port sends onto the "
                                   "link that arrive with a bit flipped (receivers drop them by their ICRC; "
                                   "transport.verify_icrc is on whenever a corrupt fault is scheduled)", "float",
                                   0.0, 0.5)


EXPECT_OPS = ("<", "<=", ">", ">=", "==", "!=")


@dataclass(frozen=True)
class ExpectSpec:
    metric: str = spec("", "a summary.json value as a dotted path (e.g. collective.bound_ratio, "
                       "packets.lost, transport.steady_state.jain_index, latency_by_dscp_us.26.p99)", "str")
    op: str = spec(">=", "comparison", "str", choices=EXPECT_OPS)
    value: Any = spec(None, "the number (or string, for == and !=) to compare with", "any")
    than: str = spec("", "or another summary value to compare with, as a dotted path", "str")


@dataclass(frozen=True)
class ToleranceSpec:
    metric: str = spec("", "a metric the regression baseline tracks (testbed/metrics.py TRACKED), as a "
                       "dotted path (e.g. transport.steady_state.bottleneck_queue.p99_bytes)", "str")
    rel: float = spec(0.0, "how far it may move the wrong way from its baseline, relative", "float", 0.0, 100.0)
    abs: float = spec(0.0, "or absolute, whichever is larger", "float", 0.0, 1e15)


@dataclass(frozen=True)
class PolicyChangeSpec:
    at_s: float = spec(0.0, "when the controller changes the policy, seconds of hardware time after traffic "
                       "starts", "float", 0.0, 3600.0)
    class_name: str = spec("", "the class whose setting changes", "str")
    field: str = spec("", "the [[classes]] field to change (ecn, ecn_kmin_bytes, ecn_kmax_bytes, ecn_pmax, pfc, "
                       "xoff_bytes, xon_bytes, headroom_bytes, buffer_bytes; weight under qos.scheduling = "
                       "weighted)", "str")
    value: Any = spec(None, "its new value (as in [[classes]])", "any")


@dataclass(frozen=True)
class JobSpec:
    """One of several jobs sharing the fabric: its own workload on its own hosts, for a tenant."""
    name: str = spec("", "the job's name (summary.jobs.<name>; letters, digits, - and _)", "str")
    tenant: str = spec("", "the tenant it runs for (default: a tenant of its own, named as the job); a tenant's "
                       "jobs share one traffic class", "str")
    hosts: tuple = spec((), "its hosts, by name, in rank order", "str_list")
    host_count: int = spec(0, "or this many hosts: the next ones in fabric order after the earlier jobs'", "int",
                           0, 4096)
    workload: WorkloadSpec = WorkloadSpec()


POLICY_FIELDS = ("ecn", "ecn_kmin_bytes", "ecn_kmax_bytes", "ecn_pmax", "pfc", "xoff_bytes", "xon_bytes",
                 "headroom_bytes", "buffer_bytes", "weight")


@dataclass(frozen=True)
class Dilation:
    """How a run's emulated fabric stands for the hardware one: every hardware rate / factor, every
    hardware time x factor (testbed.scenario.dilation.dilate). A scenario as loaded is its hardware
    view at factor 1, chosen_by "unresolved" until a run picks D."""
    factor: float = 1.0
    chosen_by: str = "unresolved"   # set (run.dilation), auto (calibration), version1 (always 1)
    hw_bw_gbps: float = 0.0
    hw_uplink_bw_gbps: float = 0.0
    link_delay_ns: float = 0.0      # hardware time
    switch_latency_ns: float = 0.0  # hardware time
    calibration: dict | None = None  # auto: the calibration and the demand it was weighed against


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    description: str
    fabric: FabricSpec
    controller: ControllerSpec
    workload: WorkloadSpec
    transport: TransportSpec
    run: RunSpec
    qos: QosSpec = QosSpec()
    dcqcn: DcqcnSpec = DcqcnSpec()
    classes: tuple[ClassSpec, ...] = DEFAULT_CLASSES
    faults: tuple[FaultSpec, ...] = ()
    policy_changes: tuple[PolicyChangeSpec, ...] = ()
    expect: tuple[ExpectSpec, ...] = ()
    # this scenario's own run-to-run spread of a tracked metric, where it is wider than the default
    tolerance: tuple[ToleranceSpec, ...] = ()
    jobs: tuple[JobSpec, ...] = ()
    # why `make regress` leaves this scenario out ("" = it is in the suite)
    regress_skip: str = ""
    version: int = SCENARIO_VERSION
    dilation: Dilation = Dilation()
    # the --set overrides it was loaded with, as given: a run records them, and a spread or a
    # baseline refuses a run whose overrides changed what the file describes (testbed.regress)
    overrides: tuple[str, ...] = ()

    def job_of(self, host: str) -> JobSpec | None:
        return next((j for j in self.jobs if host in j.hosts), None)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["scenario_version"] = SCENARIO_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Scenario":
        """The inverse of to_dict (for processes that get the resolved scenario as JSON, and for the
        analysis of a stored run: a field a later testbed removed, as workload.ddp_buckets, is
        left out, so that the run can still be analysed)."""
        def build(kind, values):
            known = {f.name for f in dataclasses.fields(kind)}
            return kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in known})
        return cls(name=d["name"], path=d["path"], description=d["description"],
                   **{s: build(c, d[s]) for s, c in SECTIONS.items()},
                   classes=tuple(build(ClassSpec, c) for c in d["classes"]),
                   faults=tuple(build(FaultSpec, f) for f in d["faults"]),
                   policy_changes=tuple(build(PolicyChangeSpec, p) for p in d.get("policy_changes", ())),
                   expect=tuple(build(ExpectSpec, e) for e in d.get("expect", ())),
                   tolerance=tuple(build(ToleranceSpec, t) for t in d.get("tolerance", ())),
                   jobs=tuple(JobSpec(**{**{k: tuple(v) if isinstance(v, list) else v for k, v in j.items()},
                                         "workload": build(WorkloadSpec, j["workload"])})
                              for j in d.get("jobs", ())),
                   regress_skip=d.get("regress_skip", ""),
                   version=d.get("version", 1), dilation=Dilation(**d.get("dilation", {})),
                   overrides=tuple(d.get("overrides", ())))

    def with_class_change(self, class_name: str, field_name: str, value: Any) -> "Scenario":
        classes = tuple(dataclasses.replace(c, **{field_name: value}) if c.name == class_name else c
                        for c in self.classes)
        return dataclasses.replace(self, classes=classes)


SECTIONS = {"fabric": FabricSpec, "controller": ControllerSpec, "workload": WorkloadSpec,
            "transport": TransportSpec, "dcqcn": DcqcnSpec, "qos": QosSpec, "run": RunSpec}
TOP_LEVEL = {"description", "scenario_version", "regress_skip", "faults", "classes", "policy_changes", "expect", "tolerance",
             "jobs", *SECTIONS}
TOPOLOGY_FIELDS = {"torus": {"dims", "hosts_per_switch"}, "fattree": {"k"},
                   "leafspine": {"leaves", "spines", "hosts_per_leaf", "uplink_bw_mbps", "uplink_bw_gbps"}}


def build_fabric(f: FabricSpec) -> Fabric:
    """The pure topology a [fabric] table describes, every link's rate concrete (fabric.bw_mbps
    where the topology leaves it to the scenario), so nothing downstream resolves a default."""
    if f.topology == "torus":
        fabric = torus(f.dims, f.hosts_per_switch)
    elif f.topology == "fattree":
        fabric = fattree(f.k)
    else:
        fabric = leafspine(f.leaves, f.spines, f.hosts_per_leaf, f.uplink_bw_mbps or None)
    return fabric.with_link_rate(f.bw_mbps)
