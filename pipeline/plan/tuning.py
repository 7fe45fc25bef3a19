"""The engine behind ``tfpipe pipeline tune``: time output-equivalent read configs in paired rounds.

Noise on a shared machine moves every candidate of a round together (another job starts, the CPU clocks
down), so candidates are compared inside rounds: each round runs every candidate once, in an order rotated
by one per round (no candidate always runs first, or always after the same neighbour), and a candidate's
score is the median over rounds of its records/s divided by the reference's (the built-in rule) in the same
round. The highest score wins; ties go to the earlier candidate, the rule first; and a candidate other than
the rule wins only when its score beats 1 by more than the rounds' noise (the median absolute deviation of
its per-round ratios, at least ``NOISE_FLOOR``): a 1.01× "winner" is luck, not a reason to change the default.

Two phases guard against the winner's curse (the best of many noisy scores is often just the luckiest): a
screening phase times every candidate in a few rounds, then the final phase times the built-in rule and
the best screened candidates in more rounds, and the winner comes from the final phase only. Each round's
timed window is resized to fit what is left of the time budget.

A third phase guards against a winner that collapses on a busy host (a training host runs other ranks,
evaluation, preprocessing): a final-phase winner other than the rule is timed against the rule again, in paired
rounds beside one busy process per core (``pipeline.plan.contention``), and stored only if it reads at least
as fast as the rule there too (``CONTENDED_MIN``); otherwise the rule is kept, and the report and ``explain``
say so with both scores.

``tune_read(spec, build_fn)`` takes the graph builder (``build_dataset``) as an argument, so that the builder
itself can call it for ``tune="on-first-use"`` without an import cycle.
"""
from __future__ import annotations

import datetime
import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from converters.util.errors import TfpipeError

from .contention import busy_neighbours
from .readplan import ReadConfig, candidates, data_fingerprint, tunable
from .tunestore import (
    TUNE_FORMAT,
    TuneLookup,
    lookup_from_doc,
    machine_fingerprint,
    save_result,
)

__all__ = ["TuneReport", "tune_read", "run_rounds", "time_one", "paired_ratios", "paired_scores", "pick_winner",
           "rotation", "median", "round_noise", "format_report", "DEFAULT_SECONDS", "DEFAULT_ROUNDS",
           "ON_FIRST_USE_SECONDS", "ON_FIRST_USE_ROUNDS", "NOISE_FLOOR", "RANKING_NOTE", "CONTENDED_MIN",
           "CONTEND_SHARE", "CONTEND_ROUNDS"]

log = logging.getLogger(__name__)

DEFAULT_SECONDS = 30.0
DEFAULT_ROUNDS = 7
MIN_ROUNDS = 3
SCREEN_ROUNDS = 3
SCREEN_SHARE = 0.45    # share of the budget for screening every candidate
FINALISTS = 3          # best screened candidates timed again (besides the rule) in the final phase
ON_FIRST_USE_SECONDS = 8.0     # timing budget of tune="on-first-use" (with start-up and the last round: ≤ 10 s)
ON_FIRST_USE_ROUNDS = 5
WARMUP_BATCHES = 2
RUN_SHARE = 0.7        # share of the budget spent inside timed windows (the rest: graph start-up, warm-up)
MIN_WINDOW = 3
NOISE_FLOOR = 0.02     # a candidate must beat the rule by more than 2 % (or the rounds' noise, if larger)
CONTEND_SHARE = 0.25   # share of the budget kept for the contention phase (the winner vs the rule, cores busy)
CONTEND_ROUNDS = 3
CONTENDED_MIN = 1.0    # beside the busy processes the winner must read at least as fast as the rule (median)
RANKING_NOTE = ("ranked by 'vs rule': the median over paired rounds of a candidate's records/s divided by the built-in "
                "rule's in the same round (> 1: faster); 'records/s' is its own median, which busy rounds skew")


# -- paired-round statistics (pure) ---------------------------------------------------------------------

