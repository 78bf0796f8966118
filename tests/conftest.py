import os
import shutil

import pytest


def _emulation_possible() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ovs-vsctl", "mnexec", "ethtool"):
        if not shutil.which(tool):
            return f"needs {tool} (run `make setup`)"
    return None


def pytest_collection_modifyitems(config, items):
    why = _emulation_possible()
    if why is None:
        return
    # In CI these tests must run: a skipped emulation test would hide a broken setup.
    if os.environ.get("CI"):
        raise pytest.UsageError(f"emulation tests cannot run in CI: {why}")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))
