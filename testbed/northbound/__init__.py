"""The northbound API of a running emulation (docs/api.md): its web server, counters and clients."""
