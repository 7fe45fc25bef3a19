"""Engine options that need no engine loaded: ``--beam-option KEY=VALUE`` parsing and the runner names."""
from __future__ import annotations

from typing import Iterable

__all__ = ["parse_beam_options", "runner_key", "IN_PROCESS_RUNNERS", "REFUSED_RUNNERS"]

IN_PROCESS_RUNNERS = ("", "direct", "fnapi", "switchingdirect")  # names that mean Beam's in-process FnApiRunner
REFUSED_RUNNERS = ("prism",)  # downloads a runner binary


def parse_beam_options(items: Iterable[str]) -> dict[str, str | bool]:
    """``["runner=DataflowRunner", "direct_num_workers=2", "save_main_session=true"]`` -> a dict (a later
    KEY wins); ``true`` / ``false`` become booleans (Beam's flags)."""
    out: dict[str, str | bool] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ValueError(f"a Beam option is KEY=VALUE, got {item!r}")
        low = value.strip().lower()
        out[key] = True if low == "true" else False if low == "false" else value
    return out


def runner_key(name: str | None) -> str:
    """``"apache_beam.runners.direct.direct_runner.DirectRunner"`` / ``"DirectRunner"`` / ``"direct"`` ->
    ``"direct"``."""
    name = (name or "").rsplit(".", 1)[-1].lower()
    return name[:-len("runner")] if name.endswith("runner") else name