def median(values: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("median of no values")
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def rotation(names: Sequence[str], r: int) -> list[str]:
    """Round ``r``'s run order: ``names`` rotated left by ``r``."""
    k = r % len(names) if names else 0
    return list(names[k:]) + list(names[:k])


def paired_ratios(rates: Mapping[str, Sequence[float]], reference: str) -> dict[str, list[float]]:
    """Per round, each candidate's rate over the reference's rate in the same round."""
    if reference not in rates:
        raise ValueError(f"reference {reference!r} is not among the candidates {sorted(rates)}")
    ref = rates[reference]
    out = {}
    for name, rs in rates.items():
        if len(rs) != len(ref):
            raise ValueError(f"{name!r} has {len(rs)} rounds, the reference {len(ref)}: rounds must be paired")
        out[name] = [a / b for a, b in zip(rs, ref) if b > 0]
    return out


def paired_scores(rates: Mapping[str, Sequence[float]], reference: str) -> dict[str, float]:
    """Median over rounds of each candidate's rate relative to the reference's (the reference scores 1)."""
    return {n: (median(r) if r else 0.0) for n, r in paired_ratios(rates, reference).items()}


def round_noise(ratios: Sequence[float], floor: float = NOISE_FLOOR) -> float:
    """How much a candidate's per-round ratios to the reference scatter: their median absolute deviation from
    their median, at least ``floor``. A score within ``1 ± noise`` is not a measured difference."""
    if not ratios:
        return floor
    m = median(ratios)
    return max(floor, median([abs(x - m) for x in ratios]))


def pick_winner(scores: Mapping[str, float]) -> str:
    """The highest score; ties go to the candidate listed first."""
    if not scores:
        raise ValueError("no candidates")
    best = None
    for name, s in scores.items():
        if best is None or s > scores[best]:
            best = name
    return best


# -- timing ---------------------------------------------------------------------------------------------

def _records(batch: Any) -> int:
    """The leading dimension of a batch's first tensor (a batch is a tensor, tuple or dict of tensors)."""
    while isinstance(batch, (tuple, list, dict)):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return int(batch.shape[0])


def time_one(make: Callable[[], Iterable], *, window: int, warmup: int = WARMUP_BATCHES,
             max_seconds: float | None = None, clock: Callable[[], float] = time.perf_counter) -> tuple[int, float]:
    """(records, seconds) of one run: a new iterator of ``make()``'s dataset, ``warmup`` batches untimed, then
    ``window`` batches timed (or fewer, when ``max_seconds`` runs out first)."""
    it = iter(make())
    for _ in range(warmup):
        if next(it, None) is None:
            break
    records = batches = 0
    start = clock()
    for batch in it:
        records += _records(batch)
        batches += 1
        if batches >= window or (max_seconds is not None and clock() - start >= max_seconds):
            break
    return records, clock() - start


def next_window(window: int, *, timed: float, overhead: float, target: float) -> int:
    """The window for the next round so that it lasts about ``target`` seconds, given the last round's timed
    seconds and its untimed overhead (graph start-up, warm-up); between MIN_WINDOW and 4× ``window``."""
    if timed <= 0:
        return window
    want = window * (target - overhead) / timed
    return int(max(MIN_WINDOW, min(4 * window, want)))


def run_rounds(factories: Mapping[str, Callable[[], Iterable]], *, rounds: int, window: int,
               warmup: int = WARMUP_BATCHES, max_seconds: float | None = None, budget_s: float | None = None,
               min_rounds: int = MIN_ROUNDS, clock: Callable[[], float] = time.perf_counter,
               on_round: Callable[[int, dict], None] | None = None) -> dict[str, list[float]]:
    """records/s of every candidate in each round (rotated order). With ``budget_s``, each round's window is
    resized to fit the rest of the budget, and once ``min_rounds`` are done no round is started that would
    end past it."""
    if rounds < 1 or window < 1:
        raise ValueError(f"rounds and window must be >= 1, got {rounds} and {window}")
    names = list(factories)
    rates: dict[str, list[float]] = {n: [] for n in names}
    start = clock()
    cap = max_seconds
    for r in range(rounds):
        began, timed = clock(), 0.0
        for name in rotation(names, r):
            records, seconds = time_one(factories[name], window=window, warmup=warmup, max_seconds=cap,
                                        clock=clock)
            timed += seconds
            rates[name].append(records / seconds if seconds > 0 else 0.0)
        if on_round is not None:
            on_round(r, rates)
        if budget_s is None or r + 1 == rounds:
            continue
        took = clock() - began
        left = budget_s - (clock() - start)
        new = next_window(window, timed=timed, overhead=took - timed, target=left / (rounds - r - 1))
        estimate = (took - timed) + timed * new / window
        if r + 1 >= min_rounds and estimate > left:
            break
        cap = None if cap is None else cap * new / window
        window = new
    return rates


# -- the report -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TuneReport:
    """One tuning run: every candidate's median records/s, its paired ratio to the built-in rule and to the
    winner, and the fingerprints the result is stored under."""

    rows: tuple[dict, ...]            # label, config, phase, records_per_s, vs_rule, vs_winner, rates
    winner: ReadConfig
    reference: ReadConfig
    rounds: int                       # final-phase rounds
    seconds: float
    finalists: int
    machine: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    created: str = ""
    where: str = ""
    path: str | None = None
    best: ReadConfig | None = None    # the top score, when it did not beat the rule beyond the noise
    noise: float = 0.0                # the rounds' noise the winner had to beat
    contended: dict | None = None     # the contention phase: neighbours, rounds, vs_rule, label of the one timed
    rejected: ReadConfig | None = None   # the quiet winner that lost to the rule beside the busy processes

    @property
    def vs_rule(self) -> float:
        """The winner's median paired ratio to the built-in rule."""
        return next(r["vs_rule"] for r in self.rows if r["label"] == self.winner.label())

    def to_json(self) -> dict[str, Any]:
        from converters.util.version import __version__

        return {"format": TUNE_FORMAT, "tfpipe_version": __version__, "created": self.created,
                "where": self.where, "machine": self.machine, "data": self.data, "rounds": self.rounds,
                "seconds": round(self.seconds, 3), "finalists": self.finalists,
                "reference": {"label": self.reference.label(), "config": self.reference.to_json()},
                "winner": {"label": self.winner.label(), "config": self.winner.to_json(), "vs_rule": self.vs_rule,
                           "options": self.winner.options()},
                "noise": round(self.noise, 4),
                **({"contended": self.contended} if self.contended else {}),
                **({"rejected": {"label": self.rejected.label(), "vs_rule": self._score(self.rejected),
                                 "contended_vs_rule": self.contended["vs_rule"]}} if self.rejected else {}),
                **({"best": {"label": self.best.label(), "vs_rule": self._score(self.best)}} if self.best else {}),
                "candidates": list(self.rows)}

    def _score(self, config: ReadConfig) -> float:
        return next(r["vs_rule"] for r in self.rows if r["label"] == config.label())

    def lookup(self) -> TuneLookup:
        """What ``read="auto"`` uses from this report (as ``PipelineSpec.tuning``)."""
        return lookup_from_doc(self.to_json(), self.path)


def format_report(report: TuneReport, *, manifest: str | None = None) -> str:
    """The table ranked by the paired ratio to the built-in rule (explained in one line), what was stored and
    why, and the options that reproduce the winner."""
    rule = report.reference.label()
    width = max(len("candidate"), *(len(r["label"]) for r in report.rows))
    lines = [RANKING_NOTE, f"{'candidate':<{width}}  {'vs rule':>8}  {'records/s':>10}"]
    screened = False
    for r in report.rows:
        if r["phase"] == "screen" and not screened:
            screened = True
            lines.append(f"-- screened out after {SCREEN_ROUNDS} rounds (vs rule from those rounds):")
        mark = "  <- winner" if r["label"] == report.winner.label() else ""
        mark += "  (built-in rule)" if r["label"] == rule else ""
        lines.append(f"{r['label']:<{width}}  {r['vs_rule']:>7.2f}x  {r['records_per_s']:>10,.0f}{mark}")
    lines.append("")
    noise = f"±{report.noise:.1%}"
    c = report.contended
    if report.rejected is not None:
        lines.append(f"kept the built-in rule: {report.rejected.label()} read {report._score(report.rejected):.2f}x "
                     f"the rule quiet but {c['vs_rule']:.2f}x beside {c['neighbours']} busy process(es) (median of "
                     f"{c['rounds']} paired rounds): a winner must also win under contention")
    elif report.best is not None:
        lines.append(f"kept the built-in rule: the best candidate, {report.best.label()}, scored "
                     f"{report._score(report.best):.2f}x, within the rounds' noise ({noise}; median of "
                     f"{report.rounds} paired rounds, {report.seconds:.1f} s)")
    else:
        lines.append(f"winner: {report.winner.label()}: {report.vs_rule:.2f}x the built-in rule (noise {noise}; "
                     f"median of {report.rounds} paired rounds, {report.seconds:.1f} s)")
        if c:
            lines.append(f"  and {c['vs_rule']:.2f}x beside {c['neighbours']} busy process(es) (median of "
                         f"{c['rounds']} paired rounds): it wins under contention too")
    if report.path:
        lines.append(f"stored in {report.path}: read='auto' (the default) uses it on this machine for this data "
                     f"and batch size")
    opts = ", ".join(f"{k}={v!r}" for k, v in report.winner.options().items())
    where = repr(manifest or report.where or "DIR")
    lines.append(f"to pin it anywhere: PipelineSpec.from_manifest({where}, {report.data.get('batch_size')}, {opts})")
    return "\n".join(lines)


# -- tuning ---------------------------------------------------------------------------------------------

def tune_read(spec, build_fn: Callable[[Any], Any], *, seconds: float = DEFAULT_SECONDS,
              rounds: int = DEFAULT_ROUNDS, store: bool = True, where: str | None = None, quick: bool = False,
              clock: Callable[[], float] = time.perf_counter,
              on_round: Callable[[int, dict], None] | None = None, contend=None) -> TuneReport:
    """Time every output-equivalent read config for ``spec`` on this machine (about ``seconds`` in all,
    TensorFlow's start-up not counted) and store the winner under the machine's and the data's fingerprints
    (``store=False``: do not). ``quick``: only the four main candidates (``tune="on-first-use"``).
    ``contend``: a function giving the context manager of the contention phase (it yields the number of busy
    neighbours); default one busy process per core (``contention.busy_neighbours``)."""
    if not seconds > 0 or rounds < 1:
        raise ValueError(f"seconds must be > 0 and rounds >= 1, got {seconds!r} and {rounds!r}")
    reason = tunable(spec.with_(read="auto"))
    if spec.read != "auto" or reason is not None:
        raise TfpipeError(f"nothing to tune: {reason or f'read={spec.read!r} is fixed'}")
    data = data_fingerprint(spec)
    if data is None:
        raise TfpipeError("tuning needs a spec made by PipelineSpec.from_manifest: the manifest's sha256 keys the "
                          "stored result")
    machine = machine_fingerprint()
    if spec.cores != machine["cpu_count"]:
        raise TfpipeError(f"tuning measures this machine ({machine['cpu_count']} vCPUs): the spec plans for "
                          f"{spec.cores} cores")
    configs = candidates(spec, quick=quick)
    import tensorflow  # noqa: F401  (imported before the clock starts: its start-up is not tuning time)

    by_label = {c.label(): c for c in configs}
    labels = list(by_label)
    rule = labels[0]
    base = spec.with_(epochs=1, cache="none", tune="off", tuning=None)

    def factory(c: ReadConfig):
        """The candidate's dataset, built on first use and kept: every round times a new iterator of it (its
        own buffers, threads and autotuning) without tracing the graph's functions again."""
        built: list = []

        def make():
            if not built:   # the rule is timed as build_dataset builds it (batches parsed one by one)
                built.append(build_fn(base if c == configs[0] else base.with_(**c.options())).repeat())
            return built[0]
        return make

    factories = {label: factory(c) for label, c in by_label.items()}
    t0 = clock()
    records, secs = time_one(factories[rule], window=20, max_seconds=min(2.0, seconds / 10), clock=clock)
    batches_per_s = (records / spec.batch_size) / secs if secs > 0 and records else 100.0

    def phase(names: list[str], n_rounds: int, budget: float) -> dict[str, list[float]]:
        per_run = RUN_SHARE * budget / (n_rounds * len(names))
        window = max(MIN_WINDOW, int(per_run * batches_per_s))
        log.info("timing %d candidates: %d rounds, %d-batch windows", len(names), n_rounds, window)
        return run_rounds({n: factories[n] for n in names}, rounds=n_rounds, window=window,
                          max_seconds=3 * per_run, budget_s=budget, clock=clock, on_round=on_round)

    screen: dict[str, list[float]] = {}
    finalists = labels
    if len(labels) > FINALISTS + 1:
        screen = phase(labels, SCREEN_ROUNDS, SCREEN_SHARE * seconds - (clock() - t0))
        ranked = sorted(labels[1:], key=lambda n: -paired_scores(screen, rule)[n])
        finalists = [rule, *ranked[:FINALISTS]]
    final = phase(finalists, rounds, (1 - CONTEND_SHARE) * seconds - (clock() - t0))
    vs_rule = paired_scores(final, rule)
    best = pick_winner(vs_rule)
    noise = round_noise(paired_ratios(final, rule)[best])
    winner = best if best == rule or vs_rule[best] - 1 > noise else rule   # beyond the noise, or the rule stays
    contended, rejected = None, None
    if winner != rule:      # the contention phase: does the winner still beat the rule with every core busy?
        with (contend or (lambda: busy_neighbours(spec.cores)))() as neighbours:
            busy = phase([rule, winner], CONTEND_ROUNDS, max(CONTEND_SHARE * seconds / 2, seconds - (clock() - t0)))
        ratios = paired_ratios(busy, rule)[winner]
        contended = {"label": winner, "neighbours": neighbours, "rounds": len(ratios),
                     "vs_rule": median(ratios) if ratios else 0.0, "rates": {n: [round(x, 1) for x in busy[n]]
                                                                             for n in busy}}
        if contended["vs_rule"] < CONTENDED_MIN:
            rejected, winner = by_label[winner], rule
    rows = [{"label": n, "config": by_label[n].to_json(), "phase": "final", "records_per_s": median(final[n]),
             "vs_rule": vs_rule[n], "vs_winner": vs_rule[n] / (vs_rule[winner] or 1.0),
             "rates": [round(x, 1) for x in final[n]]} for n in finalists]
    if screen:
        screened = paired_scores(screen, rule)
        top = max(screened[n] for n in finalists)
        rows += [{"label": n, "config": by_label[n].to_json(), "phase": "screen", "records_per_s": median(screen[n]),
                  "vs_rule": screened[n], "vs_winner": screened[n] / top if top > 0 else 0.0,
                  "rates": [round(x, 1) for x in screen[n]]} for n in labels if n not in finalists]
    rows.sort(key=lambda r: (r["phase"] != "final", -r["vs_rule"]))
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report = TuneReport(tuple(rows), by_label[winner], by_label[rule], len(final[winner]), clock() - t0,
                        len(finalists), machine, data, created, where or os.path.dirname(spec.files[0]),
                        best=None if best == winner or rejected else by_label[best], noise=noise,
                        contended=contended, rejected=rejected)
    if store:
        try:
            report = replace(report, path=save_result(report.to_json()))
        except OSError as exc:
            log.warning("tuning result not stored (%s): it is used by this process only", exc)
    return report
