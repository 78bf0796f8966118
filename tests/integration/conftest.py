import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

FOREIGN_BRIDGE = "tbforeign0"


@pytest.fixture
def foreign_bridge():
    """A bridge the testbed did not create: every run and every cleanup must leave it alone."""
    subprocess.run(["ovs-vsctl", "--may-exist", "add-br", FOREIGN_BRIDGE, "--", "set", "bridge", FOREIGN_BRIDGE,
                    "datapath_type=netdev"], check=True)
    yield FOREIGN_BRIDGE
    subprocess.run(["ovs-vsctl", "--if-exists", "del-br", FOREIGN_BRIDGE], check=True)
