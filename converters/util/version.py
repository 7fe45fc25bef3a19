"""The tool version recorded in every manifest (setup.cfg reads it from here)."""

__version__ = "0.1.0"
