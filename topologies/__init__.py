"""Fabric topologies as pure data: no Mininet import here.

Every identifier of a node (name, DPID, MAC, IP, port numbers) is derived from its
coordinate in one place, so the controller, the traffic engine and the results all
speak of the same things.
"""
