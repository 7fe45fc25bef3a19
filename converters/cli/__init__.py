"""The ``tfpipe`` command line: ``main`` (parser, logging, one place that turns errors into a line and an exit
code), ``run`` (the console script: ``main``, then ``leave`` ends the process), ``types`` (shared argument
types and options), one module per command group."""
from __future__ import annotations

from .main import build_parser, main, register, run

__all__ = ["main", "run", "build_parser", "register"]
