"""The control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok), the CRDs it is given, fake
SageMaker HyperPod nodes and what HyperPod does to them, and the hostPath storage standing in for FSx."""
