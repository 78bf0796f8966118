"""From a scenario's [workload] to the engine's plan: ranks placed on hosts, flows, messages."""
from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.errors import InputError
from testbed.fabric import qos
from testbed.paths import PROJECT_ROOT
from testbed.traffic.collectives import (Message, all_to_all, background, halving_doubling_allreduce, incast,
                                         ring_allgather, ring_allreduce, ring_reducescatter, shift_permutation,
                                         torus2d_allreduce)
from testbed.traffic.ddp import bucket_sizes, ddp_step
from testbed.traffic.parameter_server import parameter_server
from testbed.traffic.pipeline import PipelineJob, mlp_bytes, model_bytes, pipeline_step, placement
from testbed.traffic.plan import EnginePlan, FlowSpec, HostSpec, MessageSpec
from testbed.traffic.traces import chakra_files, chakra_messages, read_simai, simai_messages
from testbed.traffic.transport import dcqcn_params
from topologies.model import Fabric
from topologies.torus import snake_order

if TYPE_CHECKING:   # plans are made from a loaded scenario; the loader asks these planners whether it can be planned
    from testbed.scenario.schema import Scenario


def ring_ranks(fabric: Fabric) -> list[str]:
    """Ring order that follows the fabric: on a torus, neighbours one switch hop apart."""
    if fabric.kind == "torus":
        return snake_order(fabric)
    return [h.name for h in fabric.hosts]  # fabric order: neighbours share a leaf/edge switch


def placed_ranks(sc: Scenario, fabric: Fabric) -> list[str]:
    """Every host as a rank, in the order workload.placement asks for."""
    p = sc.workload.placement
    if p == "fabric":
        if sc.workload.type in ("torus2d_allreduce", "pipeline") and fabric.kind == "torus":
            # the torus's own grid, rows along its first dimension
            return [h.name for h in sorted(fabric.hosts, key=lambda h: (tuple(reversed(h.coord)), h.name))]
        return ring_ranks(fabric)
    ranks = [h.name for h in fabric.hosts]
    if p == "random":
        random.Random(sc.run.seed).shuffle(ranks)
    return ranks


