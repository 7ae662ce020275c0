"""The `mmrl` command line: validate and render offline, inspect, plot, chat with and run jobs."""
