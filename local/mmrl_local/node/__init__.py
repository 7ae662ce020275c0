"""The local kubelet and the pods it runs for real: sandboxes, containers started from built images (runc) or from
this machine's environments, probes, logs and the mount namespace launcher."""
