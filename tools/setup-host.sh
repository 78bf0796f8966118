#!/usr/bin/env bash
# Prepare this machine to run emulations: Debian packages, socket buffers, Open vSwitch.
# Idempotent; every step checks first and only acts when something is missing.
set -euo pipefail

# clang and libbpf-dev build the port BPF program; libbpf1 loads it; tshark decodes captures (tests);
# gcc and zlib1g-dev build the NIC data plane (its ICRC is zlib's CRC-32); chromium loads the
# northbound API's live view headless (its test).
DEB_PACKAGES=(mininet openvswitch-switch ethtool iproute2 tcpdump tshark python3-venv python3-pip procps
             clang libbpf-dev libbpf1 gcc zlib1g-dev chromium)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# ovs-vswitchd (userspace datapath) sends every packet through one AF_PACKET socket whose
# buffer is sized from wmem_default when that socket is created; too small and it drops
# fabric-wide (PLATFORM.md). It reads each port through a socket sized from rmem_default when
# the port is added: at the stock 208 KB a busy vswitchd loses bursts silently (measured: 14 of
# 2048 packets on a k=4 fat-tree permutation; none at 4 MiB).
raise() {
  local key=$1 want=$2 cur
  cur=$(sysctl -n "$key")
  if [ "$cur" -lt "$want" ]; then sysctl -q -w "$key=$want"; fi
}
# 128 MiB, not the 32 MiB that stops the drops above: every frame waiting in any switch port's
# qdisc stays charged to that one send socket, and PFC scenarios hold several MB per paused port
# (measured: incast-pfc lost 505 frames inside Open vSwitch at 32 MiB, none at 128 MiB).
raise net.core.wmem_default 134217728
raise net.core.wmem_max 134217728
raise net.core.rmem_default 4194304
raise net.core.rmem_max 4194304

if ! ovs-vsctl --timeout=2 show >/dev/null 2>&1; then
  echo "setup: starting Open vSwitch"
  /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null
else
  # The send socket took its size when ovs-vswitchd started: restart it if it is too small.
  # A fresh ovs-vswitchd opens that socket at its first send; none yet means it will take the
  # raised wmem_default then, so an empty answer is fine (and must not trip pipefail).
  tb=$(ss -0 -m -p -n -H 2>/dev/null | grep 'ovs-vswitchd' | grep -F '[0]:*' | grep -o 'tb[0-9]*' | head -1 | tr -d tb || true)
  if [ -n "$tb" ] && [ "$tb" -lt "$(sysctl -n net.core.wmem_default)" ]; then
    echo "setup: restarting ovs-vswitchd so its send socket gets the larger buffer"
    /usr/share/openvswitch/scripts/ovs-ctl restart --system-id=random >/dev/null
  fi
fi
ovs-vsctl --timeout=5 show >/dev/null
