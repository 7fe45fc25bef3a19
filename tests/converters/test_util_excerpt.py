"""converters.util.excerpt: what a message quotes is capped, and says how long the whole was."""
from __future__ import annotations

import pytest

from converters.shardset.manifest import MAX_EXAMPLES, InputStats
from converters.util.excerpt import EXAMPLE_CHARS, FIELD_BYTES, capped, excerpt


@pytest.mark.parametrize("raw, want", [
    (b"260.5", "'260.5'"),
    (b"", "''"),
    (b"x" * FIELD_BYTES, repr("x" * FIELD_BYTES)),
    (b"9x" * (1 << 20), f"{'9x' * (FIELD_BYTES // 2)!r}... (2,097,152 bytes)"),
    (b"\xff\xfeab", "'\ufffd\ufffdab'"),
])
def test_excerpt(raw, want):
    assert excerpt(raw) == want


@pytest.mark.parametrize("text, want", [
    ("short", "short"),
    ("y" * EXAMPLE_CHARS, "y" * EXAMPLE_CHARS),
    ("z" * (EXAMPLE_CHARS + 1), "z" * EXAMPLE_CHARS + f"... ({EXAMPLE_CHARS + 1:,} characters)"),
])
def test_capped(text, want):
    assert capped(text) == want


def test_a_skip_report_is_bounded_whatever_the_examples():
    a, b, c = InputStats("a"), InputStats("b"), InputStats("c")
    for _ in range(MAX_EXAMPLES + 5):
        a.skip("not_an_integer", 1, "a:1: " + "q" * (1 << 20))
    b.examples = ["b:1: " + "w" * (1 << 20)]  # a report of a manifest written before the cap
    c.merge(b)
    c.merge(a)
    assert len(a.examples) == len(c.examples) == MAX_EXAMPLES
    assert all(len(ex) < EXAMPLE_CHARS + 40 for ex in a.examples + c.examples)
    assert a.skipped == {"not_an_integer": MAX_EXAMPLES + 5} and c.examples[0].startswith("b:1: www")
