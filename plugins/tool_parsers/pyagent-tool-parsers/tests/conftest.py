"""Lets the test modules import the shared fixtures module."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
