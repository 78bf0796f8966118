"""`mn --custom topologies/torus.py --topo torus,X,Y` loads the file the way Mininet does:
exec'd by Debian's /usr/bin/python3 (no venv packages), without the project on sys.path."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
customs = {}
path = sys.argv[1]
with open(path) as f:
    exec(compile(f.read(), path, 'exec'), customs, customs)
topo = customs['topos']['torus'](2, 3)
from mininet.topo import Topo
assert isinstance(topo, Topo)
print(len(topo.switches()), len(topo.hosts()), len(topo.links()))
print(topo.port('s0_0', 's1_0'), topo.port('h0_0', 's0_0'))
"""


def test_torus_file_loads_like_mn_custom(tmp_path):
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no Debian python3")
    check = subprocess.run(["/usr/bin/python3", "-c", "import mininet.topo"], capture_output=True)
    if check.returncode != 0:
        pytest.skip("Mininet is not installed for /usr/bin/python3 (run `make setup`)")
    out = subprocess.run(["/usr/bin/python3", "-c", PROBE, str(ROOT / "topologies" / "torus.py")],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    counts, ports = out.stdout.splitlines()
    # 2x3 torus: 6 switches, 6 hosts, 6 host links + 6 (dim 0, size 2: parallel) + 6 (dim 1) links
    assert counts == "6 6 18"
    # dimension 0 has size 2: two parallel links, s0_0 + port 2 and - port 3
    assert ports == "[(2, 3), (3, 2)] (0, 1)"
