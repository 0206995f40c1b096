# SPDX-License-Identifier: Apache-2.0
"""A job's artifact entries fetched while PyTorch is still importing.

A job (ptxcache.pgo.identity(): the main script's real path, its content's
hash and its arguments; PyTorch's ``TORCH_COMPILE_JOB_ID`` where set) uses
about the same entries each time it runs. start(), which enable() calls at
interpreter start (ptxcache.pth, before the program imports torch), starts
one daemon thread that reads the job's record (namespace ``job-entries``,
key: the job id; an artifact like any other, so in the caller's scope on
this node and, with the Redis tier, anywhere in the fleet), fetches the
entries it names in batches, and holds them in a table that
ArtifactStore.get_many() asks first. The same thread writes the record.

The rules:
- Never in the way: the main thread waits only for a key it asks for
  whose batch is on the wire (at most IN_FLIGHT_WAIT_S, then the normal
  path); a key whose batch is not sent yet is taken off the table and
  asked for as now, so each key goes to the daemon once. A value is
  handed out once and dropped; what is left is freed at the deadline.
- Bounded: the entries fetched (``PTXCACHE_PREFETCH_ENTRIES``, 4096), their
  bytes (``PTXCACHE_PREFETCH_MB``, 256 MiB), taken in the record's order
  (the last run's order of first use) until either is reached, and the
  time (``PTXCACHE_PREFETCH_S``, 120 s: no batch is sent after it, and
  what was not used is freed then).
- A prefetch get asks for no lease and waits for no producer (wait_ms 0: a
  key being produced is left to the normal path, whose get with a lease
  waits for it or produces it). A get with a lease that the table answers
  needed none: it hit. Values are as valid as a get's at that moment: the
  JITs' keys name their content (an FX graph's key is the hash of its
  inputs, Triton's the hash of its source and options); a value replaced
  meanwhile is one computed from the same inputs. A put of a key drops it
  from the table, so this process never reads back an older value than
  its own.
- Scope: every request goes over the store's own connections, so the
  daemon scopes the record and the entries to this uid or tenant like any
  get: another scope's record is not seen, and a record naming keys finds
  only this scope's entries under them.
- A daemon that fails mid-prefetch stops it (the store then answers misses
  for its retry period, one warning for the process); keys in flight are
  answered as misses, so a waiting get goes the normal way at once.
- The record: the entries this process got (a hit) or put, in order of
  first use, then those of the record found at start that this process
  did not use, each aged by one run; one unused for KEEP_RUNS runs in a
  row, or that the prefetch found missing, leaves it. Merged, not
  replaced: a process that did less (one rank, an evaluation run, a run
  cut short) does not drop what the next full run needs, yet what the
  job stopped using goes. Bounded as the prefetch is. Written only when
  it changed, and only by a process that noted anything: once the process
  has been quiet for ``PTXCACHE_PREFETCH_QUIET_S`` (10 s) after its last
  new entry (its compiles done: a job killed later, as schedulers kill
  training jobs, SIGTERM included, still leaves its record), and again at
  exit (atexit) if it changed since. Concurrent processes of one job
  (ranks): the last writer's merge wins. The record's own namespace is
  never recorded nor prefetched.
- fork(): the child has neither the table nor the recording
  (ArtifactStore._forked()).

``PTXCACHE_PREFETCH=0``: neither prefetch nor record. It touches no JIT's
private name; it runs before any JIT is imported.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from . import pgo
from .artifacts import ArtifactStore, store
from .client import default_socket

__all__ = ["start", "Job", "RECORD_NS", "ENV", "job_id"]

log = logging.getLogger(__name__)

ENV = "PTXCACHE_PREFETCH"
RECORD_NS = "job-entries"
DEFAULT_MB = 256
DEFAULT_ENTRIES = 4096
DEFAULT_S = 120.0
DEFAULT_QUIET_S = 10.0
KEEP_RUNS = 3           # runs in a row an entry may go unused and stay
# Requests of up to BATCH small entries sent together on the thread's one
# connection; a value of LARGE bytes or more alone (measured against the
# daemon on 2 cores, 3 runs' median: 2000 x 4 KiB: one get at a time 96 ms,
# batches of 64 65 ms, 256 51 ms; 400 x 64 KiB: 111, 40, 36 ms, all in one
# 120 ms; 40 x 4 MiB: alone 39 ms, in batches 122-128 ms, the value sent
# inline behind the others' rather than as its file's descriptor; 2 or 4
# connections in parallel no faster, up to 3x slower: one daemon loop).
BATCH = 64
LARGE = 256 << 10       # the daemon's BLOB_MIN: sent as a descriptor
IN_FLIGHT_WAIT_S = 30.0     # the longest a get waits for its key on the wire

_job: "Job | None" = None


def _env(name: str, default: float) -> float:
    try:
        v = float(os.environ.get(name, ""))
        return v if v >= 0 else default
    except ValueError:
        return default


# Inductor's compile workers (torch/_inductor/compile_worker/subproc_pool.py
# in PyTorch 2.11 runs this file as the script): they inherit the job's
# variables and run ptxcache.pth, but are no process of the job's own.
# Their reads (autotune results) would age its record's entries, and a
# record of their own (their arguments name the parent's pid) would never
# be read again.
COMPILE_WORKER = os.path.join("torch", "_inductor", "compile_worker", "__main__.py")


def job_id() -> str | None:
    """The job's id: PyTorch's TORCH_COMPILE_JOB_ID where set, else
    ptxcache.pgo.identity()'s; None for no program file, and for
    Inductor's compile workers."""
    if sys.argv and os.path.normpath(sys.argv[0]).endswith(COMPILE_WORKER):
        return None
    given = os.environ.get("TORCH_COMPILE_JOB_ID")
    if given:
        return "torch:" + given
    return pgo.identity()[0]


