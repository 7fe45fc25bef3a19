"""``python3 -m converters.cli ...`` runs the ``tfpipe`` command line."""
from __future__ import annotations

from .main import run

run()
