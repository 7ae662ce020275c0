"""A program for the fork server's test: prints what it was started with, then exits with the code in argv[1]
(or, given "sleep", waits to be killed)."""

import os
import sys
import time

if __name__ == "__main__":
    print(f"argv={sys.argv[1:]} name={__name__} sid={os.getsid(0) == os.getpid()} mark={os.environ.get('FORKCHILD')}")
    sys.stdout.flush()
    if "kubernetes.config.kube_config" in sys.modules:
        print("kubeconfig=" + sys.modules["kubernetes.config.kube_config"].KUBE_CONFIG_DEFAULT_LOCATION)
    if sys.argv[1] == "sleep":
        time.sleep(600)
    sys.exit(int(sys.argv[1]))
