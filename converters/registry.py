"""The format registry: a format's name -> its ``Format`` (what one folder, ``converters/<name>/``, declares).

Engines (local, Beam, Processing), the CLI's shared code and ``sharding`` look a format up here by name and
never import a format package: the built-in formats are listed as ``"module:attribute"`` strings and imported
on first use, so nothing below the formats imports them at import time. A plugin (or a test) adds its own
format with ``register(format_object)``.

A format subclasses ``Format`` and names, in one place (its ``format.py``):

* ``options``: its options class (a frozen dataclass embedding ``ShardOutputOptions`` as ``.output``, with
  ``to_json``);
* ``convert``: its local converter, ``run(inputs, out, options, *, workers, overwrite, progress, prep)``;
* ``job``: its two-pass job for the engines (``engines.steps.TwoPassJob``: ``create(...)`` for a driver,
  ``from_files(options, files, area, *, prep, unit_size)`` for a Processing instance);
* ``cli``: the ``converters.cli`` module of its ``tfpipe convert <name>`` command (``register(convert_sub,
  top_sub)``, ``options_from_args(args)``), or None for a format offered to Python callers only;
* ``suffixes`` (input suffixes a directory is expanded to; None: every file), ``extras`` (pip extras a
  Processing instance installs), ``sums`` / ``nested_sums`` (manifest ``extra`` totals that add up over the
  parts of a ShardedByS3Key run), ``reasons`` (its bad-input reasons), ``routine`` (skip reasons that are
  not bad input) and ``layouts`` (the record layouts it writes: ``("example",)`` unless it declares more);
* and, where the format needs one, the hooks below (``part``, ``empty_error``, ``shared_files``,
  ``scan_round`` / ``scan`` / ``agree``).
"""
from __future__ import annotations

import importlib
import inspect
import logging
from typing import Any, Sequence

__all__ = ["Format", "UnknownFormatError", "get", "names", "formats", "register", "unregister", "load"]

log = logging.getLogger(__name__)

# the built-in formats, imported on first lookup
_BUILTIN = {"libsvm": "converters.libsvm.format:FORMAT", "text": "converters.text.format:FORMAT",
            "tabular": "converters.tabular.format:FORMAT"}
_REGISTERED: dict[str, "Format"] = {}
_ADDED: dict[str, "Format"] = {}  # registered at run time (plugins, tests), after the built-in ones


class UnknownFormatError(ValueError):
    """A format name nobody registered; the message lists the valid ones."""