@dataclasses.dataclass
class _Slot:
    size: int
    sent: bool = False
    value: bytes | None = None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)


def _decode(raw: bytes | None) -> list[list[Any]]:
    """The record's entries [ns, key, size, idle]; [] for none or a
    malformed one."""
    if not raw:
        return []
    try:
        d = json.loads(raw)
        out = [e for e in d["entries"] if isinstance(e, list) and len(e) == 4
               and isinstance(e[0], str) and isinstance(e[1], str)
               and isinstance(e[2], int) and isinstance(e[3], int)]
        return out if d.get("v") == 1 else []
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


class Job:
    """One process's prefetch table and its record of the job's entries."""

    RECORD_NS = RECORD_NS

    def __init__(self, st: ArtifactStore, jid: str, max_bytes: int, max_entries: int,
                 seconds: float, quiet_s: float) -> None:
        self.store, self.jid, self.pid = st, jid, os.getpid()
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.deadline = time.monotonic() + seconds
        self.quiet_s = quiet_s
        self.lock = threading.Lock()
        self.table: dict[tuple[str, str], _Slot] = {}
        self.used: dict[tuple[str, str], int] = {}     # in order of first use
        self.old: list[list[Any]] = []
        self.missing: set[tuple[str, str]] = set()
        self.noted = 0.0        # when the last new entry was noted
        self.written: bytes | None = None   # the record as read or last written
        self.changes = 0        # new entries noted
        self.saved = 0          # self.changes at the last write
        self.wake = threading.Event()
        self.fetching = True    # until the prefetch has ended

    # ---- what ArtifactStore calls (any thread) -----------------------------

    def take(self, st: ArtifactStore, ns: str, keys: list[str]) -> tuple[dict[str, bytes], list[str]]:
        """({key: value} from the table, the keys left for the daemon)."""
        if not self.table:
            return {}, keys
        found: dict[str, bytes] = {}
        rest: list[str] = []
        wait: list[tuple[str, _Slot]] = []
        with self.lock:
            for k in keys:
                s = self.table.get((ns, k))
                if s is None:
                    rest.append(k)
                elif not s.sent:
                    del self.table[(ns, k)]     # not asked for yet: the caller asks
                    rest.append(k)
                else:
                    wait.append((k, s))
        for k, s in wait:
            if not s.done.wait(IN_FLIGHT_WAIT_S):
                st.counts["prefetch_timeouts"] += 1
                self.end_flights()      # none of the others is waited for either
            with self.lock:
                mine = self.table.get((ns, k)) is s and s.done.is_set()
                if mine:
                    del self.table[(ns, k)]
            if mine and s.value is not None:
                found[k] = s.value
                st.counts["prefetch_used"] += 1
                st.counts["hits"] += 1
                self.note(ns, k, len(s.value))
            else:
                rest.append(k)
        if found:
            st._account(ns, gets=len(found), hits=len(found))
        return found, rest

    def forget(self, ns: str, key: str) -> None:
        if self.table:
            with self.lock:
                s = self.table.pop((ns, key), None)
            if s is not None and s.value is not None:
                self.store.counts["prefetch_wasted_bytes"] += len(s.value)

    def note(self, ns: str, key: str, size: int) -> None:
        """ns/key was got or put by this process (cheap: a dict lookup)."""
        if (ns, key) in self.used or ns == RECORD_NS or len(self.used) >= self.max_entries:
            return
        self.used[(ns, key)] = size
        self.noted = time.monotonic()
        self.changes += 1

    # ---- the thread ----------------------------------------------------------

    def run(self) -> None:
        try:
            self.prefetch()
        except Exception:       # never into the program
            log.debug("ptxcache: prefetch failed", exc_info=True)
        finally:
            self.end_flights()
            self.fetching = False
        while True:
            now = time.monotonic()
            if self.table and now >= self.deadline:
                self.free()
            if self.changes != self.saved and now - self.noted >= self.quiet_s:
                self.write()
            # A new entry is seen within quiet_s, written quiet_s after the last.
            nxt = (self.noted if self.changes != self.saved else now) + self.quiet_s
            if self.table:
                nxt = min(nxt, self.deadline)
            self.wake.wait(max(0.05, nxt - time.monotonic()))
            if self.store.job is not self:
                return          # the store was reset: this job is over

    def prefetch(self) -> None:
        if not (self.store.path or os.environ.get("PTXCACHE_SOCKET")
                or os.path.exists(default_socket())):
            return      # no daemon: not started for this (the first compile may)
        got = self.store.prefetch_get([(RECORD_NS, self.jid)])
        if not got:
            return
        self.written = got[0]
        self.old = _decode(got[0])
        pick: list[tuple[str, str]] = []
        total = 0
        with self.lock:
            for ns, key, size, _idle in self.old:
                if len(pick) >= self.max_entries:
                    break
                if total + size > self.max_bytes or ns == RECORD_NS or (ns, key) in self.table:
                    continue
                total += size
                pick.append((ns, key))
                self.table[(ns, key)] = _Slot(size)
        got_bytes = 0
        for group in _batches(pick, self.old_sizes()):
            if time.monotonic() >= self.deadline:
                return
            with self.lock:
                batch = [e for e in group if e in self.table]
                for e in batch:
                    self.table[e].sent = True
            values = self.store.prefetch_get(batch)
            if values is None:
                return          # the daemon failed: end_flights() answers misses
            with self.lock:
                for e, v in zip(batch, values):
                    if v is None:
                        self.missing.add(e)
                    elif got_bytes + len(v) > self.max_bytes:
                        v = None    # larger than the record said: over the bound
                    else:
                        got_bytes += len(v)
                        self.store.counts["prefetched"] += 1
                        self.store.counts["prefetch_bytes"] += len(v)
                    s = self.table.get(e)
                    if s is not None and s.sent:
                        s.value = v
                        s.done.set()
                    elif v is not None:
                        self.store.counts["prefetch_wasted_bytes"] += len(v)

    def old_sizes(self) -> dict[tuple[str, str], int]:
        return {(ns, k): n for ns, k, n, _idle in self.old}

    def end_flights(self) -> None:
        """The fetch is over: keys not fetched go the normal way."""
        with self.lock:
            for e, s in list(self.table.items()):
                if not s.done.is_set():
                    del self.table[e]
                    s.done.set()

    def free(self) -> None:
        with self.lock:
            left, self.table = self.table, {}
        self.store.counts["prefetch_wasted_bytes"] += sum(len(s.value) for s in left.values()
                                                          if s.value is not None)

    def record(self) -> bytes:
        used = dict(self.used)
        entries = [[ns, k, n, 0] for (ns, k), n in used.items()]
        entries += [[ns, k, n, idle + 1] for ns, k, n, idle in self.old
                    if (ns, k) not in used and (ns, k) not in self.missing
                    and idle + 1 < KEEP_RUNS]
        out, total = [], 0
        for e in entries:
            if len(out) >= self.max_entries:
                break
            if total + e[2] <= self.max_bytes:
                total += e[2]
                out.append(e)
        return json.dumps({"v": 1, "entries": out}, separators=(",", ":")).encode()

    def write(self) -> None:
        """Put the record if this process noted anything and it changed."""
        if os.getpid() != self.pid or not self.used:
            return
        changes = self.changes
        data = self.record()
        if data != self.written and self.store.put(RECORD_NS, self.jid, data):
            self.written = data
        self.saved = changes


