"""One run: its lock and cleanup, the processes it starts (by PID), the fault schedule, capture,
and what this machine offers."""
