"""The ECMP spread (testbed.analysis.routing): how a routing policy spread the traffic over each
switch's equal-cost ports, from its select groups and the bytes each port drained."""
import pandas as pd
import pytest

from testbed.analysis.routing import USED_FRAMES, ecmp_groups, ecmp_spread
from testbed.metrics import metric_class

FRAME = 4154


def links(moved: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"port": list(moved), "bytes": list(moved.values())})


# two edge switches, each with a select group over its two uplinks (ports 3 and 4), one group
# a destination, as the proactive routing installs them
GROUPS = {"e0": [{"group_id": 1, "out_ports": [3, 4]}, {"group_id": 2, "out_ports": [4, 3]}],
          "e1": [{"group_id": 1, "out_ports": [3, 4]}],
          "c0": [{"group_id": 1, "out_ports": [1]}]}   # one port: no choice, not ECMP


def test_groups_over_the_same_ports_are_one_equal_cost_set():
    assert ecmp_groups(GROUPS) == [("e0", (3, 4)), ("e1", (3, 4))]


def test_an_even_spread_uses_every_member():
    r = ecmp_spread(GROUPS, links({"e0-eth3": 1e6, "e0-eth4": 1e6, "e1-eth3": 2e6, "e1-eth4": 1e6}), FRAME)
    assert r["loaded_groups"] == 2 and r["members_used_share"] == 1.0
    assert r["max_over_mean"] == pytest.approx(2e6 / 1.5e6)


def test_a_policy_that_pins_every_flow_to_one_uplink_leaves_half_the_members_unused():
    # control traffic alone (an ARP, 210 bytes) does not make a member used
    r = ecmp_spread(GROUPS, links({"e0-eth3": 210, "e0-eth4": 3e6, "e1-eth3": 210, "e1-eth4": 2e6}), FRAME)
    assert r["members_used_share"] == 0.5 and r["max_over_mean"] == pytest.approx(2.0, rel=1e-3)


def test_a_set_that_carried_no_traffic_is_not_judged():
    small = (USED_FRAMES - 1) * FRAME
    r = ecmp_spread(GROUPS, links({"e0-eth3": small, "e0-eth4": small, "e1-eth3": 1e6, "e1-eth4": 0}), FRAME)
    assert r["groups"] == 2 and r["loaded_groups"] == 1 and r["members_used_share"] == 0.5
    assert ecmp_spread({"c0": GROUPS["c0"]}, links({}), FRAME) is None
    assert ecmp_spread(GROUPS, links({}), FRAME)["members_used_share"] is None


def test_the_spread_is_a_policy_metric_though_other_link_numbers_are_performance():
    assert metric_class("links.ecmp.members_used_share") == "policy"
    assert metric_class("links.mean_utilisation") == "performance"
