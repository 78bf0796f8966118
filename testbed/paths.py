"""Where the project's own folders are: the checkout's root, found once from this file, so that a
module's place in the package tree never decides where builds, results or baselines are."""
from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = PROJECT_ROOT / "build"          # what `make setup` compiles (the BPF object, the NIC library)
