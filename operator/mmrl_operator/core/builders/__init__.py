"""Pure builders: job (+ attempt) in, Kubernetes object dicts out. No API calls, no clocks, no randomness."""
