import fnmatch

import pytest

from converters.shardset.naming import ShardName


@pytest.mark.parametrize("prefix,suffix,i,n,name", [
    ("train", ".tfrecord", 3, 128, "train-00003-of-00128.tfrecord"),
    ("eval", ".tfrecord.gz", 0, 1, "eval-00000-of-00001.tfrecord.gz"),
    ("a-b", ".tfrecord", 99999, 100000, "a-b-99999-of-100000.tfrecord"),
])
def test_format_parse_glob(prefix, suffix, i, n, name):
    t = ShardName(prefix, suffix)
    assert t.format(i, n) == name
    assert ShardName.parse(name) == (prefix, i, n)
    assert fnmatch.fnmatch(name, t.glob())


def test_names_sort_in_shard_order():
    t = ShardName()
    names = [t.format(i, 20) for i in range(20)]
    assert sorted(names) == names


@pytest.mark.parametrize("kwargs", [{"prefix": ""}, {"prefix": "a/b"}, {"suffix": ".txt"}])
def test_invalid_template(kwargs):
    with pytest.raises(ValueError):
        ShardName(**kwargs)


@pytest.mark.parametrize("i,n", [(-1, 3), (3, 3)])
def test_index_out_of_range(i, n):
    with pytest.raises(ValueError, match=str(i)):
        ShardName().format(i, n)


@pytest.mark.parametrize("bad", ["train.tfrecord", "train-1-of-2.tfrecord", "train-00001-of-00002.txt",
                                 ".tfpipe-tmp-train-00000.tfrecord"])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        ShardName.parse(bad)


@pytest.mark.parametrize("name,why", [
    ("../secret/train-00000-of-00001.tfrecord", "separator"),
    ("/etc/train-00000-of-00001.tfrecord", "separator"),
    ("a\\train-00000-of-00001.tfrecord", "separator"),
    ("..", "not a file name"),
    ("train-00000-of-00001.tfrecord\n", "U\\+000A"),
    ("train\x00-00000-of-00001.tfrecord", "U\\+0000"),
    ("train\u202e-00000-of-00001.tfrecord", "U\\+202E"),
    ("", "not a file name"),
    (None, "not a file name"),
    ("notes.txt", "not a tfpipe shard name"),
    ("train-00003-of-00003.tfrecord", "not below the count"),
    ("train-٠٠٠٠٠-of-00001.tfrecord", "not a tfpipe shard name"),
])
def test_check_shard_name_rejects(name, why):
    from converters.shardset.naming import check_shard_name

    with pytest.raises(ValueError, match=why):
        check_shard_name(name)


@pytest.mark.parametrize("prefix,why", [
    (".", "not a file name|start with '.'"), (".hidden", "start with '.'"), ("a\nb", "U\\+000A"),
    (" a", "white space"), ("p" * 129, "129 bytes long; at most 128"), ("é" * 65, "130 bytes"),
    ("a\\b", "separator"),
])
def test_prefix_must_make_plain_short_names(prefix, why):
    with pytest.raises(ValueError, match=why):
        ShardName(prefix)
    ShardName("p" * 128).format(0, 1)  # the longest prefix still makes a name far below 255 bytes
