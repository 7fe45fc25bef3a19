"""converters.shardset.layoutopts: the --layout / --block-rows options, checked once."""
from __future__ import annotations

import pytest

from converters.cli.parser import TfpipeParser
from converters.shardset.layoutopts import EXAMPLE_OPTIONS, LayoutOptions, add_layout_arguments
from converters.tfrecord.layout import EXAMPLE_LAYOUT, MAX_BLOCK_ROWS, RecordLayout


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "rows"}, "layout must be one of ('example', 'columnar'), got 'rows'"),
    ({"kind": "columnar", "block_rows": 0}, "block_rows must be an integer in [1, 1048576], got 0"),
    ({"kind": "columnar", "block_rows": True}, "block_rows must be an integer in [1, 1048576], got True"),
    ({"kind": "columnar", "block_rows": 2.0}, "block_rows must be an integer in [1, 1048576], got 2.0"),
    ({"block_rows": MAX_BLOCK_ROWS + 1}, f"got {MAX_BLOCK_ROWS + 1}"),
])
def test_bad_options_name_the_value(kwargs, message):
    with pytest.raises(ValueError) as e:
        LayoutOptions(**kwargs)
    assert message in str(e.value)


@pytest.mark.parametrize("options, stored, layout", [
    (EXAMPLE_OPTIONS, {"ids": "int32"}, EXAMPLE_LAYOUT),
    (LayoutOptions("columnar", 64), {"ids": "int32", "label": "uint8"},
     RecordLayout("columnar", 64, (("ids", "int32"), ("label", "uint8")))),
])
def test_record_layout(options, stored, layout):
    assert options.record_layout(stored) == layout


@pytest.mark.parametrize("argv, expected", [
    ([], ("example", None)),
    (["--layout", "columnar"], ("columnar", None)),
    (["--layout", "columnar", "--block-rows", "1024"], ("columnar", 1024)),
])
def test_arguments(argv, expected):
    p = TfpipeParser(prog="t")
    add_layout_arguments(p)
    args = p.parse_args(argv)
    assert (args.layout, args.block_rows) == expected


@pytest.mark.parametrize("argv", [["--layout", "rows"], ["--block-rows", "0"], ["--block-rows", "x"]])
def test_bad_arguments_are_usage_errors(argv, capsys):
    p = TfpipeParser(prog="t")
    add_layout_arguments(p)
    with pytest.raises(SystemExit) as e:
        p.parse_args(argv)
    assert e.value.code == 64
    assert "error:" in capsys.readouterr().err
