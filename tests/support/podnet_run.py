"""A run that owns a pod network and one sandboxed pod, and nothing else: the subject of the teardown tests.

``python -m tests.support.podnet_run API_HOST API_PORT WORKDIR POD_JSON close|hold`` sandboxes the pod (a real pod of
the test's control plane, as JSON), starts ``sleep`` in its network namespace through ``podrun``, prints one JSON
line (run id, bridge, namespace, host veth, sleep pid), then closes its network normally (``close``) or waits to
be killed (``hold``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from mmrl_local.network.podnet import PodNetwork
from mmrl_local.node import podrun


def main(argv: list[str]) -> int:
    host, port, workdir, pod_json, mode = argv
    network = PodNetwork((host, int(port)), Path(workdir)).start()
    pod = json.loads(pod_json)
    box = network.sandbox(pod)
    view = podrun.PodView(pod=pod["metadata"]["name"], env=dict(os.environ), mounts=[], cwd="/", command=[])
    sleeper = podrun.spawn_in_pod(view, ["sleep", "600"], Path(workdir) / "sleep.log", Path(workdir) / "root", box)
    facts = {
        "run": network.run,
        "bridge": network.bridge,
        "netns": box.netns,
        "veth": box.host_veth,
        "pid": sleeper.pid,
    }
    print(json.dumps(facts), flush=True)
    if mode == "hold":
        while True:
            time.sleep(3600)
    network.close()
    sleeper.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
