"""converters.shardset.links: a name of a set passes through no symbolic link, in any component; the commit
path refuses one, touching nothing (the CLI cases: ``tests/test_hostile_tabular_sets.py``)."""
from __future__ import annotations

import json
import os

import pytest

from converters.shardset.commit import Move, commit_set
from converters.shardset.links import link_problem, linked_component
from converters.storage import open_storage
from converters.util.errors import IntegrityError


def _tree(root):
    (root / "shared").mkdir()
    (root / "shared" / "C1.txt").write_text("a\n")
    (root / "set" / "real").mkdir(parents=True)
    (root / "set" / "real" / "f.txt").write_text("x\n")
    (root / "set" / "plain.txt").write_text("y\n")
    os.symlink(root / "shared", root / "set" / "vocab")
    os.symlink(root / "shared" / "C1.txt", root / "set" / "real" / "C1.txt")


@pytest.mark.parametrize("name, part", [
    ("vocab/C1.txt", "vocab"),            # a linked directory: the file behind it is outside the set
    ("vocab", "vocab"),
    ("real/C1.txt", "real/C1.txt"),       # a linked file
    ("real/f.txt", None),
    ("plain.txt", None),
    ("missing/C1.txt", None),             # nothing there: nothing to follow
    ("plain.txt/C1.txt", None),           # a parent that is a file
])
def test_linked_component(tmp_path, name, part):
    _tree(tmp_path)
    assert linked_component(str(tmp_path / "set"), name) == part
    problem = link_problem(open_storage(str(tmp_path / "set")), name)
    assert (problem is None) == (part is None)
    if part is not None:
        assert problem.startswith(f"{name}: ") and "is a symbolic link; a shard set holds its own files" in problem


def _old_set(root):
    """A set at ``root/set`` whose manifest lists ``vocab/C1.txt`` (behind the link to ``shared/``)."""
    from converters.libsvm.options import libsvm_schema
    from converters.shardset.manifest import Manifest

    m = Manifest(shards=[], schema=libsvm_schema(3), records=0, options={},
                 extra={"files": [{"name": "vocab/C1.txt", "bytes": 2,
                                   "sha256": "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7"}]})
    (root / "set" / "index.json").write_text(json.dumps(m.to_json()))


@pytest.mark.parametrize("case", ["a new file under the link", "an old file under the link"])
def test_a_commit_through_a_link_touches_nothing(tmp_path, case):
    _tree(tmp_path)
    _old_set(tmp_path)
    st = open_storage(str(tmp_path / "set"))
    st.write_bytes_atomic(".tfpipe-tmp-r1-x", b"new\n")
    final = "vocab/X.txt" if case.startswith("a new") else "real/g.txt"  # the old set's vocab/C1.txt is retired
    before = {p: open(p, "rb").read() for p in (tmp_path / "shared").iterdir()}
    index = (tmp_path / "set" / "index.json").read_bytes()
    with pytest.raises(IntegrityError, match=r"/set/vocab/\S+: vocab is a symbolic link; a shard set holds its own "
                                             r"files; tfpipe touched nothing"):
        commit_set(st, [Move(".tfpipe-tmp-r1-x", final)], b"{}", run_id="r1")
    assert {p: open(p, "rb").read() for p in (tmp_path / "shared").iterdir()} == before
    assert (tmp_path / "set" / "index.json").read_bytes() == index and st.exists(".tfpipe-tmp-r1-x")
    assert not [n for n in os.listdir(tmp_path / "set") if n.startswith(".tfpipe-tmp-commit")]
