"""What the controller's apps tell each other, as os-ken events: the routing app owns the routes
and publishes each change; any app that depends on them (the QoS app's pause map, a later
monitoring app) subscribes with @set_ev_cls instead of computing routes of its own."""
from __future__ import annotations

from os_ken.controller import event

from testbed.fabric.routing import RouteTable


class EventRoutesChanged(event.EventBase):
    """The routes the routing app has just installed (switch -> host -> next-hop ports) and the
    links they avoid. Sent when a reroute starts; the switches confirm it by barrier later."""

    def __init__(self, routes: RouteTable, down_links: tuple[str, ...]):
        super().__init__()
        self.routes = routes
        self.down_links = down_links
