"""Every collective algorithm as real traffic on a small torus (root): it completes, each rank
moves the bytes its cost model says, and the results carry per-iteration times and bounds."""
import pandas as pd
import pytest

from helpers import NOTHING_FAILED, SMALL, assert_ran, run_dirs, run_testbed, summary_of
from testbed.traffic.collectives import SEND_FRACTION
from testbed.traffic.packets import HEADER_BYTES

pytestmark = pytest.mark.root


@pytest.mark.parametrize("algo", ["halving_doubling", "torus2d_allreduce", "allgather", "reducescatter", "alltoall"])
def test_collective_runs_and_moves_the_cost_models_bytes(tmp_path, algo):
    out = run_testbed(tmp_path, "run", "allreduce-torus", *SMALL, "--set", f"workload.type={algo}")
    assert_ran(out)
    (run_dir,) = run_dirs(tmp_path)
    s = summary_of(run_dir)
    assert s["status"] in NOTHING_FAILED and s["collective"]["algorithm"] == algo
    assert s["collective"]["iterations_complete"] == 2 and all(t > 0 for t in s["collective"]["time_s"])
    n, size = s["collective"]["ranks"], s["collective"]["bytes_per_rank"]
    # the cost model's bandwidth term at the emulated rate; the path latency on every step can only add
    bandwidth_s = SEND_FRACTION[algo](n) * size * 8 / (s["collective"]["link_bw_mbps"] * 1e6)
    terms = s["collective"]["bound_terms"]
    assert n == 4 and (terms["bandwidth_s"] if terms else s["collective"]["bound_s"]) == pytest.approx(bandwidth_s)
    assert s["collective"]["bound_s"] >= bandwidth_s * (1 - 1e-9)
    # payload each rank sent and received, first transmissions only, over both iterations
    pkts = pd.read_parquet(run_dir / "packets.parquet")
    msgs = pd.read_parquet(run_dir / "messages.parquet").set_index("msg")
    first = pkts[~pkts["retransmit"]].copy()
    first["payload"] = first["bytes"] - HEADER_BYTES
    first["src"] = msgs.loc[first["msg"], "src"].to_numpy()
    first["dst"] = msgs.loc[first["msg"], "dst"].to_numpy()
    want = 2 * SEND_FRACTION[algo](n) * size
    for col in ("src", "dst"):
        per_rank = first.groupby(col)["payload"].sum()
        assert len(per_rank) == n and (per_rank == want).all(), (col, per_rank.to_dict(), want)
