"""The KubeRay stand-in: a fast, level-triggered loop that moves RayCluster and RayJob status the way KubeRay does
and can inject faults; a contract test keeps it equal to the real KubeRay."""
