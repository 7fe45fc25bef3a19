"""``--memory`` split between the passes (``budget.MemoryBudget``): each pass's share by its table of cases, the
checks of its fields, and the shares a conversion really uses (the pre-pass's spills, pass 1's chunks)."""
from __future__ import annotations

import pytest
import tabularref as R

from converters.shardset.options import ShardOutputOptions
from converters.tabular.budget import MemoryBudget
from converters.tabular.job import TabularJob
from converters.tabular.options import TabularOptions

MiB = 1 << 20


@pytest.mark.parametrize("memory, numeric, categorical, fixed, rows", [
    (64 * MiB, 13, 26, None, 64 * MiB // 4 // (4 + 52 + 208 + 8)),  # Criteo: a quarter of --memory per chunk
    (MiB, 13, 26, None, 1 << 12),                                    # the least
    (1 << 40, 13, 26, None, 1 << 18),                                # the most
    (4 * MiB, 0, 0, None, 4 * MiB // 4 // 12),                       # a label alone: 4 + 8 bytes a row
    (64 * MiB, 13, 26, 97, 97),                                      # set outright
])
def test_chunk_rows_are_a_quarter_of_memory(memory, numeric, categorical, fixed, rows):
    assert MemoryBudget(memory, numeric, categorical, fixed_chunk_rows=fixed).chunk_rows == rows


@pytest.mark.parametrize("memory, categorical, hold", [
    (256 * MiB, 26, 256 * MiB // 26 // 2),  # half of each column's share
    (MiB, 26, 1 << 15),                     # a share of at least 64 KiB
    (MiB, 0, MiB // 2),                     # no categorical column: one share
    (MiB, 1, MiB // 2),
])
def test_counts_hold_half_of_each_columns_share(memory, categorical, hold):
    assert MemoryBudget(memory, 13, categorical).count_bytes == hold


@pytest.mark.parametrize("memory, runs, width, entries", [
    (256 * MiB, 4, 8, 1 << 16),                    # the most
    (64 * MiB, 100, 8, 64 * MiB // 2 // 100 // 16),  # half of --memory over the runs
    (MiB, 10_000, 8, 1 << 10),                     # the least
    (8 * MiB, 0, 120, 8 * MiB // 2 // 128),        # no runs: one share
])
def test_the_merge_reads_half_of_memory_over_the_runs(memory, runs, width, entries):
    assert MemoryBudget(memory, 13, 26).merge_entries(runs, width) == entries


@pytest.mark.parametrize("memory, categorical, fixed, nbytes", [
    (256 * MiB, 26, None, 256 * MiB // 2 // 26),
    (256 * MiB, 0, None, 128 * MiB),
    (256 * MiB, 26, 1, 1),  # set outright: every column on disk
])
def test_lookups_share_half_of_memory(memory, categorical, fixed, nbytes):
    assert MemoryBudget(memory, 13, categorical, fixed_lookup_bytes=fixed).lookup_bytes == nbytes


@pytest.mark.parametrize("kw, words", [
    ({"memory": 0}, "memory must be a positive integer, got 0"),
    ({"memory": "1MiB"}, "memory must be a positive integer, got '1MiB'"),
    ({"numeric": -1}, "numeric must be a non-negative integer, got -1"),
    ({"categorical": 2.5}, "categorical must be a non-negative integer, got 2.5"),
    ({"fixed_chunk_rows": 0}, "fixed_chunk_rows must be a positive integer or None, got 0"),
    ({"fixed_lookup_bytes": True}, "fixed_lookup_bytes must be a positive integer or None, got True"),
])
def test_a_bad_field_is_named_with_its_value(kw, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(".", r"\.")):
        MemoryBudget(**({"memory": MiB, "numeric": 13, "categorical": 26} | kw))


def test_merge_entries_refuses_a_negative_count():
    with pytest.raises(ValueError, match="runs must be a non-negative integer, got -1"):
        MemoryBudget(MiB, 13, 26).merge_entries(-1, 8)


@pytest.mark.parametrize("processes, runs, width", [(1, 4, 8), (2, 4, 8), (4, 40, 16)])
def test_processes_that_merge_at_once_share_the_merges_memory(processes, runs, width):
    whole = MemoryBudget(256 * MiB, 13, 26)
    one = whole.shared(processes)
    assert (one is whole) == (processes == 1)
    held = processes * one.merge_entries(runs, width) * runs * (width + 8)
    assert held <= whole.memory // 2 and one.merge_entries(runs, width) >= whole.merge_entries(runs, width) // processes


@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_shared_refuses_a_bad_count(bad):
    with pytest.raises(ValueError, match=f"processes must be a positive integer, got {bad}"):
        MemoryBudget(MiB, 13, 26).shared(bad)


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    d = tmp_path_factory.mktemp("day")
    rows = 2500  # every value distinct: 2,500 x 16 bytes of counts a column, past 32 KiB
    R.write_day(d / "day", ["\t".join(["1"] + ["5"] * R.NUM + [f"{r * R.CAT + c:08x}" for c in range(R.CAT)])
                            for r in range(rows)])
    return d / "day"


@pytest.mark.parametrize("memory, runs_per_column", [(MiB, 2), (256 * MiB, 1)])
def test_the_pre_pass_spills_past_its_share(day, tmp_path, memory, runs_per_column):
    """At ``--memory 1MiB`` a Criteo column's counts hold 32 KiB (``count_bytes``): 2,500 distinct values
    spill more than one run; at the default they fit one. The job asks the budget its options give."""
    opts = TabularOptions(memory=memory, output=ShardOutputOptions(shard_size=9000))
    job = TabularJob.create([str(day)], str(tmp_path / "s"), opts, block_bytes=4096)
    assert job.budget == MemoryBudget(memory, 13, 26)
    assert job.rows_per_chunk == job.budget.chunk_rows
    counts = job.prepass(job.units()[0])
    assert counts.error is None
    assert [len(r) for r in counts.runs] == [runs_per_column] * R.CAT
