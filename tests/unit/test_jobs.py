"""Several jobs and tenants on one fabric: [[jobs]] as the loader resolves them, their plan as one
DAG, the tenants' VLAN rules, and the verdicts on a job's slowdown (pure logic)."""
import pytest

from controllers.rules import rules_for, tenant_tags
from testbed.analysis.jobs import jobs_section
from testbed.errors import InputError
from testbed.fabric.routing import compute_routes
from testbed.fabric.tenants import OFPVID_NONE, OFPVID_PRESENT, host_vids, mechanism
from testbed.regress.baselines import check_expectations
from testbed.scenario import load_document, load_scenario
from testbed.scenario.schema import build_fabric
from testbed.traffic.workload import build_messages


def doc(*jobs, **extra):
    return {"fabric": {"topology": "fattree", "k": 4}, "controller": {"routing": "ecmp"},
            "workload": {"type": "jobs"}, "jobs": list(jobs), **extra}


def job(name, **kw):
    return {"name": name, "workload": {"type": "ring_allreduce", "bytes_per_rank": "64KiB"}} | kw


def test_jobs_take_named_or_counted_hosts_and_plan_as_one_dag():
    b = {"type": "ring_allreduce", "bytes_per_rank": "64KiB", "dscp": 10}
    sc = load_document("j", doc(job("a", host_count=4), job("b", hosts=["h3_1_1", "h3_1_0"], tenant="t2", workload=b),
                                job("c", host_count=2, tenant="t2", workload={"type": "shift", "dscp": 10})), "j.toml")
    assert [j.hosts for j in sc.jobs] == [("h0_0_0", "h0_0_1", "h0_1_0", "h0_1_1"), ("h3_1_1", "h3_1_0"),
                                          ("h1_0_0", "h1_0_1")]
    assert [j.tenant for j in sc.jobs] == ["a", "t2", "t2"]
    assert load_document("j", doc(job("a", host_count=2)), "j.toml").jobs[0].tenant == "a"   # its own by default
    ranks, msgs = build_messages(sc, build_fabric(sc.fabric))
    assert all(d < m.id for m in msgs for d in m.deps) and [m.id for m in msgs] == list(range(len(msgs)))
    for j in sc.jobs:   # each job's messages between its own hosts, depending only on its own
        mine = {m.id: m for m in msgs if m.job == j.name}
        assert mine and all({m.src, m.dst} <= set(j.hosts) for m in mine.values())
        assert all(d in mine for m in mine.values() for d in m.deps)


@pytest.mark.parametrize("jobs, field", [
    ((job("a", hosts=["h0_0_0", "nope"]),), "jobs[0].hosts"),
    ((job("a", hosts=["h0_0_0", "h0_0_1"]), job("b", hosts=["h0_0_1", "h1_0_0"])), "jobs[1].hosts"),
    ((job("a", host_count=17),), "jobs[0].host_count"),
    ((job("a"),), "jobs[0].hosts"),                                        # neither hosts nor a count
    ((job("a", host_count=2, hosts=["h0_0_0", "h0_0_1"]),), "jobs[0].hosts"),   # both
    ((job("a", host_count=2), job("a", host_count=2)), "jobs[1].name"),
    ((job("a", host_count=2, workload={"type": "pipeline", "pp": 4}),), "jobs[0].workload.pp"),
    # two tenants in one class: a class's weight would be neither's share
    ((job("a", host_count=2), job("b", host_count=2)), "jobs[1].workload.dscp"),
    ((job("a", host_count=2, workload={"type": "jobs"}),), "jobs[0].workload.type"),
])
def test_jobs_that_do_not_fit_are_bad_input_naming_the_field(jobs, field):
    with pytest.raises(InputError) as e:
        load_document("j", doc(*jobs), "j.toml")
    assert e.value.field == field


def test_jobs_need_workload_type_jobs_and_the_other_way_round():
    with pytest.raises(InputError) as e:
        load_document("j", doc(job("a", host_count=2)) | {"workload": {"type": "ring_allreduce"}}, "j.toml")
    assert e.value.field == "workload.type"
    with pytest.raises(InputError) as e:
        load_document("j", doc(), "j.toml")
    assert e.value.field == "jobs"


def test_each_tenant_gets_a_vlan_every_route_matches_it_and_the_last_hop_pops_it():
    sc = load_scenario("two-jobs-fattree")
    fabric = build_fabric(sc.fabric)
    vids = host_vids(sc)
    assert set(vids.values()) == {100, 101} and len(vids) == 16 and "VLAN" in mechanism(sc)
    routes = compute_routes(fabric, "ecmp")
    train, storage = sc.jobs[0].hosts, sc.jobs[1].hosts
    for sw in ("e0_0", "a1_1", "c0_0"):
        for host in (train[3], storage[5]):
            rules = rules_for(fabric, routes, sw, host, vids=vids)
            assert rules and all(dict(r.match)["vlan_vid"] == OFPVID_PRESENT | vids[host] for r in rules)
    # toward its own host the edge switch pops the tag; elsewhere it stays on
    edge = next(sw for sw, ports in fabric.ports.items() if any(p[0] == train[0] for p in ports.values()))
    assert all(r.pop_vlan for r in rules_for(fabric, routes, edge, train[0], vids=vids))
    assert not any(r.pop_vlan for r in rules_for(fabric, routes, "c0_0", train[0], vids=vids))
    tags = tenant_tags(fabric, edge, vids)
    assert {t.vid for t in tags} == {100, 101} and len(tags) == 2
    # a host of no tenant: its routes match untagged frames only, so no tenant's frame reaches it
    partial = {h: v for h, v in vids.items() if h != storage[0]}
    assert all(dict(r.match)["vlan_vid"] == OFPVID_NONE for r in rules_for(fabric, routes, "c0_0", storage[0],
                                                                            vids=partial))
    off = load_scenario("two-jobs-fattree", ["controller.tenant_isolation=false"])
    assert host_vids(off) == {} and mechanism(off).startswith("off")
    assert all("vlan_vid" not in dict(r.match) for r in rules_for(fabric, routes, "c0_0", train[0], vids={}))


def test_a_slowdown_is_together_over_alone_and_judged_only_when_alone_kept_up():
    class V:
        tenant, hosts, scenario = "t", ["h"], {"workload": {"type": "ring_allreduce"}}
    sections = {"a": ({"mean_time_s": 1.2}, None), "b": ({"mean_time_s": 2.0}, None), "c": ({"mean_time_s": 3.0}, None)}
    alone = {"a": {"mean_time_s": 1.0, "kept_up": True, "run_id": "x"}, "b": {"mean_time_s": 1.0, "kept_up": False}}
    jobs = jobs_section({"a": V, "b": V, "c": V}, sections, alone)
    assert jobs["a"]["slowdown"] == pytest.approx(1.2) and jobs["b"]["slowdown"] is None
    assert jobs["c"]["slowdown"] is None and jobs["c"]["alone_kept_up"] is None
    expects = [{"metric": f"jobs.{n}.slowdown", "op": "<=", "value": 1.1} for n in "abc"]
    got = check_expectations({"jobs": jobs}, expects)
    assert [e["ok"] for e in got] == [False, None, None]
    assert "could not keep up" in got[1]["why"] and "not run alone" in got[2]["why"]
