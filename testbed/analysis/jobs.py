"""Several jobs on one fabric ([[jobs]]): each job's view of a run, as if its workload had run on
its hosts alone (its messages, iterations and bound), and summary.jobs: each job's iterations,
training share and, when the runner measured it alone in the same invocation, its slowdown.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from testbed.analysis.bounds import planned_bound
from testbed.scenario import Scenario
from testbed.scenario.schema import build_fabric
from testbed.traffic.workload import build_messages, job_fabric, job_scenario, message_latency_s


@dataclass(frozen=True)
class JobView:
    name: str
    tenant: str
    hosts: list[str]
    ranks: list[str]
    scenario: dict            # the scenario as the job alone: its workload, no [[jobs]]
    messages: pd.DataFrame
    bound_s: float
    bound_formula: str
    bound_terms: dict | None


def job_views(scenario: dict, msgs: pd.DataFrame, first_iteration) -> dict[str, JobView]:
    """Each job's messages (by the schedule's job column) and its bound, from its own plan;
    first_iteration(messages) gives a job's iteration-0 messages as planned."""
    sc = Scenario.from_dict(scenario)
    fabric = build_fabric(sc.fabric)
    out = {}
    for job in sc.jobs:
        alone = job_scenario(sc, job)
        ranks, _ = build_messages(alone, job_fabric(fabric, job))
        mine = msgs[msgs["job"] == job.name]
        w = job.workload
        bound, formula, terms = planned_bound(w.type, len(ranks), w.bytes_per_rank, sc.fabric.bw_mbps * 1e6,
                                              first_iteration(mine), message_latency_s(sc.fabric, fabric))
        out[job.name] = JobView(job.name, job.tenant, list(job.hosts), ranks, alone.to_dict(), mine, bound, formula,
                                terms)
    return out


def jobs_section(views: dict[str, JobView], sections: dict[str, tuple[dict, dict | None]], alone: dict) -> dict:
    """summary.jobs: per job its tenant, hosts, collective section and training section, and with a
    measurement alone (the runner's, in the manifest) the slowdown of its mean iteration."""
    out = {}
    for name, v in views.items():
        collective, training = sections[name]
        a = alone.get(name) or {}
        mean, alone_mean = collective.get("mean_time_s"), a.get("mean_time_s")
        out[name] = {
            "tenant": v.tenant, "hosts": v.hosts, "workload": v.scenario["workload"]["type"],
            "mean_time_s": mean, "collective": collective, "training": training,
            "alone_mean_time_s": alone_mean, "alone_run_id": a.get("run_id"), "alone_kept_up": a.get("kept_up"),
            # together over alone; None without both, or when the run alone could not keep up (its time
            # would be the machine's, not the job's)
            "slowdown": mean / alone_mean if mean and alone_mean and a.get("kept_up") else None,
        }
    return out


def view_inputs(inp, t, v: JobView):
    """RunInputs and Tables restricted to one job, for the single-workload sections."""
    iters = t.iterations[t.iterations["job"] == v.name].drop(columns="job")
    return (dataclasses.replace(inp, scenario=v.scenario, manifest={**inp.manifest, "ranks": v.ranks}),
            dataclasses.replace(t, messages=v.messages, iterations=iters, bound_formula=v.bound_formula,
                                bound_terms=v.bound_terms, jobs=None))
