"""The data plane's doorbell socket on a real interface (root, in a network namespace of its own,
on its loopback): it is handed a copy of a message's last frame (SEND_LAST or SEND_ONLY) and of
nothing else, neither the other RoCE frames nor other traffic, nor our own frames going out."""
import json
import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.root

PROBE = r"""
import json, select, socket
from pyroute2 import IPRoute
from scapy.all import IP, UDP, Ether, Raw
from testbed.traffic.engine import DOOR_RCVBUF_BYTES, tap
from testbed.traffic.packets import (MESSAGE_END_FILTER, RC_SEND_FIRST, RC_SEND_LAST, RC_SEND_MIDDLE, RC_SEND_ONLY,
                                     AckTemplate, DataTemplate, CnpTemplate)

with IPRoute() as ipr:
    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
ends = dict(src_mac="00:00:00:00:00:00", dst_mac="00:00:00:00:00:00", src_ip="127.0.0.1", dst_ip="127.0.0.1")
door = tap("lo", MESSAGE_END_FILTER, DOOR_RCVBUF_BYTES)
out = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
out.bind(("lo", 0))
frames = {name: bytes(DataTemplate(**ends, dscp=26, flow=3, payload_bytes=1024, opcode=op).fill(7, 9, 0, 1))
          for name, op in (("first", RC_SEND_FIRST), ("middle", RC_SEND_MIDDLE), ("last", RC_SEND_LAST),
                           ("only", RC_SEND_ONLY))}
frames["ack"] = bytes(AckTemplate(**ends, dscp=48, flow=3).fill(7, 0, 1))
frames["cnp"] = CnpTemplate(**ends, dscp=48, flow=3).bytes
frames["udp_other_port"] = bytes(Ether() / IP(src="127.0.0.1", dst="127.0.0.1") / UDP(dport=4792) / Raw(bytes(64)))
got = []
for name, f in frames.items():
    out.send(f)
    while select.select([door], [], [], 0.2)[0]:
        copy = door.recv(9000)
        got.append((name, len(copy), copy == f[:len(copy)]))
print(json.dumps(got))
"""


def test_the_doorbell_sees_only_the_last_frame_of_a_message():
    out = subprocess.run(["unshare", "--net", "--", sys.executable, "-c", PROBE], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # each once (our own transmission is not looped to it), cut to 64 bytes, unchanged
    assert got == [["last", 64, True], ["only", 64, True]]
