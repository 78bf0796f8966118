"""The northbound API of a running emulation: Starlette on uvicorn, on 127.0.0.1 only, in a
process of its own beside the controller (docs/api.md has every endpoint with an example).

    python -m testbed.northbound.server RUN_DIR --port P --controller-socket NAME

started by the runner once the switch agent has its policy, with the port program's map file
descriptors inherited and the run's token in TESTBED_API_TOKEN. Reads need no token; a change needs
``Authorization: Bearer <token>``. It does nothing while nobody asks: counters are read when a
request or a stream wants them, so an unused API costs a run no CPU."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from testbed.fabric.agent_plan import MAX_INPUT_BUSY_FRACTION, MAX_MACHINE_BUSY_FRACTION, AgentPlan
from testbed.fabric.bpfmaps import MappedArrays
from testbed.northbound.counters import PortCounters, link_label, port_rows
from testbed.northbound.link import LINK_VERSION, ControllerLink, ControllerUnavailable, check_version
from testbed.northbound.prometheus import RunCollector
from testbed.northbound.sync_share import LiveSyncShare
from testbed.records import read_compute_busy, read_engine_progress, read_qp_live
from testbed.run.cpu import stat_totals
from testbed.runfolder import RunFolder
from testbed.traffic.plan import EnginePlan, compute_streams, weighs_in_sync_share
from topologies.model import Fabric

API_VERSION = 1
LISTEN_HOST = "127.0.0.1"
STREAM_HZ = 10.0
STATE_MAX_AGE_S = 0.09   # one controller round trip serves every client within a stream tick
TOKEN_ENV = "TESTBED_API_TOKEN"
LIVE_PAGE = Path(__file__).with_name("live.html")
POLICY_BODY = ("class", "field", "value", "port")
RUNNER_TIMEOUT_S = 10.0


class RunApi:
    """What the endpoints read: the run's folder, its fabric, the counters and the controller."""

    def __init__(self, run_dir: Path, token: str, counters: PortCounters | None, link: ControllerLink | None,
                 runner: socket.socket | None = None):
        self.runner = runner   # the runner's socket pair end: links down and up
        self._runner_lock = asyncio.Lock()
        self._runner_ids = 0
        self.rf = RunFolder(run_dir)
        self.flows = None   # the engine's queue pairs, read from its plan once it is there
        self.n_streams = 0   # and its compute streams, and their shares
        self.sync: LiveSyncShare | None = None
        self.cpu0 = stat_totals()
        self.fabric = Fabric.from_json(self.rf.fabric.read_text())
        self.scenario = json.loads(self.rf.scenario.read_text())
        self.dilation = float(self.scenario.get("dilation", {}).get("factor") or 1.0)
        self.token, self.counters, self.link = token, counters, link
        self.started_ns = time.monotonic_ns()
        self._state, self._state_ns = None, 0
        self.ofports = {f"{s}-eth{p}": (s, p) for s, ports in self.fabric.ports.items() for p in ports}

    async def state(self) -> dict:
        """The controller's routes, policy and the agent's latest telemetry (cached a stream tick)."""
        now = time.monotonic_ns()
        if self._state is None or now - self._state_ns > STATE_MAX_AGE_S * 1e9:
            if self.link is None:
                raise ControllerUnavailable("this API has no controller link")
            self._state, self._state_ns = await self.link.request("state"), now
        return self._state

    async def ask_runner(self, **req) -> dict:
        """A request to the runner (one at a time), answered once its traffic loop carries it out."""
        if self.runner is None:
            raise ControllerUnavailable("this API has no link to the runner")
        loop = asyncio.get_running_loop()
        async with self._runner_lock:
            self._runner_ids += 1
            rid = self._runner_ids
            await loop.sock_sendall(self.runner, json.dumps({"link_version": LINK_VERSION, "id": rid, **req}).encode())
            while True:
                try:
                    answer = json.loads(await asyncio.wait_for(loop.sock_recv(self.runner, 65536), RUNNER_TIMEOUT_S))
                except asyncio.TimeoutError:
                    raise ControllerUnavailable(f"the runner did not answer within {RUNNER_TIMEOUT_S:g} s (its "
                                                f"traffic phase has not started, or has ended)") from None
                if check_version(answer, "the runner").get("id") == rid:
                    return answer

    def _read_plan(self) -> bool:
        """The engine's plan, once it is there: its queue pairs and compute streams."""
        if self.flows is not None:
            return True
        try:
            plan = EnginePlan.from_json(json.loads(self.rf.engine_plan.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return False
        streams = compute_streams(plan.messages)
        weighed = {m.host for m in plan.messages if weighs_in_sync_share(m)}
        self.sync = LiveSyncShare(streams, [h in weighed for h in streams], self.dilation)
        self.n_streams = len(streams)
        self.flows = [f.to_json() for f in plan.flows]
        return True

    def qps(self) -> list[dict]:
        """Every queue pair at the data plane's last heartbeat (every 200 ms): what it sent and had
        acknowledged, resent, and its DCQCN state; rates in the hardware fabric's Gb/s."""
        if not self._read_plan():
            return []
        live = read_qp_live(self.rf.heartbeat, len(self.flows))
        if live is None:
            return []
        return [{"qp": f["id"], "src": f["src"], "dst": f["dst"], "tag": f["tag"], "class": f["class"],
                 "dscp": f["dscp"], "frames_sent": int(q["next"]), "frames_acked": int(q["una"]),
                 "in_flight": int(q["next"] - q["una"]), "retransmitted": int(q["retransmitted"]),
                 "cnps": int(q["cnps"]), "rate_cuts": int(q["cuts"]),
                 # DCQCN's rate limiter (none without congestion control)
                 "dcqcn_rate_gbps_hw": float(q["rate_bps"]) * self.dilation / 1e9 if q["rate_bps"] else None,
                 "dcqcn_target_gbps_hw": float(q["target_bps"]) * self.dilation / 1e9 if q["rate_bps"] else None,
                 "dcqcn_alpha": float(q["alpha"]) if q["rate_bps"] else None}
                for f, q in zip(self.flows, live)]

    def fidelity(self, telemetry: dict | None) -> dict:
        """What can be seen of the fidelity verdict's inputs during the traffic: the machine's CPU
        since the API came up, and Open vSwitch's input backlog in the switch agent's samples."""
        now = stat_totals()
        total, idle, steal = (now[i] - self.cpu0[i] for i in range(3))
        samples, busy = ((telemetry or {}).get("ovs_input") or [0, 0])
        return {"machine_busy_fraction": 1 - idle / total if total else None,
                "machine_busy_limit": MAX_MACHINE_BUSY_FRACTION,
                "steal_fraction": steal / total if total else None,
                "ovs_input_samples": samples, "ovs_input_busy_samples": busy,
                "ovs_input_busy_fraction": busy / samples if samples else None,
                "ovs_input_busy_limit": MAX_INPUT_BUSY_FRACTION,
                "judged_after_the_traffic": "every busy link's and host's drain rate, window by window, from the "
                                            "frames' timestamps: the run's FIDELITY line and summary.json"}

    def progress(self) -> dict | None:
        p = read_engine_progress(self.rf.heartbeat)
        if p is None:
            return None
        training = None
        if self._read_plan() and self.sync is not None:
            training = self.sync.update(read_compute_busy(self.rf.heartbeat, len(self.flows), self.n_streams))
        return {"messages_done": p.messages_done, "messages_acked": p.messages_acked, "messages": p.messages,
                "payload_bytes_done": p.payload_bytes_done, "payload_bytes": p.payload_bytes,
                "done_fraction": p.payload_bytes_done / p.payload_bytes if p.payload_bytes else None,
                "traffic_us_hw": (p.beat_ns - p.started_ns) / self.dilation / 1e3,
                # the workers' synchronisation share so far (testbed.northbound.sync_share); None for a
                # workload without compute
                "training": training}

    async def ports(self) -> list[dict]:
        if self.counters is None:
            return []
        try:
            telemetry = (await self.state()).get("telemetry")
        except ControllerUnavailable:
            telemetry = None   # the maps still answer; pauses then read as none
        return self.counters.records(telemetry)

    def header(self) -> dict:
        return {"api_version": API_VERSION, "run": self.rf.root.name, "scenario": self.scenario.get("name"),
                "dilation_factor": self.dilation, "t_s": (time.monotonic_ns() - self.started_ns) / 1e9}


def authorised(api: RunApi, request: Request) -> bool:
    given = request.headers.get("authorization", "")
    return given.startswith("Bearer ") and secrets.compare_digest(given[7:].strip(), api.token)


def make_app(api: RunApi) -> Starlette:
    async def index(request):
        return JSONResponse({**api.header(), "endpoints": {
            "GET /api/v1/topology": "switches, hosts and links (by their ends), with rates",
            "GET /api/v1/routes": "each switch's next-hop ports to each host, as the controller has them",
            "GET /api/v1/ports": "every switch port's counters and rates over the last second, per class",
            "GET /api/v1/policy": "the classes' queue policy as it stands, and the changes made so far",
            "POST /api/v1/policy": "change one field of a class's policy (token)",
            "POST /api/v1/links/{name}": "take a link down or up (token), as a [[faults]] entry does",
            "GET /api/v1/progress": "the traffic's progress",
            "GET /api/v1/fidelity": "the fidelity verdict's inputs seen so far: the machine's CPU, Open vSwitch's backlog",
            "GET /api/v1/qps": "every queue pair: frames sent, acknowledged and resent, CNPs, DCQCN's rate and alpha",
            "GET /api/v1/stream": "server-sent events at 10 Hz: progress and per-port counters",
            "GET /metrics": "the same counters in Prometheus's text format",
            "GET /": "the live view"}})

    async def topology(request):
        f = api.fabric
        return JSONResponse({**api.header(), "kind": f.kind, "dims": list(f.dims),
                             "switches": [{"name": s.name, "coord": list(s.coord)} for s in f.switches],
                             "hosts": [{"name": h.name, "switch": h.switch, "ip": h.ip} for h in f.hosts],
                             "links": [{"name": l.name, "label": link_label(l.a, l.b), "a": l.a, "a_port": l.a_port,
                                        "b": l.b, "b_port": l.b_port, "bw_mbps": l.bw_mbps,
                                        "bw_gbps_hw": (l.bw_mbps or 0.0) * api.dilation / 1e3} for l in f.links]})

    async def from_controller(*keys):
        """The controller's state's keys, or 503 when it does not answer."""
        try:
            s = await api.state()
        except ControllerUnavailable as e:
            return JSONResponse({"error": str(e)}, status_code=503)
        return JSONResponse({**api.header(), **{k: s[k] for k in keys}})

    async def routes(request):
        return await from_controller("routes", "down_links")

    async def policy(request):
        if request.method == "POST":
            return await change_policy(request)
        return await from_controller("classes", "changes")

    async def change_body(request):
        """A change's JSON body, or the response refusing it: no token (401), no JSON (400)."""
        if not authorised(api, request):
            return None, JSONResponse({"error": "a change needs the run's token: Authorization: Bearer <token> "
                                                "(printed when the run starts)"}, status_code=401)
        try:
            return await request.json(), None
        except ValueError:
            return None, JSONResponse({"error": "the body must be JSON"}, status_code=400)

    async def change_policy(request):
        body, refused = await change_body(request)
        if refused:
            return refused
        if not isinstance(body, dict) or not {"class", "field", "value"} <= set(body) or set(body) - set(POLICY_BODY):
            return JSONResponse({"error": f"expected an object with class, field, value and optionally port "
                                          f"(a switch port's interface name); got {body!r}"}, status_code=400)
        switch = ofport = None
        if body.get("port") is not None:
            if body["port"] not in api.ofports:
                return JSONResponse({"error": f"port: no switch port {body['port']!r}"}, status_code=400)
            switch, ofport = api.ofports[body["port"]]
        asked_ns = time.monotonic_ns()
        try:
            answer = await api.link.request("set_policy", class_name=body["class"], field=body["field"],
                                            value=body["value"], switch=switch, port=ofport)
        except ControllerUnavailable as e:
            return JSONResponse({"error": str(e)}, status_code=503)
        api._state = None   # the next read shows the change
        out = {"ok": answer["ok"], "asked_ns": asked_ns, "answered_ns": time.monotonic_ns(),
               "queues": answer.get("queues", 0), "sent_now": answer.get("sent", False)}
        if not answer["ok"]:
            return JSONResponse({**out, "error": answer.get("why", "")}, status_code=400)
        return JSONResponse(out)

    async def set_link(request):
        body, refused = await change_body(request)
        if refused:
            return refused
        if not isinstance(body, dict) or body.get("state") not in ("down", "up") or set(body) != {"state"}:
            return JSONResponse({"error": f'expected {{"state": "down"}} or {{"state": "up"}}, got {body!r}'},
                                status_code=400)
        asked_ns = time.monotonic_ns()
        try:
            answer = await api.ask_runner(action=f"link_{body['state']}", link=request.path_params["name"])
        except ControllerUnavailable as e:
            return JSONResponse({"error": str(e)}, status_code=503)
        api._state = None
        if not answer["ok"]:
            return JSONResponse({"ok": False, "error": answer["why"]}, status_code=400)
        return JSONResponse({"ok": True, "asked_ns": asked_ns, "fault": answer["fault"]})

    async def progress(request):
        return JSONResponse({**api.header(), "progress": api.progress()})

    async def fidelity(request):
        try:
            telemetry = (await api.state()).get("telemetry")
        except ControllerUnavailable:
            telemetry = None
        return JSONResponse({**api.header(), "fidelity": api.fidelity(telemetry)})

    async def qps(request):
        return JSONResponse({**api.header(), "qps": api.qps()})

    async def ports(request):
        records = await api.ports()
        window = api.counters.window_s() if api.counters else 0.0
        return JSONResponse({**api.header(), "rate_window_s": window, "ports": records})

    async def stream(request):
        async def events():
            while True:
                if await request.is_disconnected():
                    return
                records = await api.ports()
                yield {"event": "tick", "data": json.dumps({
                    **api.header(), "progress": api.progress(),
                    "ports": [{k: p[k] for k in ("port", "link", "utilisation_pct", "queue_bytes", "paused",
                                                  "ecn_marked", "dropped", "pauses_received", "pauses_sent")}
                              for p in records]})}
                await asyncio.sleep(1 / STREAM_HZ)
        return EventSourceResponse(events(), ping=5)

    async def metrics(request):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RunCollector(api.header(), await api.ports(), api.progress(), api.qps()))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def live(request):
        return FileResponse(LIVE_PAGE, media_type="text/html")

    return Starlette(routes=[
        Route("/api/v1", index), Route("/api/v1/topology", topology), Route("/api/v1/routes", routes),
        Route("/api/v1/ports", ports), Route("/api/v1/qps", qps), Route("/api/v1/fidelity", fidelity), Route("/api/v1/policy", policy, methods=["GET", "POST"]),
        Route("/api/v1/links/{name}", set_link, methods=["POST"]), Route("/api/v1/progress", progress), Route("/api/v1/stream", stream), Route("/metrics", metrics),
        Route("/", live)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="testbed.northbound.server")
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--controller-socket", required=True)
    ap.add_argument("--runner-fd", type=int, help="the runner's socket pair end (links down and up)")
    args = ap.parse_args(argv)
    import uvicorn

    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        print(f"{TOKEN_ENV} is not set: no change could be authorised", file=sys.stderr)
        return 2
    rf = RunFolder(args.run_dir)
    plan = AgentPlan.from_json(json.loads(rf.agent_plan.read_text()))
    maps = MappedArrays(plan.map_fds, names=("queues", "corrupt"), writable=False)
    fabric = Fabric.from_json(rf.fabric.read_text())
    dilation = float(json.loads(rf.scenario.read_text()).get("dilation", {}).get("factor") or 1.0)
    counters = PortCounters(port_rows(plan, fabric), maps.views["queues"], maps.views["corrupt"], dilation)
    link = ControllerLink(args.controller_socket)
    runner = None
    if args.runner_fd is not None:
        runner = socket.socket(fileno=args.runner_fd)
        runner.setblocking(False)
    api = RunApi(args.run_dir, token, counters, link, runner)

    async def serve():
        await link.connect()
        counters.sample()   # the first rates then cover the time since the API came up
        config = uvicorn.Config(make_app(api), host=LISTEN_HOST, port=args.port, log_level="warning",
                                access_log=False, lifespan="off")
        await uvicorn.Server(config).serve()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
