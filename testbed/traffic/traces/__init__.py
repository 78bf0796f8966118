"""Training traces users already have, turned into message DAGs with compute (pure).

- chakra: Chakra execution traces (MLCommons), read with our own protobuf wire-format reader
  (protobuf; the schema is not on PyPI).
- simai: SimAI / ASTRA-sim 1.0 text workloads.

Both scale bytes and times by the scenario's factors. A malformed file raises TraceError naming
the file and the position (byte offset, or line and field).
"""
from testbed.traffic.traces.chakra import (CHAKRA_COLLECTIVES, COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE,
                                           ChakraNode, chakra_files, chakra_messages, read_chakra)
from testbed.traffic.traces.common import TraceError
from testbed.traffic.traces.simai import SimaiLayer, SimaiWorkload, read_simai, simai_groups, simai_messages

__all__ = ["CHAKRA_COLLECTIVES", "COMM_COLL_NODE", "COMM_RECV_NODE", "COMM_SEND_NODE", "COMP_NODE", "ChakraNode",
           "SimaiLayer", "SimaiWorkload", "TraceError", "chakra_files", "chakra_messages", "read_chakra",
           "read_simai", "simai_groups", "simai_messages"]
