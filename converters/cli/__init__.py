"""The ``tfpipe`` command line: ``main`` (parser, logging, one place that turns errors into a line and an exit
code), ``types`` (shared argument types and options), one module per command group."""
from __future__ import annotations

from .main import build_parser, main, register

__all__ = ["main", "build_parser", "register"]
