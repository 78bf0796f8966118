"""Parameter-server training as a message DAG, pure.

Each worker computes its gradients, pushes one shard of them to every server (an incast at each
server), each server aggregates what it received, and every worker pulls the updated shard back.
- BSP (synchronous): a server aggregates once every worker's shard is in, and a worker starts its
  next iteration once it holds every updated shard: the slowest worker sets the pace.
- async: a server applies each worker's push as it arrives and answers that worker alone; a worker
  starts its next iteration once its own pulls are back, whatever the others do.
A shard served on a worker's own host (colocated) is pushed and pulled there without the network:
its aggregation waits for that worker's compute instead.
A worker's compute is tagged "compute" (what the synchronisation share weighs against), a server's
aggregation "aggregate".
"""
from __future__ import annotations

from testbed.traffic.collectives import Message, chunk_sizes


def parameter_server(workers: list[str], servers: list[str], bytes_per_worker: int, iterations: int,
                     compute_ns: int, aggregate_ns: int, sync: str = "bsp") -> list[Message]:
    """Every iteration of ``workers`` training against ``servers`` (one shard each); a worker's
    gradients and parameters are bytes_per_worker, split evenly over the shards."""
    if not workers or not servers:
        raise ValueError("a parameter server needs workers and servers")
    if len(set(workers)) != len(workers) or len(set(servers)) != len(servers):
        raise ValueError("workers, and servers, must be distinct hosts")
    if sync not in ("bsp", "async"):
        raise ValueError(f"unknown synchronisation {sync!r}")
    shard = chunk_sizes(bytes_per_worker, len(servers))
    msgs: list[Message] = []

    def add(it, step, src, dst, nbytes, deps, op, chunk=-1, duration_ns=0, tag="collective") -> int:
        msgs.append(Message(len(msgs), it, step, src, dst, nbytes, tuple(deps), chunk, tag, op, duration_ns=duration_ns))
        return msgs[-1].id

    ready: dict[str, tuple[int, ...]] = {w: () for w in workers}   # what a worker's next compute waits for
    for it in range(iterations):
        done = {w: add(it, 0, w, w, 0, ready[w], "compute", duration_ns=compute_ns, tag="compute") for w in workers}
        pulls: dict[str, list[int]] = {w: [] for w in workers}
        for s, server in enumerate(servers):
            pushes = {w: add(it, 1, w, server, shard[s], (done[w],), "push", s) for w in workers if w != server}
            if sync == "bsp":
                # the shard's update: every worker's gradients in (a colocated worker's, once computed)
                inputs = list(pushes.values()) + [done[w] for w in workers if w == server]
                agg = add(it, 2, server, server, 0, inputs, "compute", s, aggregate_ns, "aggregate")
                for w in workers:
                    pulls[w].append(add(it, 3, server, w, shard[s], (agg,), "pull", s) if w != server else agg)
            else:
                for w in workers:
                    got = pushes.get(w, done[w])
                    agg = add(it, 2, server, server, 0, (got,), "compute", s, aggregate_ns, "aggregate")
                    pulls[w].append(add(it, 3, server, w, shard[s], (agg,), "pull", s) if w != server else agg)
        ready = {w: tuple(pulls[w]) for w in workers}
    return msgs
