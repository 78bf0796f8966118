"""`mn --custom topologies/<name>.py --topo <name>,...` loads the file the way Mininet does:
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
name, args = sys.argv[2], [int(a) for a in sys.argv[3:]]
topo = customs['topos'][name](*args)
from mininet.topo import Topo
assert isinstance(topo, Topo)
print(len(topo.switches()), len(topo.hosts()), len(topo.links()))
"""


@pytest.mark.parametrize("module,args,counts", [
    ("torus", ["2", "3"], "6 6 18"),       # 6 host links + 6 (dim 0 of size 2: parallel) + 6 (dim 1)
    ("fattree", ["4"], "20 16 48"),
    ("leafspine", ["4", "2", "3"], "6 12 20"),
])
def test_topology_files_load_like_mn_custom(tmp_path, module, args, counts):
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no Debian python3")
    check = subprocess.run(["/usr/bin/python3", "-c", "import mininet.topo"], capture_output=True)
    if check.returncode != 0:
        pytest.skip("Mininet is not installed for /usr/bin/python3 (run `make setup`)")
    out = subprocess.run(["/usr/bin/python3", "-c", PROBE, str(ROOT / "topologies" / f"{module}.py"), module, *args],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == counts
