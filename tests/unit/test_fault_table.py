"""The summary's fault rows (testbed.analysis.tables.fault_table): a reroute is a link's or a
switch's outcome, never bit errors' or a killed controller's, though one follows them in time."""
import json

import pandas as pd

from testbed.analysis.tables import fault_table
from testbed.runfolder import RunFolder


def test_only_link_and_switch_faults_take_the_reroute_that_follows(tmp_path):
    rf = RunFolder(tmp_path)
    rf.raw.mkdir()
    faults = [{"t_ns": 1_000_000, "at_s": 0.001, "action": "corrupt", "link": "*", "frame_error_rate": 1e-4},
              {"t_ns": 2_000_000, "at_s": 0.002, "action": "link_down", "link": "s0-s1", "links": ["s0-s1"]},
              {"t_ns": 3_000_000, "at_s": 0.003, "action": "controller_kill"}]
    rf.faults.write_text("".join(json.dumps(f) + "\n" for f in faults))
    rf.controller_events.write_text(json.dumps({"t_ns": 5_000_000, "event": "reroute_done"}) + "\n")
    pkts = pd.DataFrame({"flow": pd.Series(dtype="int64"), "tx_ns": pd.Series(dtype="int64"),
                         "rx_ns": pd.Series(dtype="float64"), "accepted": pd.Series(dtype="bool")})
    rows = {r["action"]: r for r in fault_table(rf, pkts)}
    assert rows["link_down"]["reroute_ms"] == 3.0
    assert rows["corrupt"]["reroute_ms"] is None and rows["controller_kill"]["reroute_ms"] is None
