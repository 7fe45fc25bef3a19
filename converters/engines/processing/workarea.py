"""The only thing a Processing job's instances share: a work area of small files under the output location,
``OUT/.tfpipe-tmp-<run>/`` (a local directory on a shared file system, or a key prefix in S3).

* ``mark(phase, host, payload)`` writes ``<phase>/<host>.json`` atomically once that host's part of a phase is
  durably written; ``wait(phase, hosts)`` polls the listing until every host's marker is there.
* Markers carry the job's identity: a marker left by an earlier job (a rerun) counts only once its host has
  confirmed or redone it in this job, so a finalizer never takes a stale part for a fresh one.
* ``fail(host, message)`` writes ``failed/<host>.json``: waiting instances stop at once and name the host and
  its reason instead of waiting for the timeout.
* Nothing here resolves a host name or opens a connection to another instance.
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable, Sequence

from converters.storage import Storage, open_storage
from converters.util.errors import OutputInUseError, TfpipeError

from ..area import RunArea
from .config import json_object

__all__ = ["WorkArea", "WaitError", "HostClaim", "FAILED"]

log = logging.getLogger(__name__)

FAILED = "failed"


class WaitError(TfpipeError):
    """Another instance failed, or did not finish its part within the wait timeout (``hosts`` names them)."""

    def __init__(self, message: str, hosts: Sequence[str]):
        super().__init__(message)
        self.hosts = tuple(hosts)


class WorkArea:
    """``OUT/.tfpipe-tmp-<run>/`` with one folder per phase; ``job`` stamps every marker written here. The
    area's place and its removal are the engines' temporary area's (``engines.area.RunArea``); this adds the
    markers and the waiting Processing's instances need."""

    def __init__(self, out: str, run: str, job: str = "", **storage_options):
        self.out = str(out).rstrip("/")
        self.area = RunArea(self.out, run, tuple(storage_options.items()))  # checks the run id: nothing created
        self.run = run
        self.url = self.area.temp_url
        self.name = self.url.rsplit("/", 1)[-1]
        self.job = job
        self._options = storage_options
        self._storages: dict[str, Storage] = {}

    def storage(self, sub: str = "") -> Storage:
        """The storage of a folder of the area (``""``: the area itself)."""
        if sub not in self._storages:
            self._storages[sub] = open_storage(self.sub_url(sub), **self._options)
        return self._storages[sub]

    def sub_url(self, sub: str = "") -> str:
        return f"{self.url}/{sub}" if sub else self.url

    # -- small JSON files -----------------------------------------------------------------------------
    def put(self, sub: str, name: str, obj: dict) -> None:
        data = json.dumps({**obj, "job": self.job}, sort_keys=True, indent=1).encode()
        self.storage(sub).write_bytes_atomic(name, data)

    def get(self, sub: str, name: str) -> dict | None:
        try:
            raw = self.storage(sub).read_bytes(name)
        except FileNotFoundError:
            return None
        return json_object(raw, f"{self.sub_url(sub)}/{name}", ": remove it and rerun")

    def delete(self, sub: str, name: str) -> None:
        try:
            self.storage(sub).delete(name)
        except FileNotFoundError:
            pass

    # -- markers --------------------------------------------------------------------------------------
    def mark(self, phase: str, host: str, payload: dict[str, Any]) -> None:
        """``host`` has durably written its part of ``phase`` (call only after the part itself is written)."""
        self.put(phase, f"{host}.json", {**payload, "host": host})

    def marker(self, phase: str, host: str, *, any_job: bool = False) -> dict | None:
        """``host``'s marker of ``phase``; one from another job only with ``any_job`` (a reuse candidate)."""
        data = self.get(phase, f"{host}.json")
        if data is None or (not any_job and data.get("job") != self.job):
            return None
        return data

    def unmark(self, phase: str, host: str) -> None:
        self.delete(phase, f"{host}.json")

    def fail(self, host: str, message: str) -> None:
        """Tell the waiting instances that ``host`` failed, and why (best effort: never masks the failure)."""
        try:
            self.put(FAILED, f"{host}.json", {"host": host, "message": message})
        except Exception as exc:  # noqa: BLE001 - the original failure is what matters
            log.warning("could not record the failure of %s in %s: %s", host, self.url, exc)

    def wait(self, phase: str, hosts: Sequence[str], *, timeout: float, poll: float = 5.0, what: str = "part",
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
             ) -> dict[str, dict]:
        """Poll until every host in ``hosts`` has a marker of ``phase`` from this job; return them by host.

        Raises ``WaitError`` naming the host(s) as soon as one of them reports a failure, or after ``timeout``
        seconds naming every host whose marker is still missing."""
        deadline = clock() + timeout
        got: dict[str, dict] = {}
        while True:
            names = set(self.storage(phase).list())
            for h in hosts:
                if h not in got and f"{h}.json" in names:
                    data = self.marker(phase, h)
                    if data is not None:
                        got[h] = data
            missing = [h for h in hosts if h not in got]
            if not missing:
                return got
            failed = set(self.storage(FAILED).list())
            for h in missing:
                if f"{h}.json" in failed:
                    data = self.marker(FAILED, h)
                    if data is not None:
                        raise WaitError(f"{h} failed: {data.get('message', 'no reason given')}", [h])
            if clock() >= deadline:
                raise WaitError(f"gave up after {timeout:g} s waiting for the {what} of {', '.join(missing)} "
                                f"({len(got)} of {len(hosts)} host(s) done): an instance failed or never started; "
                                "rerun the job to finish (finished parts are reused)", missing)
            log.debug("waiting for the %s of %s", what, ", ".join(missing))
            sleep(max(0.0, min(poll, deadline - clock())))

    # -- the whole area -------------------------------------------------------------------------------
    def exists(self) -> bool:
        """Whether anything of the area is there (best effort: False when it cannot be listed)."""
        st = self.storage()
        local = st.local_path("")
        try:
            return os.path.isdir(local) if local is not None else bool(st.list_tree(""))
        except Exception:  # noqa: BLE001 - only decides whether a failure is worth recording
            return False

    def remove(self) -> None:
        """Delete the whole area (every phase, every part)."""
        self.area.remove_temp(strict=True)


class HostClaim:
    """One running instance per host of a job: ``OUT/.tfpipe-tmp-<run>-host-<host>/`` claimed (as an output
    is) for the instance's whole run, beside the work area (which the finalizer removes while the others may
    still hold theirs). A second start of the same host fails at once (``OutputInUseError``) before it writes
    anything; a claim left by an instance of an earlier job (a rerun: that instance is gone) is taken over."""

    def __init__(self, area: WorkArea, host: str, job: str):
        from converters.storage.claim import CLAIM_NAME, Holder, claim_output

        self.url = f"{area.url}-host-{host}"
        self.storage = open_storage(self.url, **area._options)
        ident = f"{job}:{host}"
        try:
            holder = Holder.parse(self.storage.read_bytes(CLAIM_NAME))
        except (FileNotFoundError, OSError):
            holder = None
        if holder is not None and holder.run != ident:  # an earlier job's instance of this host: gone
            log.warning("%s: removing the claim of an earlier job's instance (%s)", self.url, holder.describe())
            self.storage.delete(CLAIM_NAME)
        try:
            self._claim = claim_output(self.storage, ident)
        except OutputInUseError as exc:
            raise OutputInUseError(f"{host} of this job is already running ({exc}); this second start stops "
                                   "without touching the work area") from None

    def release(self) -> None:
        self._claim.release()
        local = self.storage.local_path("")
        if local is not None:
            try:
                os.rmdir(local)
            except OSError:
                pass
