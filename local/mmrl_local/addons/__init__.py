"""What runs against the local cluster as a platform team would run it: the real KubeRay (in the cluster or as a
process), Kueue, an MLflow server, and the mmrl operator itself (a process, a Helm release, a crashing build)."""
