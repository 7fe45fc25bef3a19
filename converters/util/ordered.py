"""Run work on an executor in parallel but hand results back in input order, with bounded work in flight."""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import Callable, Iterable, Iterator, TypeVar

__all__ = ["ordered_map"]

T = TypeVar("T")


def ordered_map(submit: Callable[[T], Future], items: Iterable[T], inflight: int) -> Iterator[tuple[T, object]]:
    """Yield ``(item, result)`` in input order; ``submit(item)`` starts the work and returns its future. At most
    ``inflight`` items are pending at once (bounded memory); futures still pending when the consumer stops early
    (an error, a closed generator) are cancelled."""
    if inflight < 1:
        raise ValueError(f"inflight must be at least 1, got {inflight}")
    pending: deque = deque()
    try:
        for item in items:
            pending.append((item, submit(item)))
            if len(pending) >= inflight:
                it, fut = pending.popleft()
                yield it, fut.result()
        while pending:
            it, fut = pending.popleft()
            yield it, fut.result()
    finally:
        for _, fut in pending:
            fut.cancel()
