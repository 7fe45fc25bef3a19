import pytest

from converters.util.units import DEFAULT_SHARD_BYTES, format_size, parse_size


@pytest.mark.parametrize("text,expected", [
    ("256MiB", 256 << 20),
    ("1GiB", 1 << 30),
    ("1gib", 1 << 30),
    ("1.5GB", 1_500_000_000),
    ("4096", 4096),
    ("10 KiB", 10 << 10),
    ("2M", 2_000_000),
    (123, 123),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "-1", "0", "1XB", "1.2.3MiB", 0, -5])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError) as exc:
        parse_size(bad)
    assert str(bad) in str(exc.value) or "positive" in str(exc.value)


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (1 << 30, "1.0 GiB")])
def test_format_size(n, text):
    assert format_size(n) == text


def test_default_is_one_gib():
    assert DEFAULT_SHARD_BYTES == 1 << 30
