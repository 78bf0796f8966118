"""Packet-level emulation testbed for AI-training fabrics."""
__version__ = "0.1.0"
