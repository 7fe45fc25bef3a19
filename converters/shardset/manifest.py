"""The manifest ``index.json`` as a pure model (dataclasses + deterministic JSON; no I/O): the commit marker
of a shard set, written last.

It counts and checksums everything: every shard's name, records, bytes and sha256; the feature schema;
per-input-file accounting (records read / written / skipped by reason); options and tool version.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..tfrecord.layout import EXAMPLE_LAYOUT, RecordLayout
from ..tfrecord.schema import Schema
from ..util.errors import IntegrityError, TfpipeError
from ..util.excerpt import capped
from ..util.fs import is_sha256
from ..util.version import __version__
from .naming import check_adopted_name, check_plain_name, check_shard_name, check_side_name
from .options import normalize_compression

__all__ = ["MANIFEST_NAME", "FORMAT_VERSION", "MAX_EXAMPLES", "ADOPTED_KIND", "ShardInfo", "InputStats", "Manifest",
           "manifest_bytes", "check_entries"]

MANIFEST_NAME = "index.json"
FORMAT_VERSION = 1
MAX_EXAMPLES = 20  # skipped-line examples kept per input file
ADOPTED_KIND = "adopted"  # the kind of a set tfpipe indexed (``tfpipe index``): its files keep their own names


@dataclass(frozen=True)
class ShardInfo:
    name: str
    records: int
    bytes: int
    sha256: str

    def __post_init__(self):
        if self.records < 0 or self.bytes < 0:
            raise ValueError(f"shard {self.name!r}: negative records/bytes ({self.records}, {self.bytes})")


@dataclass
class InputStats:
    """Accounting for one input file: read == written + sum(skipped.values()). ``notes``: informational counts
    of written records (e.g. ``ids_unordered``: fixed-width rows whose positional ids repeat or do not
    increase), never skips; listed in the manifest only when some are counted."""

    path: str
    records_read: int = 0
    records_written: int = 0
    blank_lines: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)  # "file:line: reason" for the first skipped lines
    notes: dict[str, int] = field(default_factory=dict)

    def note(self, key: str, count: int) -> None:
        if count:
            self.notes[key] = self.notes.get(key, 0) + count

    def skip(self, reason: str, count: int = 1, example: str | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count
        if example is not None and len(self.examples) < MAX_EXAMPLES:
            self.examples.append(capped(example))  # a report never grows with a bad record's size

    def merge(self, other: "InputStats") -> None:
        self.records_read += other.records_read
        self.records_written += other.records_written
        self.blank_lines += other.blank_lines
        for k, v in other.skipped.items():
            self.skipped[k] = self.skipped.get(k, 0) + v
        for k, v in other.notes.items():
            self.note(k, v)
        room = MAX_EXAMPLES - len(self.examples)
        if room > 0:
            self.examples.extend(capped(ex) for ex in other.examples[:room])

    @property
    def records_skipped(self) -> int:
        return sum(self.skipped.values())

    def to_json(self) -> dict:
        out = {"path": self.path, "records_read": self.records_read, "records_written": self.records_written,
               "blank_lines": self.blank_lines, "skipped": dict(sorted(self.skipped.items())),
               "examples": list(self.examples)}
        if self.notes:
            out["notes"] = dict(sorted(self.notes.items()))
        return out


@dataclass(frozen=True)
class Manifest:
    records: int
    shards: tuple[ShardInfo, ...]
    schema: Schema
    inputs: tuple[InputStats, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    compression: str | None = None
    kind: str = "libsvm"
    extra: dict[str, Any] = field(default_factory=dict)   # converter-specific totals (tokens, subsets, ...)
    tfpipe_version: str = ""
    format_version: int = FORMAT_VERSION
    location: str | None = field(default=None, compare=False)  # where it was read from (not serialized)
    parts: tuple = ()  # a group read as one set (``group.union``): its parts (``group.PartInfo``), else ()
    layout: RecordLayout = EXAMPLE_LAYOUT  # how records hold rows (``tfrecord.layout``); records count rows

    def __post_init__(self):
        object.__setattr__(self, "compression", normalize_compression(self.compression))
        total = sum(s.records for s in self.shards)
        if total != self.records:
            raise ValueError(f"manifest records {self.records} != sum over shards {total}")
        if not self.tfpipe_version:
            object.__setattr__(self, "tfpipe_version", __version__)
        self.layout.check_schema(self.schema)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def skipped(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in self.inputs:
            for k, v in i.skipped.items():
                out[k] = out.get(k, 0) + v
        return dict(sorted(out.items()))

    def shard_paths(self, base: str | None = None) -> list[str]:
        """Full paths (or s3:// URLs) of the shards, relative to the manifest's directory by default."""
        base = base if base is not None else self.location
        if base is None:
            raise ValueError("manifest location unknown: pass base")
        sep = "" if base.endswith("/") else "/"
        return [f"{base}{sep}{s.name}" for s in self.shards]

    def to_json(self) -> dict:
        return {
            "format_version": self.format_version,
            "tfpipe_version": self.tfpipe_version,
            "kind": self.kind,
            "records": self.records,
            "bytes": self.total_bytes,
            "compression": self.compression,
            "schema": self.schema.to_json(),
            "shards": [asdict(s) for s in self.shards],
            "inputs": [i.to_json() for i in self.inputs],
            "skipped": self.skipped,
            "options": self.options,
            "extra": self.extra,
        } | ({"layout": self.layout.to_json()} if self.layout.columnar else {})

    @classmethod
    def from_json(cls, data: dict, location: str | None = None) -> "Manifest":
        """Parse a manifest. Every entry that names a file is checked first (``check_entries``): a name
        that could lead out of the shard set is an IntegrityError naming the entry, whatever reads it."""
        where = f" {location}" if location else ""
        if not isinstance(data, dict):
            raise TfpipeError(f"invalid manifest{where}: a JSON object expected, got {type(data).__name__}")
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise TfpipeError(f"invalid manifest{where}: no format_version" if version is None else
                              f"unsupported manifest format_version {version!r} (this tfpipe reads {FORMAT_VERSION})")
        check_entries(data, where)
        try:
            return cls(
                records=data["records"],
                shards=tuple(ShardInfo(**s) for s in data["shards"]),
                schema=Schema.from_json(data["schema"]),
                inputs=tuple(InputStats(**i) for i in data.get("inputs", [])),
                options=data.get("options", {}),
                compression=data.get("compression"),
                kind=data.get("kind", "libsvm"),
                extra=data.get("extra", {}),
                tfpipe_version=data.get("tfpipe_version", "?"),
                format_version=version,
                location=location,
                layout=RecordLayout.from_json(data.get("layout")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TfpipeError(f"invalid manifest{where}: {exc!r}") from exc


def check_entries(data: dict, where: str = "") -> None:
    """Raise IntegrityError naming the entry unless every shard entry has a plain shard name in tfpipe's
    template (any plain visible name in an adopted set: ``check_adopted_name``), unique, integer records/bytes >= 0
    and a sha256 of 64 hex digits, every file kept beside the shards (``extra.files``) is named
    ``FOLDER/FILE`` with the same checks, and every tokenizer recorded (``options.tokenizer``, ``extra.tokenizer.name``)
    is a plain name, not a path."""
    shards = data.get("shards")
    if not isinstance(shards, list):
        raise IntegrityError(f"invalid manifest{where}: 'shards' must be a list, got {type(shards).__name__}")
    check_name = check_adopted_name if data.get("kind") == ADOPTED_KIND else check_shard_name
    seen = _check_listed(shards, "shards", "a shard", check_name, ("records", "bytes"), set(), where)
    options, extra = data.get("options"), data.get("extra")
    files = extra.get("files") if isinstance(extra, dict) else None
    if files is not None:
        if not isinstance(files, list):
            raise IntegrityError(f"invalid manifest{where}: 'extra.files' must be a list, got "
                                 f"{type(files).__name__}")
        _check_listed(files, "extra.files", "a file", check_side_name, ("bytes",), seen, where)
    recorded = []
    if isinstance(options, dict) and options.get("tokenizer") is not None:
        recorded.append(("options.tokenizer", options["tokenizer"]))
    tok = extra.get("tokenizer") if isinstance(extra, dict) else None
    if isinstance(tok, dict) and tok.get("name") is not None:
        recorded.append(("extra.tokenizer.name", tok["name"]))
    for key, value in recorded:
        try:
            check_plain_name(value)
        except ValueError as exc:
            raise IntegrityError(f"invalid manifest{where}: {key} {value!r} must name a tokenizer, not a path: "
                                 f"{exc}") from None


def _check_listed(entries: list, what: str, noun: str, check_name, counts: tuple[str, ...], taken: set[str],
                  where: str) -> set[str]:
    """Every entry of the list ``what`` is an object with a name ``check_name`` accepts, listed once (and not
    in ``taken``), integer ``counts`` >= 0 and a sha256 of 64 hex digits; returns the names."""
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise IntegrityError(f"invalid manifest{where}: {what}[{i}] is a {type(entry).__name__}, not an object")
        name = entry.get("name")
        try:
            check_name(name)
        except ValueError as exc:
            raise IntegrityError(f"invalid manifest{where}: {what}[{i}] name {name!r} is not {noun} of this set: "
                                 f"{exc}") from None
        if name in seen or name in taken:
            raise IntegrityError(f"invalid manifest{where}: {what}[{i}] name {name!r} is listed twice")
        seen.add(name)
        for key in counts:
            v = entry.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise IntegrityError(f"invalid manifest{where}: {what}[{i}] ({name}) {key} must be an integer "
                                     f">= 0, got {v!r}")
        sha = entry.get("sha256")
        if not is_sha256(sha):
            raise IntegrityError(f"invalid manifest{where}: {what}[{i}] ({name}) sha256 must be 64 hex digits, "
                                 f"got {sha!r}")
    return seen


def manifest_bytes(manifest: Manifest) -> bytes:
    """Deterministic serialization (sorted keys, no timestamps): indented, with one line per input file (a run
    over many small files has tens of thousands; the compact encoder is ~10x faster than the indenting one)."""
    data = manifest.to_json()
    inputs = data["inputs"]
    data["inputs"] = _PLACEHOLDER
    text = json.dumps(data, indent=2, sort_keys=True)
    rendered = ("[\n" + ",\n".join("    " + json.dumps(i, sort_keys=True) for i in inputs) + "\n  ]"
                if inputs else "[]")
    return (text.replace(json.dumps(_PLACEHOLDER), rendered, 1) + "\n").encode("utf-8")


_PLACEHOLDER = "\x00inputs\x00"  # rendered as "\u0000inputs\u0000": no real value looks like it
