"""Lets the test modules import the shared helpers module."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