def grid_width(sc: Scenario, fabric: Fabric) -> int:
    """Ranks per row of torus2d_allreduce's grid."""
    if sc.workload.grid_x:
        return sc.workload.grid_x
    n = len(fabric.hosts)
    if sc.workload.placement == "fabric" and fabric.kind == "torus":
        hosts_per_switch = n // math.prod(fabric.dims)
        return fabric.dims[0] * hosts_per_switch
    return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def pipeline_job(sc: Scenario) -> PipelineJob:
    w = sc.workload
    act, grads = model_bytes(w.micro_batch_size, w.seq_len, w.hidden, w.bytes_per_element, w.tp, w.layers_per_stage)
    tokens_x_hidden = w.micro_batch_size * w.seq_len * w.hidden * w.bytes_per_element
    mlp = mlp_bytes(w.hidden, w.bytes_per_element, w.tp) if w.moe_every else 0
    experts = (w.num_experts or w.ep) if w.moe_every else 0
    return PipelineJob(pp=w.pp, dp=w.dp, microbatches=w.microbatches,
                       activation_bytes=max(1, round(act * w.bytes_scale)),
                       grad_bytes_per_stage=max(1, round(grads * w.bytes_scale)),
                       fwd_ns=round(w.fwd_compute_ms * w.time_scale * 1e6),
                       bwd_ns=round(w.bwd_compute_ms * w.time_scale * 1e6),
                       tp=w.tp, layers_per_stage=w.layers_per_stage, sequence_parallel=w.tp_sequence_parallel,
                       # a block's output: every token's hidden vector, partial on each TP host until reduced
                       tp_bytes=max(1, round(tokens_x_hidden * w.bytes_scale)) if w.tp > 1 else 0,
                       ep=w.ep, moe_every=w.moe_every,
                       # a TP host's share of the tokens (sequence parallel), each routed to moe_topk experts
                       a2a_bytes=max(1, round(tokens_x_hidden * w.moe_topk / w.tp * w.bytes_scale)) if w.ep > 1 else 0,
                       num_experts=experts, mlp_grad_bytes=round(mlp * w.bytes_scale),
                       expert_grad_bytes=round(experts // w.ep * mlp * w.bytes_scale))


def pipeline_grid(sc: Scenario, fabric: Fabric) -> list[list[list[str]]]:
    """grid[d][s]: the TP group of stage s of replica d, nested over the placed ranks as
    workload.rank_order says (on a torus with placement fabric the ranks run along its rows, so
    the innermost group sits on a row)."""
    w = sc.workload
    return placement(placed_ranks(sc, fabric), w.tp, w.dp, w.pp, w.rank_order)




def trace_path(sc: Scenario) -> Path:
    p = Path(sc.workload.trace)
    return p if p.is_absolute() else PROJECT_ROOT / p


def trace_ranks(sc: Scenario, path: Path) -> int:
    if sc.workload.type == "chakra":
        return len(chakra_files(path))
    return read_simai(path).params["all_gpus"]


def trace_messages(sc: Scenario, hosts: list[str], where: str = "") -> tuple[list[str], list[Message]]:
    """The trace's ranks placed on the first hosts of the placement, and its messages."""
    w = sc.workload
    if not w.trace:
        raise InputError(where, "workload.trace", f"{w.type} needs a trace")
    path = trace_path(sc)
    if not path.exists():
        raise InputError(where, "workload.trace", f"{path} does not exist")
    n = trace_ranks(sc, path)
    if n > len(hosts):
        raise InputError(where, "workload.trace", f"{path.name} has {n} ranks, the fabric {len(hosts)} hosts")
    ranks = hosts[:n]
    if w.type == "chakra":
        groups = None
        if w.comm_groups:
            groups = Path(w.comm_groups) if Path(w.comm_groups).is_absolute() else PROJECT_ROOT / w.comm_groups
            if not groups.exists():
                raise InputError(where, "workload.comm_groups", f"{groups} does not exist")
        return ranks, chakra_messages(path, ranks, w.bytes_scale, w.time_scale, w.collective_algorithm, w.iterations,
                                      groups)
    return ranks, simai_messages(path, ranks, w.bytes_scale, w.time_scale, w.collective_algorithm, w.iterations)


COLLECTIVES = {"halving_doubling": halving_doubling_allreduce, "allgather": ring_allgather,
               "reducescatter": ring_reducescatter, "alltoall": all_to_all}


def incast_parties(sc: Scenario, fabric: Fabric) -> tuple[str, list[str]]:
    hosts = [h.name for h in fabric.hosts]
    receiver = sc.workload.receiver or hosts[0]
    at = hosts.index(receiver)
    others = hosts[at + 1:] + hosts[:at]
    return receiver, others[:sc.workload.senders]


def ps_parties(sc: Scenario, fabric: Fabric) -> tuple[list[str], list[str]]:
    """A parameter server's workers and servers, in rank order: dedicated servers are the ranks
    after the workers; colocated ones sit on the first workers' hosts."""
    w = sc.workload
    ranks = placed_ranks(sc, fabric)
    if w.ps_placement == "colocated":
        workers = ranks[:w.ps_workers or len(ranks)]
        return workers, workers[:w.ps_servers]
    workers = ranks[:w.ps_workers or len(ranks) - w.ps_servers]
    return workers, ranks[len(workers):len(workers) + w.ps_servers]


def job_fabric(fabric: Fabric, job) -> Fabric:
    """The fabric as one of the scenario's jobs sees it: every switch and link, only its hosts."""
    return dataclasses.replace(fabric, hosts=tuple(fabric.host_by_name[h] for h in job.hosts))


def job_scenario(sc: Scenario, job) -> Scenario:
    """A job as a scenario of its own: the fabric, its workload, no other job."""
    return dataclasses.replace(sc, workload=job.workload, jobs=())


def jobs_messages(sc: Scenario, fabric: Fabric) -> tuple[list[str], list[Message]]:
    """Every job's ranks and messages, planned as if it ran alone on its hosts, in one DAG: the
    jobs depend on nothing of each other's, and each message says whose it is."""
    ranks: list[str] = []
    msgs: list[Message] = []
    for job in sc.jobs:
        r, ms = build_messages(job_scenario(sc, job), job_fabric(fabric, job))
        off = len(msgs)
        ranks += r
        msgs += [dataclasses.replace(m, id=m.id + off, deps=tuple(d + off for d in m.deps), job=job.name) for m in ms]
    return ranks, msgs


def build_messages(sc: Scenario, fabric: Fabric) -> tuple[list[str], list[Message]]:
    """Ranks (the collective's hosts, in order) and every message: the collective's, then any
    background bulk and victim traffic."""
    w = sc.workload
    if w.type == "jobs":
        return jobs_messages(sc, fabric)
    if w.type == "ring_allreduce":
        ranks = placed_ranks(sc, fabric)
        msgs = ring_allreduce(ranks, w.bytes_per_rank, w.iterations)
    elif w.type in COLLECTIVES:
        ranks = placed_ranks(sc, fabric)
        msgs = COLLECTIVES[w.type](ranks, w.bytes_per_rank, w.iterations)
    elif w.type == "pipeline":
        grid = pipeline_grid(sc, fabric)
        ranks = placed_ranks(sc, fabric)[:w.tp * w.dp * w.pp]
        msgs = pipeline_step(pipeline_job(sc), grid, w.iterations)
    elif w.type == "ddp":
        ranks = placed_ranks(sc, fabric)
        msgs = ddp_step(ranks, bucket_sizes(w.bytes_per_rank, w.ddp_first_bucket_bytes, w.ddp_bucket_cap_bytes),
                        int(w.fwd_compute_ms * 1e6), int(w.bwd_compute_ms * 1e6), w.ddp_overlap, w.iterations)
    elif w.type == "parameter_server":
        workers, servers = ps_parties(sc, fabric)
        ranks = list(dict.fromkeys(workers + servers))
        msgs = parameter_server(workers, servers, w.bytes_per_rank, w.iterations, int(w.ps_compute_ms * 1e6),
                                int(w.ps_aggregate_ms * 1e6), w.ps_sync)
    elif w.type in ("chakra", "simai"):
        ranks, msgs = trace_messages(sc, placed_ranks(sc, fabric))
    elif w.type == "torus2d_allreduce":
        ranks = placed_ranks(sc, fabric)
        x = grid_width(sc, fabric)
        msgs = torus2d_allreduce([ranks[i:i + x] for i in range(0, len(ranks), x)], w.bytes_per_rank, w.iterations)
    elif w.type == "shift":
        ranks = [h.name for h in fabric.hosts]
        msgs = shift_permutation(ranks, w.bytes_per_rank, w.shift, w.iterations)
    elif w.type == "incast":
        receiver, senders = incast_parties(sc, fabric)
        ranks = senders
        msgs = incast(receiver, senders, w.bytes_per_rank, w.iterations)
    else:
        raise ValueError(f"unknown workload type {w.type}")
    hosts = [h.name for h in fabric.hosts]
    if w.bulk_shift:
        pairs = [(h, hosts[(i + w.bulk_shift) % len(hosts)]) for i, h in enumerate(hosts)]
        msgs += background(len(msgs), pairs, w.bulk_bytes, "bulk")
    if w.victim:
        src, dst = w.victim.split(">")
        msgs += background(len(msgs), [(src, dst)], w.victim_bytes, "victim")
    return ranks, msgs


def message_flows(messages: list[Message], channels: int = 1) -> tuple[list[tuple[str, str, str, str, int]], list[int]]:
    """Queue pairs and each message's: one QP per (src, dst, tag, communicator, channel) that
    carries messages, in first-use order, and the flow index of every message (-1 for compute).
    NCCL connects each communicator on its own, so a TP collective never waits in a DP ring's
    queue pair (jobs share no host, so a job's communicators are its own). Messages between the
    same two hosts of one communicator take the channels in turn, as NCCL spreads its work over
    channels; each QP sends its messages one after another (RC order)."""
    ids: dict[tuple[str, str, str, str, int], int] = {}
    turn: dict[tuple[str, str, str, str], int] = {}
    of_msg = []
    for m in messages:
        if m.op == "compute":
            of_msg.append(-1)
            continue
        key = (m.src, m.dst, m.tag, m.comm)
        ch = turn.get(key, 0)
        turn[key] = (ch + 1) % channels
        of_msg.append(ids.setdefault((*key, ch), len(ids)))
    return list(ids), of_msg


def flow_marking(sc: Scenario, fabric: Fabric, src: str, tag: str) -> tuple[int, bool]:
    """(DSCP, ECT) of a flow's data packets: its job's, with [[jobs]]."""
    if sc.jobs:
        job = sc.job_of(src)
        return flow_marking(job_scenario(sc, job), job_fabric(fabric, job), src, tag)
    w = sc.workload
    if tag == "bulk":
        return w.bulk_dscp, w.ect
    ect = w.ect
    if tag == "collective" and w.type == "incast" and w.not_ect_senders:
        _, senders = incast_parties(sc, fabric)
        ect = ect and src not in senders[len(senders) - w.not_ect_senders:]
    return w.dscp, ect


def engine_plan(sc: Scenario, fabric: Fabric, messages: list[Message], host_pids: dict[str, int],
                out_dir: str) -> EnginePlan:
    flows, msg_flow = message_flows(messages, sc.transport.channels)
    used = {h for f in flows for h in f[:2]}  # hosts with only compute need no socket
    cls = qos.class_of_dscp(sc)
    flow_specs = []
    links = path_links(fabric) if sc.fabric.link_delay_ns or sc.fabric.switch_latency_ns else None
    for i, (s, d, tag, comm, ch) in enumerate(flows):
        dscp, ect = flow_marking(sc, fabric, s, tag)
        delay = path_latency_ns(links(s, d), sc.fabric.link_delay_ns, sc.fabric.switch_latency_ns) if links else 0
        flow_specs.append(FlowSpec(id=i, src=s, dst=d, tag=tag, channel=ch, dscp=dscp, ect=ect, cls=cls[dscp],
                                   delay_ns=delay, comm=comm))
    return EnginePlan(
        out_dir=out_dir, payload_bytes=sc.workload.payload_bytes, time_limit_s=sc.run.time_limit_s,
        stall_timeout_s=sc.run.stall_timeout_s, nic_lead_ns=nic_lead_ns(sc),
        transport=dataclasses.asdict(sc.transport), dcqcn=dataclasses.asdict(sc.dcqcn),
        hosts=tuple(HostSpec(name=h.name, pid=host_pids[h.name], ifname=h.intf, mac=h.mac, ip=h.ip,
                             bw_bps=sc.fabric.bw_mbps * 1e6) for h in fabric.hosts if h.name in used),
        flows=tuple(flow_specs),
        messages=tuple(MessageSpec(id=m.id, flow=f, bytes=m.bytes, deps=tuple(m.deps), duration_ns=m.duration_ns,
                                   host=m.src if f < 0 else "", tag=m.tag)
                       for m, f in zip(messages, msg_flow)))


def path_links(fabric: Fabric):
    """links(src host, dst host): the links on a shortest path between them. Every routing here
    takes minimal paths on the fabrics it is offered (dimension order, d-mod-k and ECMP among
    equal-cost ones); a rerouted path after a failure keeps the latency of the minimal one."""
    import networkx as nx  # noqa: PLC0415
    g = fabric.switch_graph()
    hop = {s.name: nx.single_source_shortest_path_length(g, s.name) for s in fabric.switches}
    at = {h.name: h.switch for h in fabric.hosts}
    return lambda src, dst: hop[at[src]][at[dst]] + 2


def path_latency_ns(links: int, link_delay_ns: float, switch_latency_ns: float) -> int:
    """One direction of a path of `links` links (so links - 1 switches)."""
    return int(round(links * link_delay_ns + max(0, links - 1) * switch_latency_ns))


def message_latency_s(fabric_spec, fabric: Fabric):
    """latency_s(message) for the bounds: its path's latency at the rates of fabric_spec (a
    FabricSpec or its dict), or None on a fabric without latency."""
    get = fabric_spec.get if isinstance(fabric_spec, dict) else lambda k, d=0.0: getattr(fabric_spec, k, d)
    link, switch = get("link_delay_ns", 0.0), get("switch_latency_ns", 0.0)
    if not link and not switch:
        return None
    links = path_links(fabric)
    return lambda m: path_latency_ns(links(m.src, m.dst), link, switch) / 1e9


# The data plane tops a class up only once a departure stamp says a frame has left, and the stamp
# comes when the shaper lets the frame's last byte go: a lead of one frame or less leaves the wire
# idle for a wake-up each frame. Measured on pipeline-fattree at 4 x its auto D: a 40 ms lead (under
# one 42 ms frame) ran 1.0% longer in hardware time than at D (1443.5 us), a 160 ms lead 1428.2 us.
# Two frames were not enough either: at 4 x D = 16000 (21 ms frames) 1431.1-1434.9 us over three
# runs, 0.07-0.3% over D's, where four frames (85 ms) gave 1428.4 us, on what the emulator's own
# share shrinking with D predicts (1428.2 us); with this floor, at 4 x D = 31500, 1428.0-1428.2 us
# over three runs (docs/fidelity.md).
LEAD_MIN_FRAMES = 4


def nic_lead_ns(sc: Scenario) -> int:
    """The lead each host NIC class keeps queued: transport.nic_lead_us of wall clock, but never
    less than LEAD_MIN_FRAMES frames at the link rate (at a large dilation a frame or two outlast it),
    never more than its smallest class buffer less two frames (a deeper lead would be refused by
    the NIC's queue), and with DCQCN never more than a quarter of its (dilated) rate-increase
    period: a rate change reaches the wire only behind the lead, which a real NIC's per-QP limiter
    does not wait for (measured on dcqcn-incast, 2 senders: Jain 0.946-0.973 with a 5 ms lead,
    0.988-1.0 with 1 ms)."""
    frame = qos.frame_bytes(sc)
    buffer = min(c.buffer_bytes or sc.fabric.queue_limit_bytes for c in sc.classes)
    link_bps = sc.fabric.bw_mbps * 1e6
    fits_ns = max(0, buffer - 2 * frame) * 8e9 / link_bps
    lead = min(max(sc.transport.nic_lead_us * 1e3, LEAD_MIN_FRAMES * frame * 8e9 / link_bps), fits_ns)
    if sc.transport.cc == "dcqcn":
        lead = min(lead, dcqcn_params(dataclasses.asdict(sc.dcqcn), link_bps)["rate_increase_timer_ns"] / 4)
    return int(lead)
