"""The emulated fabric: Mininet and Open vSwitch, per-port queue trees, receive steering, routes,
the port policy and its PFC thresholds, and the switch agent with its BPF port program."""