def load(ref: Any) -> Any:
    """``"package.module:attr"`` -> that attribute (``"package.module"`` -> the module); anything else as is."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    value = importlib.import_module(module)
    return getattr(value, attr) if attr else value


class Format:
    """What a format declares (see the module docstring). Subclass it and set the class attributes: an object
    (a class, a function, a module) or a ``"module:attr"`` string, imported on first use, so that declaring a
    format imports nothing heavy."""

    name: str = ""
    summary: str = ""
    options: Any = None
    convert: Any = None
    job: Any = None
    cli: Any = None
    suffixes: tuple[str, ...] | None = None
    extras: tuple[str, ...] = ("s3",)
    sums: tuple[str, ...] = ()
    nested_sums: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    routine: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ("example",)  # the record layouts it writes (``tfrecord.layout``)
    # its columnar stored types follow from the options alone (text: the vocabulary's size), so instances that each
    # convert a part of the input (ShardedByS3Key) agree on them; False: they need the whole set's value ranges
    types_before_data: bool = False
    # its conversion belongs to the whole input (tabular's vocabularies): ShardedByS3Key instances run one
    # two-pass job over every instance's files, each reading its own (``processing.replicated``), not parts
    one_job_when_sharded: bool = False

    def __repr__(self) -> str:
        return f"<format {self.name!r}>"

    def declared(self, attr: str) -> Any:
        """The object a declaration names (a function set as a class attribute is not bound to the format)."""
        value = inspect.getattr_static(self, attr)
        return load(value.__func__ if isinstance(value, staticmethod) else value)

    # -- what the engines call --------------------------------------------------------------------------
    def options_class(self) -> type:
        return self.declared("options")

    def job_class(self) -> type:
        return self.declared("job")

    def run(self, inputs, out, options, **kwargs):
        """The local converter (one streaming pass in this process): ``convert(inputs, out, options, ...)``."""
        return self.declared("convert")(inputs, out, options, **kwargs)

    def check_layout(self, options) -> None:
        """A ValueError in one line when ``options`` ask for a record layout this format does not write."""
        layout = options.output.layout
        if layout not in self.layouts:
            raise ValueError(f"convert {self.name}: --layout {layout} is not available for this format "
                             f"(layouts: {', '.join(self.layouts)})")

    def part(self, files: Sequence[str], out: str, options, *, workers: int | None):
        """Convert ``files`` into a complete shard set at ``out`` (replacing what is there), as one instance's
        part of a ShardedByS3Key run; inputs without a valid record may give a set without shards."""
        return self.run(list(files), out, options, workers=workers, overwrite=True)

    def create_job(self, inputs, out, options, **kwargs):
        """A driver's two-pass job: expand the inputs, check them, prepare the output (``job.create``)."""
        return self.job_class().create(inputs, out, options, **kwargs)

    def files_job(self, options, files: Sequence[str], area, *, prep=None, unit_size: int | None = None):
        """The two-pass job on files already expanded and an area already prepared (a Processing instance)."""
        return self.job_class().from_files(options, tuple(files), area, prep=prep, unit_size=unit_size)

    # -- hooks with a default ---------------------------------------------------------------------------
    def empty_error(self, inputs: Sequence[Any]) -> Exception | None:
        """The error for a run that wrote no record at all, given every input's ``InputStats`` (None: an
        empty shard set is fine)."""
        return None

    def shared_files(self, options) -> list[tuple[str, str]]:
        """``(flag, path)`` of files every Processing instance must see besides the inputs."""
        return []

    def scan_round(self, options) -> str | None:
        """The name of a decision every ShardedByS3Key instance must share before converting (e.g. LibSVM's
        ``--index-base auto``), or None."""
        return None

    def scan(self, options, files: Sequence[str], workers: int | None) -> dict:
        """This instance's JSON contribution to the ``scan_round`` decision."""
        return {}

    def agree(self, options, scans: Sequence[dict], hosts: Sequence[str]):
        """The options every part converts with, given every host's ``scan`` (host order)."""
        return options

    # -- the command line ---------------------------------------------------------------------------------
    def register_cli(self, convert_sub, top_sub) -> None:
        """Add ``convert <name>`` (and the format's other subcommands) to the ``tfpipe`` parser."""
        if self.cli is not None:
            self.declared("cli").register(convert_sub, top_sub)

    def options_from_args(self, args):
        """The options object ``convert <name>``'s parsed arguments ask for."""
        if self.cli is None:
            raise UnknownFormatError(f"format {self.name!r} has no command line")
        return self.declared("cli").options_from_args(args)


def _check(fmt: Format) -> None:
    if not isinstance(fmt, Format):
        raise TypeError(f"a format is a converters.registry.Format, got {type(fmt).__name__}")
    if not isinstance(fmt.name, str) or not fmt.name.isidentifier() or not fmt.name.islower():
        raise ValueError(f"a format's name is a lower-case identifier, got {fmt.name!r}")
    for attr in ("options", "convert", "job"):
        if getattr(fmt, attr) is None:
            raise ValueError(f"format {fmt.name!r} declares no {attr}")


def names() -> list[str]:
    """Every format's name: the built-in ones, then those registered at run time, in that order."""
    return [*_BUILTIN, *(n for n in _ADDED if n not in _BUILTIN)]


def get(name: str) -> Format:
    """The format called ``name``; ``UnknownFormatError`` (a ValueError) listing the valid names if none is."""
    fmt = _ADDED.get(name) or _REGISTERED.get(name)
    if fmt is not None:
        return fmt
    ref = _BUILTIN.get(name) if isinstance(name, str) else None
    if ref is None:
        raise UnknownFormatError(f"unknown format {name!r}: expected one of {', '.join(names())}")
    fmt = load(ref)
    _check(fmt)
    if fmt.name != name:
        raise ValueError(f"{ref} declares format {fmt.name!r}, registered as {name!r}")
    _REGISTERED[name] = fmt
    return fmt


def formats() -> list[Format]:
    """Every format, in ``names()`` order (imports their ``format`` modules)."""
    return [get(n) for n in names()]


def register(fmt: Format, *, replace: bool = False) -> Format:
    """Add a format at run time (a plugin, a test); a taken name is a ValueError unless ``replace``."""
    _check(fmt)
    if not replace and (fmt.name in _BUILTIN or fmt.name in _ADDED):
        raise ValueError(f"format {fmt.name!r} is already registered")
    _ADDED[fmt.name] = fmt
    log.debug("format %s registered", fmt.name)
    return fmt


def unregister(name: str) -> None:
    """Remove a format added with ``register`` (the built-in ones stay)."""
    _ADDED.pop(name, None)
