"""The northbound API during a real run (docs/api.md): incast-pfc's fabric read while its traffic
flows, a policy change through the controller with the run's token, Prometheus's exposition, and
the live view in Debian's headless chromium; then the API gone with the run."""
from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import ROOT, cli_argv, env_with_results, run_dirs, summary_of
from testbed.run.procs import tcp_listening

pytestmark = pytest.mark.root

PORT = 18650
STARTED = re.compile(r"northbound API on http://127\.0\.0\.1:(\d+)/ \(token (\S+);")


def get(path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=10) as r:
        return json.loads(r.read())


def post(path: str, body: dict, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=json.dumps(body).encode(),
                                 headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def traffic_flowing(timeout_s: float) -> bool:
    """Whether some switch port's transmit counter moves between two reads within timeout_s."""
    deadline = time.monotonic() + timeout_s
    before = {p["port"]: p["tx_bytes"] for p in get("/api/v1/ports")["ports"]}
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = {p["port"]: p["tx_bytes"] for p in get("/api/v1/ports")["ports"]}
        if any(v > before.get(k, 0) for k, v in now.items()):
            return True
        before = now
    return False


class LiveRun:
    """`testbed run` in the background, its output read line by line."""

    def __init__(self, results, *args):
        self.proc = subprocess.Popen(cli_argv("run", *args), cwd=ROOT, env=env_with_results(results),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: re.Pattern, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            m = pattern.search(line)
            if m:
                return m
        raise AssertionError("the run never said its API was up:\n" + "".join(self.out[-60:]))

    def finish(self, timeout_s: float = 600) -> int:
        return self.proc.wait(timeout_s)


@pytest.fixture
def live_run(tmp_path):
    # at D = 80000 its traffic flows for about 16 s of wall clock: time for the reads, changes and a browser
    run = LiveRun(tmp_path, "incast-pfc", "--set", "run.report=false", "--set", f"run.api_port={PORT}",
                  "--set", "run.dilation=80000")
    yield run
    if run.proc.poll() is None:
        run.proc.terminate()
        run.proc.wait(60)


def test_the_api_reads_the_fabric_changes_its_policy_and_goes_with_the_run(live_run, tmp_path):
    m = live_run.wait_for(STARTED, 300)
    assert int(m.group(1)) == PORT
    token = m.group(2)

    index = get("/api/v1")
    assert index["scenario"] == "incast-pfc" and index["dilation_factor"] == 80000
    topo = get("/api/v1/topology")
    assert len(topo["switches"]) == 6 and len(topo["hosts"]) == 20   # incast-pfc's leaf-spine
    assert all("\u2192" in l["label"] for l in topo["links"])
    assert sorted({round(l["bw_gbps_hw"], 6) for l in topo["links"]}) == [100.0, 400.0]
    routes = get("/api/v1/routes")
    assert set(routes["routes"]) == {s["name"] for s in topo["switches"]}

    # counters move while the traffic flows: some port sends more between two reads
    assert traffic_flowing(60), "no switch port's transmit counter moved during the traffic"
    ports = get("/api/v1/ports")["ports"]
    assert {p["port"] for p in ports} == {f"{l[e]}-eth{l[e + '_port']}" for l in topo["links"] for e in ("a", "b")
                                          if l[e] in {s["name"] for s in topo["switches"]}}
    assert all(len(p["classes"]) == 3 for p in ports)

    # what the verdict will weigh, seen so far: the agent sampled Open vSwitch's input backlog
    fid = get("/api/v1/fidelity")["fidelity"]
    assert fid["ovs_input_samples"] > 0 and 0 <= fid["ovs_input_busy_fraction"] <= 1
    assert 0 < fid["machine_busy_fraction"] <= 1

    # the queue pairs as the data plane last wrote them (every 200 ms): the incast's 15 senders and
    # the victim's one, their frames sent moving once its next heartbeat is out
    for _ in range(50):
        qps = get("/api/v1/qps")["qps"]
        if sum(q["frames_sent"] for q in qps) > 0:
            break
        time.sleep(0.1)
    assert len(qps) == 16 and all(0 <= q["frames_acked"] <= q["frames_sent"] for q in qps)
    assert sum(q["frames_sent"] for q in qps) > 0, "no queue pair's frames sent moved during the traffic"
    assert all(q["dcqcn_rate_gbps_hw"] is None for q in qps)   # incast-pfc runs no congestion control

    # PFC pauses, from the switch agent's telemetry through the controller: the incast pauses its
    # senders' path hop by hop in every run (incast-pfc's expectations)
    for _ in range(50):
        ports = get("/api/v1/ports")["ports"]
        if any(p["pauses_sent"] for p in ports) and any(p["pauses_received"] for p in ports):
            break
        time.sleep(0.1)
    assert any(p["pauses_sent"] for p in ports) and any(p["pauses_received"] for p in ports), ports

    # `testbed status` prints the same, worst port first
    out = subprocess.run(cli_argv("status", "--port", str(PORT), "--once", "--top", "5"), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "incast-pfc" in out.stdout and "\u2192" in out.stdout, out.stdout + out.stderr
    assert f"{len(ports)} switch ports" in out.stdout, out.stdout

    # a change needs the token, names a real field, and goes through the controller
    status, body = post("/api/v1/policy", {"class": "bulk", "field": "buffer_bytes", "value": "512KiB"}, None)
    assert status == 401, body
    status, body = post("/api/v1/policy", {"class": "bulk", "field": "buffer_bytez", "value": 1}, token)
    assert status == 400 and "buffer_bytez" in body["error"], body
    status, body = post("/api/v1/policy", {"class": "bulk", "field": "buffer_bytes", "value": "512KiB"}, token)
    assert status == 200 and body["ok"] and body["sent_now"] and body["queues"] > 0, body
    policy = get("/api/v1/policy")
    assert next(c for c in policy["classes"] if c["name"] == "bulk")["buffer_bytes"] == 512 * 1024
    assert policy["changes"][-1]["field"] == "buffer_bytes"

    # a link down and up again through the runner, as a [[faults]] entry takes it: one between two
    # switches that carried no RoCE frame so far (PFC's pauses and resumes cross every link), so the
    # incast loses nothing to it
    switches = {s["name"] for s in topo["switches"]}
    sent = {p["port"]: next(c["tx_bytes"] for c in p["classes"] if c["class_name"] == "roce")
            for p in get("/api/v1/ports")["ports"]}
    idle = next(l["name"] for l in topo["links"] if l["a"] in switches and l["b"] in switches
                and sent[f"{l['a']}-eth{l['a_port']}"] == 0 and sent[f"{l['b']}-eth{l['b_port']}"] == 0)
    status, body = post(f"/api/v1/links/{idle}", {"state": "down"}, None)
    assert status == 401, body
    status, body = post("/api/v1/links/s9-s9", {"state": "down"}, token)
    assert status == 400 and "s9-s9" in body["error"], body
    status, body = post(f"/api/v1/links/{idle}", {"state": "down"}, token)
    assert status == 200 and body["fault"]["action"] == "link_down" and body["fault"]["by"] == "api", body
    for _ in range(50):   # the controller hears of the port going down and reroutes around it
        if idle in get("/api/v1/routes")["down_links"]:
            break
        time.sleep(0.1)
    assert idle in get("/api/v1/routes")["down_links"]
    status, body = post(f"/api/v1/links/{idle}", {"state": "up"}, token)
    assert status == 200 and body["fault"]["action"] == "link_up", body

    families = {f.name: f for f in text_string_to_metric_families(
        urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=10).read().decode())}
    tx = families["testbed_port_transmit_bytes"]
    assert len(tx.samples) == sum(len(p["classes"]) for p in ports)
    assert {s.labels["class"] for s in tx.samples} == {"control", "roce", "bulk"}
    assert families["testbed_dilation_factor"].samples[0].value == index["dilation_factor"]

    rc = live_run.finish()
    assert rc in (0, 4), "".join(live_run.out[-80:])
    assert not tcp_listening("127.0.0.1", PORT), "the API outlived its run"
    run_dir = run_dirs(tmp_path)[-1]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["api"]["port"] == PORT
    assert "northbound api" in manifest["cpu"]["processes_cores"]
    # its cost is in the run's account of who used the CPU
    assert summary_of(run_dir)["fidelity"]["cores_used"]["northbound api"] < 0.5
    events = [json.loads(l) for l in (run_dir / "raw" / "controller_events.jsonl").read_text().splitlines()]
    asked = [e for e in events if e["event"] == "qos_app_request" and e["app"] == "Northbound"]
    assert len(asked) == 1 and asked[0]["field"] == "buffer_bytes" and asked[0]["sent_now"]
    faults = summary_of(run_dir)["faults"]
    assert [(f["action"], f["link"], f["by"]) for f in faults] == [("link_down", idle, "api"), ("link_up", idle, "api")]
    assert any(e["event"] == "reroute_done" and e["t_ns"] > faults[0]["t_ns"] for e in events)
    # the agent applied an update after the request: the change reached the switches
    assert any(e["event"] == "qos_applied" and e["kind"] == "update" and e["t_ns"] > asked[0]["t_ns"] for e in events)


def test_the_live_view_shows_every_switch_and_moves_with_the_traffic(live_run, tmp_path):
    assert shutil.which("chromium"), "Debian's chromium is missing: make setup installs it (tools/setup-host.sh)"
    live_run.wait_for(STARTED, 300)
    # the traffic flowing now: a port's counter moving between two reads. (A counter above zero is
    # not enough: CI once opened the page before the first frame, and 1.5 s of stream showed idle links.)
    assert traffic_flowing(120), "no switch port's transmit counter moved: the traffic never flowed"
    switches_served = {s["name"] for s in get("/api/v1/topology")["switches"]}
    run_dir = next(tmp_path.glob("incast-pfc/*"))
    shot = run_dir / "live.png"
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1000,700",
            "--virtual-time-budget=3000"]
    # 15 ticks of the stream (1.5 s of the traffic), then the page stands still and the browser dumps it
    page = f"http://127.0.0.1:{PORT}/?ticks=15"
    dom = subprocess.run(argv + ["--dump-dom", page], capture_output=True, text=True,
                         timeout=120).stdout
    subprocess.run(argv + [f"--screenshot={shot}", page], capture_output=True, timeout=120)
    switches = set(re.findall(r'data-switch="([^"]+)"', dom))
    assert switches == switches_served, dom[:2000]
    ticks = int(re.search(r'data-ticks="(\d+)"', dom).group(1))
    assert ticks == 15, "the page did not take its 15 ticks of the stream"
    # a link drawn busy: the page coloured it from the stream's utilisation
    assert re.search(r'stroke="#(2c7|fb3|e33)"', dom), "no link drawn as carrying traffic"
    assert shot.exists() and shot.stat().st_size > 10_000
    assert live_run.finish() in (0, 4), "".join(live_run.out[-80:])
