"""mmrl operator: MultimodalRLJob API, builders, reconcile decisions and kopf wiring."""
