"""Launch os-ken with the testbed's apps (os-ken 4.x has no manager command).

    python -m controllers.launcher --port 16653 --app proactive_routing --app qos_policy \
        [--app-file path/to/my_app.py ...] --fabric fabric.json --scenario scenario.json \
        --events events.jsonl [--param agent_socket=NAME]

The OpenFlow listener binds to 127.0.0.1 only. Apps receive a ``testbed`` context: the fabric, the
resolved scenario (loaded once, here: every app reads its settings from it, the one channel they
share), the event log, the run's wiring parameters (the agent's socket name) and ``ready``. The
apps of --app-file (a scenario's controller.apps) are os-ken apps in files anywhere; the event log's
``plugin_apps`` names them, and the run waits for each one's ``app_ready`` (docs/controller-apps.md).

os-ken 4.x ships no manager command, so this is also how to start a controller of your own for a
scenario's controller.remote: ``python -m controllers.launcher --port 6653 --app-file my_app.py``
(without --fabric and --scenario its apps get ``testbed.fabric`` and ``testbed.scenario`` None).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field

from controllers.events import EventLog
from testbed.scenario import Scenario
from topologies.model import Fabric

LISTEN_HOST = "127.0.0.1"
APPS = ("proactive_routing", "qos_policy", "northbound", "ecn_tuning")


@dataclass
class AppSettings:
    fabric: Fabric | None
    scenario: Scenario | None
    events: EventLog
    params: dict = field(default_factory=dict)

    def ready(self, app) -> None:
        """What an app calls once whatever it sets up before traffic is in place: the run starts its
        traffic only when every app of the scenario's own has."""
        self.events.write("app_ready", app=app.name)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="controllers.launcher")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--app", choices=APPS, action="append", default=[], help="a built-in app to run (repeatable)")
    ap.add_argument("--app-file", action="append", default=[], help="an os-ken app in a file of its own (repeatable)")
    ap.add_argument("--fabric", help="fabric description (JSON, topologies.model)")
    ap.add_argument("--scenario", help="the resolved scenario (JSON, Scenario.to_dict)")
    ap.add_argument("--events", default=os.devnull, help="event log to append to (JSON lines)")
    ap.add_argument("--param", action="append", default=[], help="app parameter key=value")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    import os_ken.controller.controller  # noqa: F401  (registers the ofp-* options)

    cfg.CONF(args=["--ofp-listen-host", LISTEN_HOST, "--ofp-tcp-listen-port", str(args.port)],
             project="os_ken")
    fabric = scenario = None
    if args.fabric:
        with open(args.fabric) as f:
            fabric = Fabric.from_json(f.read())
    events = EventLog(args.events)
    if args.scenario:
        with open(args.scenario) as f:
            scenario = Scenario.from_dict(json.load(f))
    params = dict(p.split("=", 1) for p in args.param)
    settings = AppSettings(fabric=fabric, scenario=scenario, events=events, params=params)

    def stop(signum, _frame):
        events.write("controller_stopped", signal=signum)
        events.close()
        os._exit(0)  # os-ken's hub threads cannot be joined; nothing is left to flush

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    mgr = AppManager.get_instance()
    # os-ken's OpenFlow listener comes with the first app that handles OpenFlow events; the QoS app
    # alone (a scenario's controller.remote) has none, and the run waits for the port all the same
    mgr.load_apps([f"controllers.{app}" for app in args.app] + [os.path.abspath(p) for p in args.app_file]
                  + ["os_ken.controller.ofp_handler"])
    contexts = mgr.create_contexts()
    contexts["testbed"] = settings
    threads = mgr.instantiate_apps(**contexts)
    # os-ken imports a file as a module named by its stem
    stems = {os.path.splitext(os.path.basename(p))[0]: p for p in args.app_file}
    events.write("plugin_apps", apps=[{"app": name, "file": stems[type(app).__module__]}
                                      for name, app in mgr.applications.items() if type(app).__module__ in stems])
    events.write("controller_listening", host=LISTEN_HOST, port=args.port, pid=os.getpid())
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