def _batches(pick: list[tuple[str, str]], sizes: dict[tuple[str, str], int]) -> list[list[tuple[str, str]]]:
    """pick in requests of up to BATCH small entries; a large one alone (its
    value comes as a descriptor only when no reply is queued ahead of it)."""
    out: list[list[tuple[str, str]]] = [[]]
    for e in pick:
        if sizes.get(e, 0) >= LARGE or len(out[-1]) >= BATCH:
            out.append([])
        out[-1].append(e)
        if sizes.get(e, 0) >= LARGE:
            out.append([])
    return [b for b in out if b]


def start(st: ArtifactStore | None = None) -> Job | None:
    """Prefetch this job's entries into st (the process's store) and record
    them; once per process. None when off, or for no job id."""
    global _job
    if os.environ.get(ENV) == "0":
        return None
    try:
        st = st if st is not None else store()
        if _job is not None and _job.pid == os.getpid() and st.job is _job:
            return _job
        jid = job_id()
        if jid is None:
            return None
        return _start(st, jid)
    except Exception:   # never into the program
        log.warning("ptxcache: the prefetch of the job's entries did not start", exc_info=True)
        return None


def _start(st: ArtifactStore, jid: str) -> Job:
    global _job
    job = Job(st, jid, int(_env("PTXCACHE_PREFETCH_MB", DEFAULT_MB) * (1 << 20)),
              int(_env("PTXCACHE_PREFETCH_ENTRIES", DEFAULT_ENTRIES)),
              _env("PTXCACHE_PREFETCH_S", DEFAULT_S),
              _env("PTXCACHE_PREFETCH_QUIET_S", DEFAULT_QUIET_S))
    st.job = _job = job
    threading.Thread(target=job.run, name="ptxcache-prefetch", daemon=True).start()
    atexit.register(job.write)
    return job
