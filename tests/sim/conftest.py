from __future__ import annotations

import sys
from pathlib import Path

# the helpers (known_bugs, sabotage) are imported by name here and in spawned workers
sys.path.insert(0, str(Path(__file__).resolve().parent))
