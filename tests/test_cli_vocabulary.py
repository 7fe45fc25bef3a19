"""One CLI vocabulary (docs/architecture.md, "CLI vocabulary"): walk every subcommand's parser of the full
``tfpipe`` command line and check one spelling per idea, one ``--json`` rule, one name for the shard-set
argument, positive-int types, one meaning of ``--num-shards``, help texts, no abbreviations; hidden aliases
(old spellings kept for one release) are the only exceptions. Each rule is also run against a planted bad
parser, so the check can fail."""
from __future__ import annotations

import argparse
import re

import pytest

from converters.cli import build_parser
from converters.cli.parser import TfpipeParser
from converters.cli.types import positive_int

# an idea -> its one spelling; the other spellings found in earlier releases may only be hidden aliases
PREFERRED = {"--repeat": "--repeats", "--rounds": "--repeats", "--cpu": "--pin-core", "--cpus": "--cores",
             "--threads": "--workers", "--shard-index": "--rank", "--json-file": "--json-out"}
NUM_SHARDS_MEANING = "number of output shards"  # --num-shards is reshard's: output files, nothing else


def walk(parser: argparse.ArgumentParser, path=("tfpipe",)):
    """(command path, parser) of every parser under ``parser``, itself first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, child in action.choices.items():
                if id(child) not in seen:  # aliases of a subcommand share one parser
                    seen.add(id(child))
                    yield from walk(child, path + (name,))


def options(parser):
    """(action, visible) of every optional argument except --help / --version / -v."""
    for a in parser._actions:
        if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction)) \
                and a.dest not in ("verbose", "sub_verbose"):
            yield a, a.help is not argparse.SUPPRESS


def is_leaf(parser) -> bool:
    return not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def problems(root: argparse.ArgumentParser) -> list[str]:
    """Every breach of the vocabulary rules under ``root``, one line each (empty: all good)."""
    out = []
    spelling: dict[str, tuple] = {}  # visible option -> (dest, takes a value, type) of its first use
    for path, p in walk(root):
        cmd = " ".join(path)
        if p.allow_abbrev:
            out.append(f"{cmd}: abbreviations allowed (allow_abbrev must be False)")
        if not isinstance(p, TfpipeParser):
            out.append(f"{cmd}: not a TfpipeParser (usage errors must exit 64 with a hint)")
        texts = [p.description or ""] + [a.help for a in p._actions if isinstance(a.help, str)]
        for t in texts:
            if "``" in t or re.search(r"\bissues? \d+", t):
                out.append(f"{cmd}: help shows markup or an issue number: {t[:60]!r}")
        if is_leaf(p) and "-v" not in p._option_string_actions:
            out.append(f"{cmd}: no -v after the subcommand")
        visible_dests = {a.dest for a, vis in options(p) if vis}
        for a, visible in options(p):
            names = [s for s in a.option_strings if s.startswith("--")]
            if not visible:  # a hidden alias: allowed only as another spelling of a visible option
                if a.dest not in visible_dests:
                    out.append(f"{cmd}: hidden option {names} is no alias of a visible option")
                continue
            for name in names:
                if name in PREFERRED:
                    out.append(f"{cmd}: {name} is spelled {PREFERRED[name]} (the old spelling may only be a "
                               "hidden alias)")
                key = (a.dest, a.nargs == 0, a.type)
                first = spelling.setdefault(name, key + (cmd,))
                if first[:3] != key:
                    out.append(f"{cmd}: {name} means something else than in {first[3]} "
                               f"(dest/value/type {key} vs {first[:3]})")
                if name == "--json" and (a.nargs != 0 or not a.help.startswith("print ")):
                    out.append(f"{cmd}: --json must be a switch that prints JSON on stdout (a file: --json-out)")
                if name == "--json-out" and a.metavar != "PATH":
                    out.append(f"{cmd}: --json-out takes PATH")
                if name == "--num-shards" and NUM_SHARDS_MEANING not in a.help:
                    out.append(f"{cmd}: --num-shards means the {NUM_SHARDS_MEANING}; name rank sharding --ranks")
            if a.type is int:
                out.append(f"{cmd}: {names} has type=int; use positive_int or nonneg_int")
            if not a.help:
                out.append(f"{cmd}: {names} has no help")
            elif a.default not in (None, False, [], argparse.SUPPRESS) and "default" not in a.help:
                out.append(f"{cmd}: {names} does not show its default ({a.default!r})")
        for a in p._actions:
            if a.option_strings or isinstance(a, argparse._SubParsersAction):
                continue
            about_set = re.search(r"shard[ -]set", a.help or "")
            if about_set and a.metavar != "SET":
                out.append(f"{cmd}: the shard-set argument {a.dest!r} must show as SET, shows {a.metavar!r}")
            if a.metavar == "SET" and not about_set:
                out.append(f"{cmd}: SET names a shard set; {a.dest!r}'s help does not say so")
    return out


def test_the_tfpipe_command_line_speaks_one_vocabulary():
    assert problems(build_parser()) == []


def _planted(build):
    root = TfpipeParser(prog="tfpipe")
    sub = root.add_subparsers(dest="command")
    good = sub.add_parser("good", help="a good command")
    good.add_argument("path", metavar="SET", help="the shard set")
    good.add_argument("--repeats", type=positive_int, default=3, help="rounds (default 3)")
    good.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    good.add_argument("-v", action="count", dest="sub_verbose", default=0, help="more logging")
    bad = sub.add_parser("bad", help="a bad command")
    bad.add_argument("-v", action="count", dest="sub_verbose", default=0, help="more logging")
    build(bad)
    return root


@pytest.mark.parametrize("build, expected", [
    (lambda p: p.add_argument("--rounds", type=int, default=2, help="x (default 2)"), "--rounds is spelled --repeats"),
    (lambda p: p.add_argument("--cpus", default=None, help="x"), "--cpus is spelled --cores"),
    (lambda p: p.add_argument("--json", metavar="PATH", help="write JSON"), "--json means something else"),
    (lambda p: p.add_argument("--json-out", metavar="FILE", help="write JSON"), "--json-out takes PATH"),
    (lambda p: p.add_argument("manifest", help="shard-set directory"), "must show as SET"),
    (lambda p: p.add_argument("--steps", type=int, default=None, help="x"), "type=int"),
    (lambda p: p.add_argument("--mode", default="file"), "has no help"),
    (lambda p: p.add_argument("--mode", default="file", help="the mode"), "does not show its default"),
    (lambda p: p.add_argument("--num-shards", default=None, help="ranks"), "--num-shards means the number"),
    (lambda p: p.add_argument("--x", default=None, help=argparse.SUPPRESS), "no alias of a visible option"),
    (lambda p: p.add_argument("--x", default=None, help="see ``foo``"), "markup or an issue number"),
    (lambda p: p.add_argument("--x", default=None, help="as issue 14 asked"), "markup or an issue number"),
    (lambda p: setattr(p, "allow_abbrev", True), "abbreviations allowed"),
    (lambda p: p._remove_action(p._option_string_actions["-v"]) or p._option_string_actions.pop("-v"),
     "no -v after the subcommand"),
])
def test_each_rule_fails_on_a_planted_bad_parser(build, expected):
    found = problems(_planted(build))
    assert any(expected in line for line in found), found
    assert problems(_planted(lambda p: None)) == []

