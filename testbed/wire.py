"""A RoCEv2 data frame's layout on the wire, as lengths and offsets (testbed.traffic.packets builds and
parses the frames; this module imports nothing, so the scenario checks, the port policy and the
controller can size frames without loading Scapy)."""

ETH_LEN, IP_LEN, UDP_LEN, BTH_LEN, ICRC_LEN = 14, 20, 8, 12, 4
IP_OFF = ETH_LEN
BTH_OFF = ETH_LEN + IP_LEN + UDP_LEN
PSN_OFF = BTH_OFF + 8
PAYLOAD_OFF = BTH_OFF + BTH_LEN
HEADER_BYTES = PAYLOAD_OFF + ICRC_LEN  # frame bytes that are not payload
