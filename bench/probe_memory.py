"""Peak memory of one /v1/models read when the server behind it offers 400 MiB, unbounded (the old read: the whole
body, then json.loads) and bounded (`service_proxy.proxy_json`: at most 1 MiB under a deadline).

A local server (tests/support/misbehaving_server.py, `huge` or `huge-chunked`) stands in for the apiserver's service
proxy, which passes a pod's answer on as it comes. Each read runs in a fresh Python process that imports the
operator's client code; it reports its peak RSS (VmHWM) before and after the read, and how long the read took.

    python bench/probe_memory.py [--mode huge|huge-chunked]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import common  # noqa: F401  (puts this checkout's sources on the path, for the reads' processes too)
from tests.support import misbehaving_server

READ = """
import json, sys, time
from kubernetes import client
from mmrl_operator.runtime.service_proxy import api_request, proxy_json

def peak():
    return int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:"))) // 1024

api = client.ApiClient(client.Configuration(host=sys.argv[1]))
path = "/api/v1/namespaces/ns/services/geo-inference:8000/proxy/v1/models"
before, start = peak(), time.monotonic()
try:
    if sys.argv[2] == "unbounded":
        json.loads(api_request(api, "GET", path, timeout=300).read())
    else:
        proxy_json(api, "GET", "ns", "geo-inference", 8000, "/v1/models")
    outcome = "read"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {str(exc)[:80]}"
print(json.dumps({"rss_before_mib": before, "rss_peak_mib": peak(), "seconds": round(time.monotonic() - start, 2),
                  "outcome": outcome}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="huge", choices=["huge", "huge-chunked"])
    args = parser.parse_args()
    argv = [sys.executable, misbehaving_server.__file__, "0", args.mode, "127.0.0.1"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        results = {}
        for variant in ("unbounded", "bounded"):
            out = subprocess.run(
                [sys.executable, "-c", READ, f"http://127.0.0.1:{port}", variant],
                capture_output=True,
                text=True,
                check=True,
            )
            results[variant] = json.loads(out.stdout)
            print(variant, results[variant], flush=True)
    finally:
        server.terminate()
        server.wait(10)
    print(json.dumps({"offered_mib": misbehaving_server.HUGE >> 20, "mode": args.mode, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
