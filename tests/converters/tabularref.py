"""Criteo-like days and an independent, per-row reference of the tabular definitions (plain Python: dicts,
sorted(), math.log1p), for the tabular tests."""
from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

NUM, CAT = 13, 26


def day_lines(seed: int, rows: int, *, distinct: int = 400) -> list[str]:
    """Criteo-like rows: label, 13 counts (some missing, some negative), 26 Zipf-ish hex values (some missing,
    many seen once)."""
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        f = [str(int(rng.random() < 0.25))]
        for _ in range(NUM):
            r = rng.random()
            f.append("" if r < 0.2 else str(-rng.randint(1, 3)) if r < 0.25 else str(int(rng.paretovariate(1.2)) - 1))
        for c in range(CAT):
            r = rng.random()
            if r < 0.15:
                f.append("")
            elif r < 0.3:
                f.append(f"{rng.getrandbits(32):08x}")  # seen about once
            else:
                f.append(f"{int(rng.paretovariate(1.0)) % distinct + c:08x}")
        out.append("\t".join(f))
    return out


# a narrow table for tests whose subject is not the width: the label, I1, I2 and C1..C3 of a Criteo-like row
NARROW = (0, 1, 2, 1 + NUM, 2 + NUM, 3 + NUM)


def narrow(lines) -> list[str]:
    """Criteo-like rows cut to ``NARROW``'s fields (read with ``write_narrow_schema``'s schema)."""
    return ["\t".join(line.split("\t")[i] for i in NARROW) for line in lines]


def write_narrow_schema(path) -> str:
    """The schema file of ``narrow`` rows; its path as a string."""
    cols = [("label", "label"), ("I1", "numeric"), ("I2", "numeric"), ("C1", "categorical"),
            ("C2", "categorical"), ("C3", "categorical")]
    Path(path).write_text(json.dumps({"columns": [{"name": n, "role": r} for n, r in cols]}))
    return str(path)


def write_day(path, lines, *, crlf: bool = False) -> None:
    nl = "\r\n" if crlf else "\n"
    with open(path, "w", newline="") as fh:
        fh.write("".join(line + nl for line in lines))


def write_parquet(path, lines, *, row_group_size: int | None = None) -> None:
    """The rows as a Parquet table: int64 label and counts, string values (missing: null), columns by name in
    reverse order (read by name: any column order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [fields(ln) for ln in lines]
    cols = {"label": pa.array([int(r[0]) for r in rows], pa.int64())}
    for j in range(NUM):
        cols[f"I{j + 1}"] = pa.array([int(r[1 + j]) if r[1 + j] else None for r in rows], pa.int64())
    for c in range(CAT):
        cols[f"C{c + 1}"] = pa.array([r[1 + NUM + c] or None for r in rows], pa.string())
    names = list(cols)[::-1]
    pq.write_table(pa.table({n: cols[n] for n in names}), path, row_group_size=row_group_size)


def fields(line: str) -> list[str]:
    return line.split("\t")


def vocabularies(lines, min_count: int = 1, ncat: int = CAT) -> list[list[str]]:
    """Per categorical column, the kept values in id order (count descending, then bytes descending)."""
    counts = [Counter() for _ in range(ncat)]
    for line in lines:
        f = fields(line)
        for c in range(ncat):
            v = f[1 + NUM + c]
            if v != "":
                counts[c][v] += 1
    return [[v for v, n in sorted(cnt.items(), key=lambda kv: (kv[1], kv[0].encode()), reverse=True)
             if n >= min_count] for cnt in counts]


def numeric(v: str) -> float:
    x = int(v) if v != "" else 0
    return math.log1p(x if x > 0 else 0)


def deepfm_rows(lines, vocab) -> list[tuple[list[int], list[float], float]]:
    sizes = [len(v) + 1 for v in vocab]
    index = [{s: i + 1 for i, s in enumerate(v)} for v in vocab]
    out = []
    for line in lines:
        f = fields(line)
        ids = list(range(NUM))
        vals = [numeric(f[1 + j]) for j in range(NUM)]
        base = NUM
        for c in range(CAT):
            ids.append(base + index[c].get(f[1 + NUM + c], 0))
            vals.append(1.0)
            base += sizes[c]
        out.append((ids, vals, float(f[0])))
    return out


def dlrm_rows(lines, vocab) -> list[tuple[list[float], list[int], float]]:
    index = [{s: i + 1 for i, s in enumerate(v)} for v in vocab]
    out = []
    for line in lines:
        f = fields(line)
        out.append(([numeric(f[1 + j]) for j in range(NUM)],
                    [index[c].get(f[1 + NUM + c], 0) for c in range(CAT)], float(f[0])))
    return out
