"""The clients of the API bench (bench/__main__.py `api`), in a process of their own so that they
cost the run what a user's clients would: a stream reader at the API's 10 Hz, a Prometheus scrape a
second, `testbed status`'s two reads a half second, and one policy change (a class-wide field set to
the value it already has: the whole path runs, the fabric's behaviour does not change).

    python -m bench.api_clients PORT TOKEN CLASS FIELD VALUE

Runs until the API goes away, then prints one JSON line: requests made, failures, the change's
answer (with its asked_ns, CLOCK_MONOTONIC as the controller's events are) and this process's CPU."""
from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request


def main(argv=None) -> int:
    port, token, cls, field, value = (argv or sys.argv[1:])
    base = f"http://127.0.0.1:{port}"
    stats = {"stream_ticks": 0, "scrapes": 0, "status_reads": 0, "failures": 0, "change": None}
    gone = threading.Event()

    def stream():
        try:
            with urllib.request.urlopen(f"{base}/api/v1/stream", timeout=10) as r:
                for line in r:
                    if line.startswith(b"event: tick"):
                        stats["stream_ticks"] += 1
        except (OSError, urllib.error.URLError):
            pass
        gone.set()

    def poll(path, every_s, key):
        while not gone.is_set():
            try:
                urllib.request.urlopen(f"{base}{path}", timeout=10).read()
                stats[key] += 1
            except (OSError, urllib.error.URLError):
                stats["failures"] += 1
            gone.wait(every_s)

    threads = [threading.Thread(target=stream, daemon=True),
               threading.Thread(target=poll, args=("/metrics", 1.0, "scrapes"), daemon=True),
               threading.Thread(target=poll, args=("/api/v1/ports", 0.5, "status_reads"), daemon=True),
               threading.Thread(target=poll, args=("/api/v1/progress", 0.5, "status_reads"), daemon=True)]
    for t in threads:
        t.start()
    time.sleep(1.0)   # into the traffic
    body = json.dumps({"class": cls, "field": field, "value": json.loads(value)}).encode()
    req = urllib.request.Request(f"{base}/api/v1/policy", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            stats["change"] = json.loads(r.read())
    except urllib.error.HTTPError as e:
        stats["change"] = {"status": e.code, **json.loads(e.read())}
    gone.wait(600)
    stats["cpu_s"] = time.process_time()
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
