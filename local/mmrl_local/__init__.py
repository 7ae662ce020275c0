"""A laptop-sized real Kubernetes control plane built from Go modules, plus a KubeRay stand-in."""
