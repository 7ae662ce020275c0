"""What every part of the local harness uses: child processes that cannot outlive us, a fork server, background
loops, API plumbing (raw requests, server-side apply, Prometheus text), helm with homes of its own, and PKI."""
