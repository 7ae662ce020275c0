"""The pod network on this machine: network namespaces, a bridge and veths per node, the hosts file a pod gets, and
the relay that lets pods reach the apiserver on loopback."""
