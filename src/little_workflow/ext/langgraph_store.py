"""Where `WorldCheckpointSaver` keeps LangGraph threads: records over World methods only.

A thread belongs to the owner run `run_lg_<sha256(thread_id)[:32]>`, and
`langgraph/threads/<ownerRunId>.json` names it: `{threadId, layout, generation, legacy}`.
What the saver stores (the record format is `langgraph.py`'s business) goes into one of
two layouts, chosen per World when a thread is first written and kept in its document:

**files** (virtual Worlds: memory, local files, object stores), one file per record:

```
runs/<owner>/<nsKey>.c/<id>.<tags>           a checkpoint (msgpack)
runs/<owner>/<nsKey>.c/head                   the newest checkpoint's name (a pointer)
runs/<owner>/<nsKey>.w/<id>/<taskKey>[.m<k>]  one task's writes
runs/<owner>/<nsKey>.b/<id>.<k>              a value or list segment first kept by <id>
```
`<tags>` are crc32s of the checkpoint's metadata items, so `list(filter=…)` and
`delete_for_runs` find candidates in a folder listing without reading every checkpoint.
`head` (threads whose document says `headPointer`: those begun on a local disk) lets a
cold `get_tuple` read the newest checkpoint without listing them all. It is moved forward
(compare-and-swap, never to an older id) before each record is written, in the record's
own folder and unsynced: the record's durable write syncs that folder, so a record that
survives a crash or a power cut has its pointer move survive too. A pointer that names a
record which is not there (a put cut short, a checkpoint deleted) or cannot be read (torn
by a power cut) is passed over for a listing.

**events** (`local_world`, where an append is one SQLite commit and a new file three
fsyncs): the thread's records are events of its run — `langgraph.checkpoint` (values
inline), `langgraph.writes`, `langgraph.deleted` — and a file named
`runs/<run>/lg-head/<nsKey>.<seq>` is a hint (not synced: a cache) whose name gives a recent
checkpoint's sequence, so the head is read cold from there without reading the log. A task's writes are appended unsynced and acknowledged
once a later synced append — the next checkpoint's, in the same WAL — has made them durable
(or after `RIDE_SECONDS`, by syncing the log): one fsync a super-step, not two. Removing
checkpoints for good (prune) rewrites the
kept ones into the thread's next generation, run `<owner>_<generation>`, then closes the
old log with `run.completed` — an append there afterwards is refused, which is how a
writer that did not see the switch learns of it — and deletes it.

**legacy** (the first layout, read and removed, never written): one JSON file per
checkpoint with every channel, `runs/<owner>/langgraph/<nsKey>/c/<hex(id)>.json`.

Blob names are unique per checkpoint that first stored them, never content addresses: a
blob a new checkpoint writes can never be one a concurrent prune is sweeping.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import re
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ormsgpack

from little_workflow.errors import (
    DocumentCorruptError,
    IdempotencyConflictError,
    RunFinishedError,
    RunLockedError,
    RuntimeIntegrityError,
)
from little_workflow.world.protocol import WorldLike
from little_workflow.world.vocabulary import LANGGRAPH_THREAD_EVENT

THREADS_DIR = "langgraph/threads"
THREAD_EVENT = LANGGRAPH_THREAD_EVENT
CHECKPOINT_EVENT = "langgraph.checkpoint"
WRITES_EVENT = "langgraph.writes"
DELETED_EVENT = "langgraph.deleted"
OPENED_EVENT = "langgraph.opened"
FORMAT = 2
#: More metadata items than this: the checkpoint's file name carries no tags (read to filter).
MAX_TAGS = 16
#: A value larger than this goes into an artifact of its log's run (raw bytes) instead of
#: into the event (base64 in JSON, a third larger, and spilled by the World anyway).
EVENT_VALUE_LIMIT = 32 * 1024
#: The events layout moves a namespace's head hint at a checkpoint this many events of the
#: log after the one it names (and not before event 2 * HINT_EVERY): a super-step appends a
#: checkpoint and its writes, so about every 4th checkpoint, and a cold read of the head
#: reads the log from the hint on, a few events, never the whole log.
HINT_EVERY = 8
#: The files layout's pointer to a namespace's newest checkpoint, in its checkpoints'
#: folder (no checkpoint's file name: those start with an id, `head` is none).
HEAD_POINTER = "head"
#: The longest a task's writes, appended unsynced on the events layout, wait for a later
#: synced append (the next checkpoint's, a millisecond or so later) to make them durable
#: before syncing by themselves. LangGraph waits for writes only at the run's end and for
#: error handlers (DeltaChannels' are synced at once), so a longer wait costs little and
#: keeps riding under load; read at each wait.
RIDE_SECONDS = 0.1
#: How long a writer waits for another process's compaction of a thread to finish.
COMPACTION_WAIT_SECONDS = 60.0


class CheckpointDataError(RuntimeIntegrityError):
    """A stored LangGraph record is missing or unreadable."""

    def __init__(self, thread_id: str, where: str, problem: str):
        self.thread_id, self.where, self.problem = thread_id, where, problem
        super().__init__(f"LangGraph thread {thread_id!r}: {where}: {problem}")


# --- names ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)  # a few hashes a put otherwise
def thread_owner_run_id(thread_id: str) -> str:
    """The run id that owns a thread's records (its log, folder and artifacts)."""
    return "run_lg_" + hashlib.sha256(str(thread_id).encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=4096)
def ns_key(checkpoint_ns: str) -> str:
    # Namespaces hold ':' and '|' and can be long: a fixed-size key; records name the ns.
    return "ns_" + hashlib.sha256(checkpoint_ns.encode()).hexdigest()[:24]


_PLAIN_ID = re.compile(r"[0-9a-f-]{1,100}")


def id_name(checkpoint_id: str) -> str:
    """A checkpoint id as a file-name segment: itself (LangGraph's uuids), else `x<hex>`."""
    if _PLAIN_ID.fullmatch(checkpoint_id):
        return checkpoint_id
    return "x" + checkpoint_id.encode().hex()


def id_from_name(name: str) -> str | None:
    if name.startswith("x"):
        try:
            return bytes.fromhex(name[1:]).decode()
        except ValueError:
            return None
    return name if _PLAIN_ID.fullmatch(name) else None


def task_key(task_id: str) -> str:
    return hashlib.sha256(task_id.encode()).hexdigest()[:24]


#: What tags are computed with: `json.dumps` with these options builds an encoder on
#: every call, a third of a put's tagging (the text is the same, and tags stay as stored).
_TAG_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_json_string = json.encoder.encode_basestring  # what _TAG_JSON writes a str as


def _tag_text(key: str, value: Any) -> str:
    """`_TAG_JSON.encode([key, value])`, written directly for the plain values LangGraph's
    metadata holds (a step number, a source, `parents` empty): a put tags every item."""
    if type(key) is str:
        kind = type(value)
        if kind is str:
            return f"[{_json_string(key)},{_json_string(value)}]"
        if kind is int:
            return f"[{_json_string(key)},{int.__repr__(value)}]"
        if value is None:
            return f"[{_json_string(key)},null]"
        if kind is dict and not value:
            return f"[{_json_string(key)},{{}}]"
    return _TAG_JSON.encode([key, value])


def tag(key: str, value: Any) -> str | None:
    """The tag of one metadata item, None when the value is not plain JSON."""
    try:
        text = _tag_text(key, value)
    except (TypeError, ValueError):
        return None
    return f"{zlib.crc32(text.encode()):08x}"


def metadata_tags(metadata: dict[str, Any]) -> list[str] | None:
    """Tags of every metadata item, or None when one cannot be tagged (then a filter reads)."""
    if len(metadata) > MAX_TAGS:
        return None
    out = []
    for k, v in metadata.items():
        t = tag(k, v)
        if t is None:
            return None
        out.append(t)
    return sorted(out)


def filter_tags(wanted: dict[str, Any]) -> set[str] | None:
    """Tags a checkpoint must carry to match `wanted`; None when they cannot decide it (a
    float or bool compares equal across JSON types, so those are checked by reading)."""
    out = set()
    for k, v in wanted.items():
        if isinstance(v, (bool, float)):
            return None
        t = tag(k, v)
        if t is None:
            return None
        out.add(t)
    return out


def pack(record: dict[str, Any]) -> bytes:
    return ormsgpack.packb(record)


def unpack(data: bytes, thread_id: str, where: str) -> dict[str, Any]:
    try:
        out = ormsgpack.unpackb(data)
    except (ormsgpack.MsgpackDecodeError, ValueError) as e:
        raise CheckpointDataError(thread_id, where, f"not a record ({e})") from None
    if not isinstance(out, dict):
        raise CheckpointDataError(thread_id, where, "not a record")
    return out


class LRU(OrderedDict):
    """A small bounded mapping (caches of storage, never the truth)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)

    def peek(self, key: Any) -> Any:
        value = self.get(key)  # a miss is common (a new checkpoint): no KeyError raised
        if value is not None:
            self.move_to_end(key)
        return value


# --- what stores hand back ----------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One checkpoint as a listing sees it: enough to order, filter and find it."""

    ns_key: str
    ns: str | None  # None: known once loaded (a files listing knows only the key)
    id: str
    tags: frozenset[str] | None
    loc: Any  # where the layout finds it: a file name, a sequence
    layout: str


@dataclass
class Stored:
    """One checkpoint record as read: `record` in the saver's format (`langgraph.py`)."""

    ns: str
    id: str
    parent: str | None
    record: dict[str, Any]
    loc: Any
    layout: str


#: One stored write: (task_path, task_id, idx, channel, value type, value bytes | ref).
WriteRow = tuple[str, str, int, str, str, Any]


@dataclass
class Thread:
    thread_id: str
    owner: str
    layout: str
    generation: int = 0
    legacy: bool = False
    documented: bool = True  # False: written before its document (a crash), or new
    closing: bool = False  # a compactor's view: its log may be closed already
    #: Files layout: its namespaces keep a `head` pointer (its document says so, so every
    #: writer keeps it up and every reader may trust it).
    head_pointer: bool = False

    @property
    def run_id(self) -> str:
        return self.owner if self.generation == 0 else f"{self.owner}_{self.generation}"


class Regenerated(Exception):
    """The thread's log was closed by a compaction: read its document and try again."""


def merge_writes(rows: Iterable[tuple[int, WriteRow]]) -> list[WriteRow]:
    """Rows in storage order: a regular write (idx ≥ 0) kept first wins, a special one
    (errors, interrupts, resumes: idx < 0) is replaced by the newest."""
    kept: dict[tuple[str, int], WriteRow] = {}
    for _, row in sorted(rows, key=lambda r: r[0]):
        k = (row[1], row[2])
        if row[2] < 0 or k not in kept:
            kept[k] = row
    return list(kept.values())


# --- the files layout ---------------------------------------------------------------------

class FilesLayout:
    name = "files"

    def __init__(self, world: WorldLike):
        self.world = world
        self._lock = threading.Lock()
        # (owner, nsKey, id) -> file name (with tags): found by puts and listings.
        self._names: LRU = LRU(4096)

    def thread_dir(self, th: Thread) -> str:
        return f"runs/{th.owner}"

    def _dir(self, th: Thread, key: str, kind: str) -> str:
        # Flat (two folders deep under runs/): a new thread's first record makes few
        # folders, each of which costs a directory fsync on local disk.
        return f"runs/{th.owner}/{key}.{kind}"

    def exists(self, th: Thread) -> bool:
        return bool(self.ns_keys(th))

    def ns_keys(self, th: Thread) -> list[str]:
        return [n[:-2] for n in self.world.list_dir(self.thread_dir(th))
                if n.startswith("ns_") and n.endswith(".c")]

    def entries(self, th: Thread, ns: str | None) -> list[Entry]:
        keys = [ns_key(ns)] if ns is not None else self.ns_keys(th)
        out = []
        for key in keys:
            for name in self.world.list_dir(self._dir(th, key, "c")):
                head, _, tags = name.partition(".")
                cid = id_from_name(head)
                if cid is None:
                    continue
                tagset = frozenset(tags.split("-")) if tags and tags != "_" else None
                if tags == "":
                    tagset = frozenset()
                out.append(Entry(key, ns, cid, tagset, name, self.name))
                with self._lock:
                    self._names.put((th.owner, key, cid), name)
        out.sort(key=lambda e: e.id, reverse=True)
        return out

    def load(self, th: Thread, entry: Entry) -> Stored | None:
        path = f"{self._dir(th, entry.ns_key, 'c')}/{entry.loc}"
        data = self.world.read_file(path)
        if data is None:
            return None  # removed meanwhile
        rec = unpack(data, th.thread_id, path)
        return Stored(rec["n"], rec["i"], rec.get("p"), rec, None, self.name)

    def head(self, th: Thread, ns: str) -> Stored | None:
        key = ns_key(ns)
        pointed = self._pointed_head(th, key, ns) if th.head_pointer else None
        if pointed is not None:
            return pointed
        # One listing, and only the names' ids looked at: an Entry and a cache slot per
        # checkpoint made a cold head of a 1,000-checkpoint thread ~40x SqliteSaver's.
        ranked = []
        for name in self.world.list_dir(self._dir(th, key, "c")):
            cid = id_from_name(name.partition(".")[0])
            if cid is not None:
                ranked.append((cid, name))
        ranked.sort(reverse=True)
        for cid, name in ranked:
            found = self.load(th, Entry(key, ns, cid, None, name, self.name))
            if found is not None:
                with self._lock:
                    self._names.put((th.owner, key, cid), name)
                return found
        return None

    def _pointer_path(self, th: Thread, key: str) -> str:
        return f"{self._dir(th, key, 'c')}/{HEAD_POINTER}"

    def _pointed_head(self, th: Thread, key: str, ns: str) -> Stored | None:
        """The checkpoint the pointer names, when it is there; None: find it by listing."""
        try:
            doc = self.world.read_document(self._pointer_path(th, key))
        except DocumentCorruptError:
            return None  # torn by a power cut: the next put writes it again
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            return None
        name = doc["name"]
        cid = id_from_name(name.partition(".")[0])
        if cid is None or cid != doc.get("id") or "/" in name:
            return None
        found = self.load(th, Entry(key, ns, cid, None, name, self.name))
        if found is None or found.id != cid:
            return None  # a put cut short before its record, or the checkpoint deleted
        with self._lock:
            self._names.put((th.owner, key, cid), name)
        return found

    def _newest_listed(self, th: Thread, key: str) -> str | None:
        names = self.world.list_dir(self._dir(th, key, "c"))
        ids = [i for i in (id_from_name(n.partition(".")[0]) for n in names) if i is not None]
        return max(ids) if ids else None

    def _advance_pointer(self, th: Thread, key: str, checkpoint_id: str, name: str) -> None:
        """Point at this checkpoint unless the pointer names a newer one (compare-and-swap:
        a racing writer of an older id never moves it back). Where there is no pointer (a
        new namespace, a thread written before pointers, one removed as torn), it starts
        from the newest listed, so it never points below a checkpoint already there."""
        path = self._pointer_path(th, key)

        def forward(doc: Any) -> Any:
            if isinstance(doc, dict) and isinstance(doc.get("id"), str):
                return doc if doc["id"] > checkpoint_id else {"id": checkpoint_id, "name": name}
            newest = self._newest_listed(th, key)
            if newest is not None and newest > checkpoint_id:
                with self._lock:
                    known = self._names.peek((th.owner, key, newest))
                listed = known or next(n for n in self.world.list_dir(self._dir(th, key, "c"))
                                       if id_from_name(n.partition(".")[0]) == newest)
                return {"id": newest, "name": listed}
            return {"id": checkpoint_id, "name": name}

        try:
            self.world.update_document(path, forward, durable=False)
        except DocumentCorruptError:
            # Torn by a power cut: no CAS can start from bytes that are not a document.
            self.world.remove_file(path, durable=False)
            self.world.update_document(path, forward, durable=False)

    def get(self, th: Thread, ns: str, checkpoint_id: str) -> Stored | None:
        key = ns_key(ns)
        with self._lock:
            name = self._names.peek((th.owner, key, checkpoint_id))
        if name is not None:
            found = self.load(th, Entry(key, ns, checkpoint_id, None, name, self.name))
            if found is not None:
                return found
        for entry in self.entries(th, ns):
            if entry.id == checkpoint_id:
                return self.load(th, entry)
        return None

    def blob(self, th: Thread, ns: str, name: str, loc: Any) -> bytes | None:
        return self.world.read_file(f"{self._dir(th, ns_key(ns), 'b')}/{name}")

    def _writes_dir(self, th: Thread, ns: str, checkpoint_id: str) -> str:
        return f"{self._dir(th, ns_key(ns), 'w')}/{id_name(checkpoint_id)}"

    def writes(self, th: Thread, ns: str, checkpoint_id: str, stored: Stored | None) -> list[WriteRow]:
        folder = self._writes_dir(th, ns, checkpoint_id)
        rows: list[tuple[int, WriteRow]] = []
        for name in self.world.list_dir(folder):
            data = self.world.read_file(f"{folder}/{name}")
            if data is None:
                continue
            rec = unpack(data, th.thread_id, f"{folder}/{name}")
            for w in rec["w"]:
                rows.append((0, (rec["path"], rec["task"], w[0], w[1], w[2], w[3])))
        return merge_writes(rows)

    def add_checkpoint(self, th: Thread, ns: str, checkpoint_id: str, record: dict[str, Any],
                       blobs: dict[str, bytes]) -> Any:
        key = ns_key(ns)
        for name, data in blobs.items():
            # Before the record: a checkpoint never names a blob that is not there yet.
            self.world.write_file(f"{self._dir(th, key, 'b')}/{name}", data)
        tags = record.get("g")
        name = f"{id_name(checkpoint_id)}.{'-'.join(tags) if tags is not None else '_'}"
        known = (th.owner, key, checkpoint_id)
        with self._lock:
            before = self._names.peek(known)
        folder = self._dir(th, key, "c")
        # Before the record and in its folder: the record's durable write makes the
        # pointer's move durable too, so no surviving record is newer than the pointer.
        if th.head_pointer:
            self._advance_pointer(th, key, checkpoint_id, name)
        self.world.write_file(f"{folder}/{name}", pack(record))
        if before is not None and before != name:
            self.world.remove_file(f"{folder}/{before}")  # the same id put again, retagged
        with self._lock:
            self._names.put(known, name)
        return None

    def add_writes(self, th: Thread, ns: str, checkpoint_id: str, task_id: str, task_path: str,
                   regular: list[list[Any]], special: list[list[Any]]) -> None:
        folder = self._writes_dir(th, ns, checkpoint_id)
        key = task_key(task_id)
        head = {"f": FORMAT, "task": task_id, "path": task_path}
        if regular:
            # A task's writes are one file, published once: a crash never leaves some of
            # them stored (LangGraph would take the task as done and drop the rest), and a
            # retried task never changes writes already kept.
            path = f"{folder}/{key}.mp"
            if not self.world.create_file(path, pack({**head, "w": regular})):
                data = self.world.read_file(path)
                kept: dict[str, Any] = unpack(data, th.thread_id, path) if data is not None \
                    else {**head, "w": []}
                have = {w[0] for w in kept["w"]}
                extra = [w for w in regular if w[0] not in have]
                if extra:
                    self.world.write_file(path, pack({**kept, "w": kept["w"] + extra}))
        for w in special:
            # Errors, interrupts, resumes (idx < 0): the newest replaces the last.
            self.world.write_file(f"{folder}/{key}.m{-w[0]}.mp", pack({**head, "w": [w]}))

    def remove(self, th: Thread, doomed: list[Entry], reclaim: bool) -> None:
        """Remove checkpoints and their writes; `reclaim`: also the values no checkpoint
        left needs (reading the ns's records: prune does, delete_for_runs leaves that to
        the next prune)."""
        for entry in doomed:
            # The record first and durable: from then on nothing reads the checkpoint, and
            # what is left of its writes and values is garbage the sweep below removes.
            self.world.remove_file(f"{self._dir(th, entry.ns_key, 'c')}/{entry.loc}")
            with self._lock:
                self._names.pop((th.owner, entry.ns_key, entry.id), None)
            self._remove_writes(f"{self._dir(th, entry.ns_key, 'w')}/{id_name(entry.id)}")
        if not reclaim:
            self.world.sync()
            return
        bounds: dict[str, str] = {}
        for entry in doomed:
            bounds[entry.ns_key] = max(bounds.get(entry.ns_key, ""), entry.id)
        for key in bounds:
            names = self.world.list_dir(self._dir(th, key, "c"))
            ids = [i for i in (id_from_name(n.partition(".")[0]) for n in names) if i]
            bounds[key] = max([bounds[key], *ids])
        self.sweep(th, bounds)

    def _remove_writes(self, folder: str) -> None:
        for name in self.world.list_dir(folder):
            self.world.remove_file(f"{folder}/{name}", durable=False)
        if self.world.file_info(folder) is not None:
            self.world.remove_dir(folder)

    def sweep(self, th: Thread, bounds: dict[str, str]) -> None:
        """Remove the values and writes no checkpoint left in an ns needs, among those of
        checkpoints no newer than `bounds[nsKey]` (the newest there when the removal
        began): a put in flight (values written, record not yet) is newer, and its values
        are never taken. Blobs are listed before the records, so a record written
        meanwhile can only name blobs that were kept."""
        for key, newest in bounds.items():
            c, w, b = (self._dir(th, key, kind) for kind in "cwb")
            blob_names = self.world.list_dir(b)
            writes_dirs = self.world.list_dir(w)
            names = self.world.list_dir(c)
            live = {i for i in (id_from_name(n.partition(".")[0]) for n in names) if i}
            needed: set[str] = set()
            for name in names:
                if id_from_name(name.partition(".")[0]) is None:
                    continue  # the head pointer
                data = self.world.read_file(f"{c}/{name}")
                if data is not None:
                    needed.update(record_blob_names(unpack(data, th.thread_id, name)))
            for name in blob_names:
                owner_id = id_from_name(name.rsplit(".", 1)[0])
                if owner_id is not None and owner_id <= newest and name not in needed:
                    self.world.remove_file(f"{b}/{name}", durable=False)
            for name in writes_dirs:
                cid = id_from_name(name)
                if cid is not None and cid <= newest and cid not in live:
                    self._remove_writes(f"{w}/{name}")
        self.world.sync()

    def delete(self, th: Thread) -> None:
        self.world.delete_run(th.owner)


def record_blob_names(record: dict[str, Any]) -> set[str]:
    """Names of the blobs a record's channels refer to."""
    out: set[str] = set()
    for _version, ref in (record.get("v") or {}).values():
        if ref is None:
            continue
        if ref[0] == "b":
            out.add(ref[1])
        elif ref[0] == "l":
            out.update(seg[0] for seg in ref[3])
    return out


# --- the events layout --------------------------------------------------------------------

@dataclass
class CheckpointAt:
    seq: int
    parent: str | None
    tags: frozenset[str] | None
    early: list[int]
    dead: bool = False
    #: False: folded without decoding its record (parent, tags, early not known yet).
    decoded: bool = True


@dataclass
class ThreadLog:
    """What this process knows of one generation's log: every event with a sequence above
    `known_from` is folded in (0: the whole log); a cache of storage, never the truth."""

    run_id: str
    known_from: int | None = None
    upto: int = 0
    checkpoints: dict[tuple[str, str], CheckpointAt] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[int, list[WriteRow]]] = field(default_factory=dict)
    early: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    records: LRU = field(default_factory=lambda: LRU(64))
    #: Payloads of checkpoint events folded without decoding, by sequence.
    undecoded: LRU = field(default_factory=lambda: LRU(64))
    fenced: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Coverage:
    """Which unsynced appends a synced one has made durable. In one SQLite WAL a synced
    commit makes every commit before it durable, so an unsynced append counted here (once
    it returned) is covered by any synced append that began after it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._appended = 0  # unsynced appends that returned
        self._covered = 0  # how many of those are durable
        self._syncing = 0  # synced appends under way
        self._writing = 0  # unsynced appends about to be made

    def writes_begin(self) -> None:
        with self._cond:
            self._writing += 1

    def writes_done(self, appended: bool) -> tuple[int, bool] | None:
        """After `writes_begin`: the unsynced append made (or not). Its ticket: its number,
        and whether a synced append was under way then (it began first, so it does not
        cover this one)."""
        with self._cond:
            self._writing -= 1
            self._cond.notify_all()
            if not appended:
                return None
            self._appended += 1
            return self._appended, self._syncing > 0

    def begin_synced(self, *, after_writes: bool = False) -> int:
        """`after_writes` (a checkpoint): first let writes already begun land, briefly, so
        this commit comes after them in the WAL and covers them."""
        with self._cond:
            if after_writes:
                self._cond.wait_for(lambda: self._writing == 0, RIDE_SECONDS)
            self._syncing += 1
            return self._appended

    def end_synced(self, upto: int, ok: bool) -> None:
        with self._cond:
            self._syncing -= 1
            if ok and upto > self._covered:
                self._covered = upto
            self._cond.notify_all()

    def wait(self, n: int, raced: bool, seconds: float) -> bool:
        """True once append `n` is covered. `raced`: a synced append that began before it
        was under way — when every such one has ended and none covered it, the next
        checkpoint may be the run's last put already made: False at once."""
        with self._cond:
            if raced:
                self._cond.wait_for(lambda: self._covered >= n or self._syncing == 0, seconds)
                return self._covered >= n
            return self._cond.wait_for(lambda: self._covered >= n, seconds)


class EventsLayout:
    name = "events"

    def __init__(self, world: WorldLike):
        self.world = world
        self._lock = threading.Lock()
        self.coverage = Coverage()
        # Writes ride only where one synced append makes every earlier one durable:
        # local_world's one SQLite WAL. Elsewhere (`layout="events"` on a file World) each
        # thread has its own run folder, and another thread's synced checkpoint covers none
        # of this one's appends.
        self.one_wal = getattr(world, "kind", "") == "local"
        # (run id, nsKey) of namespaces whose graph waits for its writes before its next
        # checkpoint (DeltaChannels: LangGraph stores their writes first): those writes
        # are synced at once, there is no checkpoint for them to ride.
        self.writes_awaited: LRU = LRU(4096)
        self._logs: LRU = LRU(256)
        # (run id, nsKey) -> the sequence this process last wrote a hint for.
        self._hinted: LRU = LRU(4096)

    # ---- the log and its index ----

    def _log(self, th: Thread) -> ThreadLog:
        with self._lock:
            log = self._logs.peek(th.run_id)
            if log is None:
                log = ThreadLog(th.run_id)
                self._logs.put(th.run_id, log)
            return log

    def forget(self, th: Thread) -> None:
        with self._lock:
            self._logs.pop(th.run_id, None)

    def _hint_dir(self, run_id: str) -> str:
        return f"runs/{run_id}/lg-head"

    def _move_hint(self, run_id: str, key: str, seq: int, last: int | None) -> None:
        """Name `seq` in the namespace's hint: a new (empty) file, then the old name
        removed — never a file replaced, which on ext4 flushes the new file's data first
        (auto_da_alloc: 0.4-0.8 ms, in the put LangGraph waits for). Not synced: a hint
        lost to a power cut, or an old one come back, costs a longer read, nothing more."""
        folder = self._hint_dir(run_id)
        name = f"{key}.{seq}"
        self.world.write_file(f"{folder}/{name}", b"", durable=False)
        if last is not None:
            stale = [f"{key}.{last}"]
        else:  # this process's first: whatever others (or a crash) left, and the old form
            stale = [n for n in self.world.list_dir(folder)
                     if n.partition(".")[0] == key and n != name]
        for old in stale:
            self.world.remove_file(f"{folder}/{old}", durable=False)

    def exists(self, th: Thread) -> bool:
        return any(e.type == CHECKPOINT_EVENT for e in self.world.list_events(th.run_id))

    def _fold_after(self, th: Thread, log: ThreadLog, after: int, *, lazy: bool = False) -> None:
        """`lazy` (a few events from a hint, for the head): records are decoded when
        asked for, so a cold head decodes its own record and writes, not its neighbours'."""
        for event in self.world.list_events(log.run_id, after=after):
            self._fold(log, event.sequence, event.type, event.payload, lazy=lazy)
            log.upto = max(log.upto, event.sequence)
        if log.known_from is None or after < log.known_from:
            log.known_from = after
        if log.fenced and not th.closing:
            raise Regenerated()

    def _payload_record(self, log: ThreadLog, payload: Any) -> dict[str, Any]:
        raw = payload["rec"]
        if not isinstance(raw, str):  # spilled by the World (over 64 KiB): an artifact
            raw = self.world.resolve_refs(raw)
        return unpack(base64.b64decode(raw), log.run_id, "event")

    def _outlined(self, th: Thread, name: str, data: bytes) -> bytes | str:
        """A large value as an artifact of the log's run (its reference), else itself."""
        if len(data) <= EVENT_VALUE_LIMIT:
            return data
        manifest = self.world.write_artifact(th.run_id, "", f"langgraph:{name}", bytes(data),
                                             content_type="application/octet-stream",
                                             encoding="binary")
        return str(manifest.artifact_ref)

    def _inlined(self, value: Any) -> bytes:
        if isinstance(value, str):
            return bytes(self.world.read_artifact(value))
        return bytes(value)

    def _rows(self, rec: dict[str, Any]) -> list[WriteRow]:
        return [(rec["path"], rec["task"], w[0], w[1], w[2], w[3]) for w in rec["w"]]

    def _fold(self, log: ThreadLog, seq: int, type_: str, payload: Any,
              rec: dict[str, Any] | None = None, *, lazy: bool = False) -> None:
        """Fold one event in; `rec`: its record when the caller has it (its own append)."""
        if lazy and rec is None and type_ in (CHECKPOINT_EVENT, WRITES_EVENT) \
                and "ns" in payload and "id" in payload:
            key = (payload["ns"], payload["id"])
            if type_ == WRITES_EVENT:
                log.writes.setdefault(key, {})[seq] = payload  # rows once asked for
            else:
                log.checkpoints[key] = CheckpointAt(seq, None, None, [], decoded=False)
                log.undecoded.put(seq, payload)
            return
        if type_ == CHECKPOINT_EVENT:
            rec = rec if rec is not None else self._payload_record(log, payload)
            key = (rec["n"], rec["i"])
            tags = rec.get("g")
            log.checkpoints[key] = CheckpointAt(seq, rec.get("p"),
                                                frozenset(tags) if tags is not None else None,
                                                list(rec.get("e") or ()))
            log.records.put(seq, rec)
        elif type_ == WRITES_EVENT:
            rec = rec if rec is not None else self._payload_record(log, payload)
            log.writes.setdefault((rec["n"], rec["k"]), {})[seq] = self._rows(rec)
        elif type_ == DELETED_EVENT:
            for ns, cid in payload["ids"]:
                at = log.checkpoints.get((ns, cid))
                if at is not None and at.seq < seq:
                    at.dead = True
        elif type_ in ("run.completed", "run.failed", "run.cancelled"):
            log.fenced = True

    def _catch_up(self, th: Thread, log: ThreadLog, *, whole: bool = False) -> None:
        if (whole and log.known_from != 0) or log.known_from is None:
            self._fold_after(th, log, 0)
        else:
            self._fold_after(th, log, log.upto)

    def _record(self, th: Thread, log: ThreadLog, seq: int) -> dict[str, Any]:
        rec = log.records.peek(seq)
        if rec is None:
            payload = log.undecoded.pop(seq, None)
            if payload is None:
                event = self.world.read_event(log.run_id, seq)
                if event.type != CHECKPOINT_EVENT:
                    raise CheckpointDataError(th.thread_id, f"{log.run_id} event {seq}",
                                              f"expected a checkpoint, found {event.type}")
                payload = event.payload
            rec = self._payload_record(log, payload)
            log.records.put(seq, rec)
        return rec

    def _decoded(self, th: Thread, log: ThreadLog, at: CheckpointAt) -> CheckpointAt:
        """`at` with what its record says filled in (folded lazily: decoded now)."""
        if not at.decoded:
            rec = self._record(th, log, at.seq)
            tags = rec.get("g")
            at.parent, at.early = rec.get("p"), list(rec.get("e") or ())
            at.tags = frozenset(tags) if tags is not None else None
            at.decoded = True
        return at

    def _rows_of(self, log: ThreadLog, found: Any) -> list[WriteRow]:
        """A writes event's rows as folded: decoded, or its payload (folded lazily)."""
        return found if isinstance(found, list) else self._rows(self._payload_record(log, found))

    def _stored(self, th: Thread, log: ThreadLog, key: tuple[str, str], at: CheckpointAt) -> Stored:
        rec = self._record(th, log, at.seq)
        return Stored(key[0], key[1], self._decoded(th, log, at).parent, rec, at.seq, self.name)

    # ---- reading ----

    def entries(self, th: Thread, ns: str | None) -> list[Entry]:
        log = self._log(th)
        with log.lock:
            self._catch_up(th, log, whole=True)
            out = [Entry(ns_key(k[0]), k[0], k[1], self._decoded(th, log, at).tags, at.seq,
                         self.name)
                   for k, at in log.checkpoints.items()
                   if not at.dead and (ns is None or k[0] == ns)]
        out.sort(key=lambda e: e.id, reverse=True)
        return out

    def load(self, th: Thread, entry: Entry) -> Stored | None:
        log = self._log(th)
        with log.lock:
            at = log.checkpoints.get((entry.ns, entry.id))  # type: ignore[arg-type]
            if at is None or at.dead:
                return None
            return self._stored(th, log, (entry.ns, entry.id), at)  # type: ignore[arg-type]

    def head(self, th: Thread, ns: str) -> Stored | None:
        log = self._log(th)
        with log.lock:
            if log.known_from is None:
                hint = self._read_hint(th, ns)
                self._fold_after(th, log, max(hint - 1, 0) if hint else 0, lazy=bool(hint))
            else:
                self._fold_after(th, log, log.upto)
            while True:
                live = [(k[1], k, at) for k, at in log.checkpoints.items()
                        if k[0] == ns and not at.dead]
                if live:
                    _, key, at = max(live, key=lambda x: x[0])
                    return self._stored(th, log, key, at)
                if log.known_from == 0:
                    return None
                self._fold_after(th, log, 0)

    def _read_hint(self, th: Thread, ns: str) -> int:
        key = ns_key(ns)
        folder = self._hint_dir(th.run_id)
        best, old_form = 0, False
        for name in self.world.list_dir(folder):
            k, _, seq = name.partition(".")
            if k == key:
                if seq.isdigit():
                    best = max(best, int(seq))
                old_form = old_form or seq == "json"
        if best or not old_form:
            return best
        # A hint written before hints were names: `{"seq": n}` in `<nsKey>.json`.
        raw = self.world.read_file(f"{folder}/{key}.json")
        try:
            return int(json.loads(raw)["seq"]) if raw else 0
        except (ValueError, KeyError, TypeError):
            return 0  # torn by a power cut: read the log instead

    def get(self, th: Thread, ns: str, checkpoint_id: str) -> Stored | None:
        log = self._log(th)
        with log.lock:
            self._catch_up(th, log)
            at = log.checkpoints.get((ns, checkpoint_id))
            if at is None and log.known_from != 0:
                self._fold_after(th, log, 0)
                at = log.checkpoints.get((ns, checkpoint_id))
            if at is None or at.dead:
                return None
            return self._stored(th, log, (ns, checkpoint_id), at)

    def blob(self, th: Thread, ns: str, name: str, loc: Any) -> bytes | None:
        log = self._log(th)
        with log.lock:
            rec = self._record(th, log, int(loc))
        data = (rec.get("b") or {}).get(name)
        return self._inlined(data) if data is not None else None

    def writes(self, th: Thread, ns: str, checkpoint_id: str, stored: Stored | None) -> list[WriteRow]:
        log = self._log(th)
        with log.lock:
            at = log.checkpoints.get((ns, checkpoint_id))
            if at is None or log.known_from is None or at.seq <= log.known_from:
                # Its writes may lie anywhere after it: the whole log, once.
                self._catch_up(th, log, whole=True)
                at = log.checkpoints.get((ns, checkpoint_id))
            found = {seq: self._rows_of(log, v)
                     for seq, v in log.writes.get((ns, checkpoint_id), {}).items()}
            for seq in (self._decoded(th, log, at).early if at is not None else ()):
                if seq not in found and log.known_from and seq <= log.known_from:
                    event = self.world.read_event(log.run_id, seq)
                    found[seq] = self._rows(self._payload_record(log, event.payload))
        rows = merge_writes((seq, row) for seq, rows in found.items() for row in rows)
        return [(*row[:5], self._inlined(row[5])) for row in rows]

    # ---- writing ----

    def _append(self, th: Thread, type_: str, payload: Any, *, key: str | None = None,
                durable: bool = True, after_writes: bool = False) -> Any:
        if not durable:
            try:
                return self.world.append_event(th.run_id, type_, payload, idempotency_key=key,
                                               durable=False)
            except RunFinishedError:
                raise Regenerated() from None
        upto, ok = self.coverage.begin_synced(after_writes=after_writes), False
        try:
            event = self.world.append_event(th.run_id, type_, payload, idempotency_key=key,
                                            durable=True)
            ok = True
        except RunFinishedError:
            raise Regenerated() from None
        finally:
            self.coverage.end_synced(upto, ok)
        return event

    def await_durable(self, ticket: tuple[int, bool]) -> bool:
        """Return once an unsynced append (`ticket` from `add_writes`) is durable: made so
        by a later synced append (the next checkpoint), else by syncing the log. False when
        it waited RIDE_SECONDS for a checkpoint that never came."""
        # RIDE_SECONDS read now: the module's value (tests set it).
        if self.coverage.wait(ticket[0], ticket[1], RIDE_SECONDS):
            return True
        upto, ok = self.coverage.begin_synced(), False
        try:
            self.world.sync()
            ok = True
        finally:
            self.coverage.end_synced(upto, ok)
        return ticket[1]  # a raced ticket returns at once: it did not wait in vain

    def start(self, th: Thread) -> None:
        """The log's first event names the thread (`little runs` lists it; idempotent)."""
        self._append(th, THREAD_EVENT, {"threadId": th.thread_id, "generation": th.generation},
                     key=THREAD_EVENT, durable=False)

    def _fold_own(self, th: Thread, event: Any, rec: dict[str, Any]) -> None:
        log = self._log(th)
        with log.lock:
            self._fold(log, event.sequence, event.type, event.payload, rec)
            if log.known_from is not None and event.sequence == log.upto + 1:
                log.upto = event.sequence

    def add_checkpoint(self, th: Thread, ns: str, checkpoint_id: str, record: dict[str, Any],
                       blobs: dict[str, bytes]) -> Any:
        log = self._log(th)
        with log.lock:
            early = log.early.pop((ns, checkpoint_id), [])
        kept = {name: self._outlined(th, name, data) for name, data in blobs.items()}
        rec = dict(record, b=kept, e=early) if early else dict(record, b=kept)
        event = self._append(th, CHECKPOINT_EVENT, {"ns": ns, "id": checkpoint_id, "rec": _b64(pack(rec))},
                             after_writes=True)
        self._fold_own(th, event, rec)
        key = (th.run_id, ns_key(ns))
        with self._lock:
            last = self._hinted.peek(key)
        if event.sequence >= 2 * HINT_EVERY and event.sequence - (last or 0) >= HINT_EVERY:
            self._move_hint(th.run_id, key[1], event.sequence, last)
            with self._lock:
                self._hinted.put(key, event.sequence)
        return event.sequence

    def add_writes(self, th: Thread, ns: str, checkpoint_id: str, task_id: str, task_path: str,
                   regular: list[list[Any]], special: list[list[Any]], *,
                   ride: bool = False) -> tuple[int, bool] | None:
        """Store a task's writes. `ride`: regular ones go in unsynced (a checkpoint put
        meanwhile waits for them, briefly, so its synced commit comes after and covers
        them), and the ticket to pass `await_durable` before acknowledging them is
        returned (None: all synced)."""
        riding = ride and self.one_wal and bool(regular) \
            and (th.run_id, ns_key(ns)) not in self.writes_awaited
        if riding:
            self.coverage.writes_begin()
        pending = riding  # writes_done still owed
        ticket: tuple[int, bool] | None = None
        try:
            head = {"n": ns, "k": checkpoint_id, "task": task_id, "path": task_path}
            regular = [[w[0], w[1], w[2], self._outlined(th, f"{checkpoint_id}.{task_id}.{w[0]}", w[3])]
                       for w in regular]
            special = [[w[0], w[1], w[2], self._outlined(th, f"{checkpoint_id}.{task_id}.{w[0]}", w[3])]
                       for w in special]
            for rows, key in ((regular, "w|" + json.dumps([ns, checkpoint_id, task_id, sorted(w[0] for w in regular)])),
                              (special, None)):
                if not rows:
                    continue
                rec = {**head, "w": rows}
                payload = {"ns": ns, "id": checkpoint_id, "rec": _b64(pack(rec))}
                # Special writes (errors, interrupts, resumes) may be the last of a run:
                # synced at once, which also makes the regular ones before them durable.
                durable = not (riding and key is not None)
                try:
                    event = self._append(th, WRITES_EVENT, payload, key=key, durable=durable)
                except IdempotencyConflictError:
                    if pending:
                        pending = False
                        self.coverage.writes_done(False)
                    continue  # the same task's writes were kept before: the first stay
                if pending:
                    pending = False
                    ticket = self.coverage.writes_done(True)
                self._fold_own(th, event, rec)
                log = self._log(th)
                with log.lock:
                    if (ns, checkpoint_id) not in log.checkpoints:
                        # durability="async": a task's writes may land before its checkpoint;
                        # the checkpoint names them so a reader from its hint finds them.
                        log.early.setdefault((ns, checkpoint_id), []).append(event.sequence)
        finally:
            if pending:
                self.coverage.writes_done(False)
        return ticket if not special else None

    def remove(self, th: Thread, doomed: list[Entry], reclaim: bool) -> None:
        """A tombstone: readers skip those checkpoints from now on. A log is append-only,
        so their space comes back when the thread is compacted (`Threads.compact`, which
        `prune` uses)."""
        if doomed:
            self._append(th, DELETED_EVENT, {"ids": [[e.ns, e.id] for e in doomed]})

    def orphan_writes(self, th: Thread) -> dict[tuple[str, str], list[WriteRow]]:
        """Writes for checkpoints the log does not hold, newer than any it holds in their
        namespace: a put in flight (durability="async") whose writes came first."""
        log = self._log(th)
        with log.lock:
            self._catch_up(th, log, whole=True)
            newest: dict[str, str] = {}
            for ns, cid in log.checkpoints:
                newest[ns] = max(newest.get(ns, ""), cid)
            out = {}
            for (ns, cid), by_seq in log.writes.items():
                if (ns, cid) not in log.checkpoints and cid > newest.get(ns, ""):
                    rows = merge_writes((seq, row) for seq, found in by_seq.items()
                                        for row in self._rows_of(log, found))
                    out[(ns, cid)] = [(*row[:5], self._inlined(row[5])) for row in rows]
            return out

    def delete(self, th: Thread) -> None:
        for gen in {max(th.generation - 1, 0), th.generation, th.generation + 1}:
            t = Thread(th.thread_id, th.owner, th.layout, gen)
            self.world.delete_run(t.run_id)
            self.forget(t)


# --- the first layout, read-only ------------------------------------------------------------

class LegacyLayout:
    """The first layout (a JSON file per checkpoint with every channel): read, and removed
    by prune and delete, never written."""

    name = "legacy"

    def __init__(self, world: WorldLike):
        self.world = world

    def thread_dir(self, th: Thread) -> str:
        return f"runs/{th.owner}/langgraph"

    def exists(self, th: Thread) -> bool:
        return bool(self.world.list_dir(self.thread_dir(th)))

    def entries(self, th: Thread, ns: str | None) -> list[Entry]:
        base = self.thread_dir(th)
        keys = [ns_key(ns)] if ns is not None else [
            n for n in self.world.list_dir(base) if n.startswith("ns_")]
        out = []
        for key in keys:
            for name in self.world.list_dir(f"{base}/{key}/c"):
                if not name.endswith(".json"):
                    continue
                try:
                    cid = bytes.fromhex(name[:-5]).decode()
                except ValueError:
                    continue
                out.append(Entry(key, ns, cid, None, name, self.name))
        out.sort(key=lambda e: e.id, reverse=True)
        return out

    def load(self, th: Thread, entry: Entry) -> Stored | None:
        path = f"{self.thread_dir(th)}/{entry.ns_key}/c/{entry.loc}"
        doc = self.world.read_document(path)
        if not isinstance(doc, dict):
            return None
        return Stored(doc["checkpointNs"], doc["checkpointId"], doc.get("parentCheckpointId"),
                      self._record(doc), None, self.name)

    def _record(self, doc: dict[str, Any]) -> dict[str, Any]:
        """A first-layout record in today's shape; values held as artifacts stay refs."""
        return {"f": 1, "n": doc["checkpointNs"], "i": doc["checkpointId"],
                "p": doc.get("parentCheckpointId"), "c": self._typed(doc["checkpoint"]),
                "m": self._typed(doc["metadata"]), "g": None,
                "v": {ch: [None, self._ref(packed)] for ch, packed in doc["channels"].items()}}

    def _typed(self, packed: dict[str, Any]) -> list[Any]:
        if "ref" in packed:
            return [packed["type"], bytes(self.world.read_artifact(packed["ref"]))]
        return [packed["type"], base64.b64decode(packed["data"])]

    def _ref(self, packed: dict[str, Any]) -> list[Any]:
        if "ref" in packed:
            return ["a", packed["type"], packed["ref"]]
        return ["i", packed["type"], base64.b64decode(packed["data"])]

    def head(self, th: Thread, ns: str) -> Stored | None:
        for entry in self.entries(th, ns):
            found = self.load(th, entry)
            if found is not None:
                return found
        return None

    def get(self, th: Thread, ns: str, checkpoint_id: str) -> Stored | None:
        name = checkpoint_id.encode().hex() + ".json"
        return self.load(th, Entry(ns_key(ns), ns, checkpoint_id, None, name, self.name))

    def writes(self, th: Thread, ns: str, checkpoint_id: str, stored: Stored | None) -> list[WriteRow]:
        folder = f"{self.thread_dir(th)}/{ns_key(ns)}/w/{checkpoint_id.encode().hex()}"
        rows: list[tuple[int, WriteRow]] = []
        for name in self.world.list_dir(folder):
            doc = self.world.read_document(f"{folder}/{name}")
            if not isinstance(doc, dict):
                continue
            for w in doc["writes"]:
                t = self._ref(w["value"])
                rows.append((0, (doc["taskPath"], doc["taskId"], w["idx"], w["channel"], t[1],
                                 t if t[0] == "a" else t[2])))
        return merge_writes(rows)

    def remove(self, th: Thread, doomed: list[Entry], reclaim: bool) -> None:
        base = self.thread_dir(th)
        for entry in doomed:
            self.world.remove_file(f"{base}/{entry.ns_key}/c/{entry.loc}")
            folder = f"{base}/{entry.ns_key}/w/{entry.loc[:-5]}"
            for name in self.world.list_dir(folder):
                self.world.remove_file(f"{folder}/{name}", durable=False)
            if self.world.file_info(folder) is not None:
                self.world.remove_dir(folder)
        self.world.sync()


# --- threads: their documents, and which layout holds each ------------------------------------

def on_local_disk(world: WorldLike) -> bool:
    """True when the World's files are on a local disk: there a listing of a thread's
    checkpoints costs far more than reading one file, so new threads keep a head pointer
    (an object store lists a thousand names in one request, and a pointer would cost two
    more per checkpoint; in memory, reads are cheap and a pointer is pure cost)."""
    protocol = getattr(getattr(world, "files", None), "protocol", ())
    names = {protocol} if isinstance(protocol, str) else set(protocol)
    return bool(names & {"file", "local"})


class Threads:
    """Finds, creates, lists and compacts threads; the layouts do the storing."""

    def __init__(self, world: WorldLike, preferred: str):
        self.world = world
        self.preferred = preferred
        self.layouts: dict[str, Any] = {"files": FilesLayout(world), "events": EventsLayout(world)}
        self.legacy = LegacyLayout(world)
        self._lock = threading.Lock()
        self._known: LRU = LRU(1024)
        self._prepared = False
        self.head_pointers = on_local_disk(world)

    def doc_path(self, owner: str) -> str:
        return f"{THREADS_DIR}/{owner}.json"

    def layout(self, th: Thread) -> Any:
        return self.layouts[th.layout]

    def _from_doc(self, thread_id: str, owner: str, doc: Any) -> Thread | None:
        if not isinstance(doc, dict):
            return None
        layout = doc.get("layout")
        if layout is None:  # written by the first layout
            return Thread(thread_id, owner, self.preferred, 0, legacy=True)
        return Thread(thread_id, owner, str(layout), int(doc.get("generation") or 0),
                      legacy=bool(doc.get("legacy")), head_pointer=doc.get("headPointer") is True)

    def find(self, thread_id: str, *, fresh: bool = False) -> Thread | None:
        """The thread as stored, or None. `fresh`: read its document again (a reader that
        must see another process's compaction); otherwise what this process last saw."""
        owner = thread_owner_run_id(thread_id)
        if not fresh:
            with self._lock:
                known = self._known.peek(owner)
            if known is not None:
                return known
        th = self._from_doc(thread_id, owner, self.world.read_document(self.doc_path(owner)))
        if th is None:
            th = self._undocumented(thread_id, owner)
        if th is not None:
            with self._lock:
                self._known.put(owner, th)
        return th

    def _undocumented(self, thread_id: str, owner: str) -> Thread | None:
        """A thread whose first put was cut short before its document was written."""
        for name in ("events", "files"):
            # Pointers as for a new thread: the writer that began it may document it with
            # headPointer after this process's puts, which must then have moved it too.
            th = Thread(thread_id, owner, name, 0, documented=False,
                        head_pointer=name == "files" and self.head_pointers)
            if self.layouts[name].exists(th):
                return th
        th = Thread(thread_id, owner, self.preferred, 0, legacy=True, documented=False)
        return th if self.legacy.exists(th) else None

    def for_write(self, thread_id: str) -> Thread:
        th = self.find(thread_id)
        if th is None:
            th = Thread(thread_id, thread_owner_run_id(thread_id), self.preferred, 0,
                        documented=False,
                        head_pointer=self.preferred == "files" and self.head_pointers)
            with self._lock:
                self._known.put(th.owner, th)
        return th

    def prepare(self, thread_id: str) -> None:
        """Called when LangGraph asks for a thread that does not exist yet, which it does
        just before it runs one: what a saver does once, done here rather than while the
        thread's first checkpoint is in flight (under durability="async" the graph runs on
        meanwhile, and a crash before that checkpoint lands loses the whole thread). Makes
        the threads' folders; on the events layout also opens this thread's log with one
        `langgraph.opened` event (the catalogue does not list it), so this process's first
        commit — local_world then pre-sizes its WAL, tens of ms — is behind us."""
        if self._prepared:
            return
        self._prepared = True
        self.world.ensure_dir(THREADS_DIR)
        self.world.ensure_dir("runs")
        if self.preferred == "events":
            self.world.append_event(thread_owner_run_id(thread_id), OPENED_EVENT, {},
                                    idempotency_key=OPENED_EVENT, durable=False)

    def document(self, th: Thread) -> None:
        """Write the thread's document (durable), and the owner run's first event."""
        doc = {"threadId": th.thread_id, "layout": th.layout, "generation": th.generation,
               "legacy": th.legacy}
        if th.head_pointer:
            doc["headPointer"] = True
        self.world.write_document(self.doc_path(th.owner), doc)
        if th.layout == "files":
            # The owner run's one event names the thread in its log, so `little runs` lists
            # it (idempotent: the same key and payload from any process is the same event).
            # Durable: the catalogue lists a run only once its events are.
            self.world.append_event(th.owner, THREAD_EVENT, {"threadId": th.thread_id},
                                    idempotency_key=THREAD_EVENT)
        th.documented = True

    def forget(self, th: Thread) -> None:
        with self._lock:
            self._known.pop(th.owner, None)
        self.layouts["events"].forget(th)

    def owners(self) -> list[str]:
        return [n[:-5] for n in self.world.list_dir(THREADS_DIR) if n.endswith(".json")]

    def all(self) -> Iterator[Thread]:
        """Every documented thread, read one document at a time (a generator)."""
        for owner in self.owners():
            doc = self.world.read_document(self.doc_path(owner))
            if isinstance(doc, dict) and isinstance(doc.get("threadId"), str):
                th = self._from_doc(doc["threadId"], owner, doc)
                if th is not None:
                    with self._lock:
                        self._known.put(owner, th)
                    yield th

    def sources(self, th: Thread) -> list[Any]:
        """The layouts that hold this thread's checkpoints."""
        out = [self.layout(th)]
        if th.legacy:
            out.append(self.legacy)
        return out

    def delete(self, th: Thread) -> None:
        if th.layout == "events":
            self.layouts["events"].delete(th)
        self.world.delete_run(th.owner)
        self.world.remove_file(self.doc_path(th.owner))
        self.forget(th)

    # ---- compaction of the events layout ----

    def _compaction_lock(self, th: Thread) -> Any:
        return self.world.run_lock(f"{th.owner}_c")

    def wait_for_generation(self, th: Thread) -> Thread:
        """After a refused append: the thread as its document now says, once another
        process's compaction has finished (or finishing one that died half way)."""
        deadline = time.monotonic() + COMPACTION_WAIT_SECONDS
        while True:
            fresh = self.find(th.thread_id, fresh=True)
            if fresh is not None and fresh.generation != th.generation:
                self.layouts["events"].forget(th)
                return fresh
            try:
                with self._compaction_lock(th):
                    again = self.find(th.thread_id, fresh=True)
                    if again is not None and again.generation != th.generation:
                        return again
                    # The compactor died after closing the log: finish its work, keeping
                    # everything (no prune decision survived it).
                    return self._compact_locked(th, set())
            except RunLockedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def compact(self, th: Thread, drop: set[tuple[str, str]]) -> Thread:
        """Rewrite the thread's checkpoints but those in `drop` ((ns, id)) into its next
        generation, and delete the old one."""
        with self._compaction_lock(th):
            current = self.find(th.thread_id, fresh=True) or th
            return self._compact_locked(current, drop)

    def _compact_locked(self, current: Thread, drop: set[tuple[str, str]]) -> Thread:
        events: EventsLayout = self.layouts["events"]
        th = dataclasses.replace(current, closing=True)
        nxt = Thread(th.thread_id, th.owner, th.layout, th.generation + 1, legacy=False)
        # A half-made next generation (a compactor that died before the switch) goes first.
        self.world.delete_run(nxt.run_id)
        events.forget(nxt)
        events.forget(th)
        copy = Copy(self, th, nxt)
        events.start(nxt)
        copy.run(self.sources(th), drop)
        # Close the old log: an append there is refused from now on, so a writer that did
        # not see the switch re-reads the document; anything it got in first is copied now.
        try:
            self.world.append_event(th.run_id, "run.completed",
                                    {"output": None, "compactedInto": nxt.run_id})
        except RunFinishedError:
            pass  # closed already, by a compactor that died after closing it
        events.forget(th)
        copy.run([events], set(), late=True)
        self.world.sync()
        self.world.write_document(self.doc_path(th.owner), {
            "threadId": th.thread_id, "layout": th.layout, "generation": nxt.generation,
            "legacy": False})
        with self._lock:
            self._known.put(th.owner, nxt)
        # Generation 0 is the owner run, whose folder may also hold first-layout files:
        # all of it goes (copied above); the thread's document stays.
        self.world.delete_run(th.run_id)
        events.forget(th)
        return nxt


class Copy:
    """Copies checkpoints with their writes, and the values they need, from one thread
    (any layouts) into another, oldest first. Remembers what it copied and where each
    value went, so a second pass copies only what arrived meanwhile."""

    def __init__(self, threads: Threads, src: Thread, dst: Thread):
        self.threads, self.src, self.dst = threads, src, dst
        self.layout = threads.layout(dst)
        self.seen: set[tuple[str, str]] = set()
        self.copied: set[tuple[str, str]] = set()
        self.blob_locs: dict[tuple[str, str], Any] = {}

    def run(self, sources: list[Any], drop: set[tuple[str, str]], *, late: bool = False) -> None:
        entries: list[tuple[Any, Entry]] = []
        for source in sources:
            entries += [(source, e) for e in source.entries(self.src, None)]
        entries.sort(key=lambda x: x[1].id)
        for source, entry in entries:
            stored = source.load(self.src, entry)
            if stored is None:
                continue
            key = (stored.ns, stored.id)
            if key in self.copied:
                if late:  # writes may have come in for it since
                    self._copy_writes(source, stored)
                continue
            if key in self.seen or key in drop:
                self.seen.add(key)
                continue
            self.seen.add(key)
            self._copy_checkpoint(source, stored)
        if late:
            for source in sources:
                if isinstance(source, EventsLayout):
                    for (ns, cid), rows in source.orphan_writes(self.src).items():
                        self._add_writes(ns, cid, rows)

    def _copy_checkpoint(self, source: Any, stored: Stored) -> None:
        rec = {k: v for k, v in stored.record.items() if k not in ("b", "e")}
        blobs: dict[str, bytes] = {}
        rec["v"] = {ch: [version, self._ref(source, stored, ref, blobs)]
                    for ch, (version, ref) in (stored.record.get("v") or {}).items()}
        loc = self.layout.add_checkpoint(self.dst, stored.ns, stored.id, rec, blobs)
        for name in blobs:
            self.blob_locs[(stored.ns, name)] = loc
        self.copied.add((stored.ns, stored.id))
        self._copy_writes(source, stored)

    def _copy_writes(self, source: Any, stored: Stored) -> None:
        self._add_writes(stored.ns, stored.id, source.writes(self.src, stored.ns, stored.id, stored))

    def _add_writes(self, ns: str, checkpoint_id: str, rows: list[WriteRow]) -> None:
        by_task: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {}
        for task_path, task_id, idx, channel, kind, value in rows:
            if isinstance(value, list):  # first layout: a value kept as an artifact
                value = bytes(self.threads.world.read_artifact(value[2]))
            regular, special = by_task.setdefault((task_id, task_path), ([], []))
            (regular if idx >= 0 else special).append([idx, channel, kind, value])
        for (task_id, task_path), (regular, special) in by_task.items():
            self.layout.add_writes(self.dst, ns, checkpoint_id, task_id, task_path, regular, special)

    def _ref(self, source: Any, stored: Stored, ref: Any, blobs: dict[str, bytes]) -> Any:
        if ref is None or ref[0] == "i":
            return ref
        if ref[0] == "a":  # first layout: a value kept as an artifact becomes a blob
            name = f"{id_name(stored.id)}.a{len(blobs)}"
            blobs[name] = bytes(self.threads.world.read_artifact(ref[2]))
            return ["b", name, ref[1], None]

        def moved(name: str, loc: Any) -> Any:
            if (stored.ns, name) in self.blob_locs:
                return self.blob_locs[(stored.ns, name)]
            if name not in blobs:
                data = source.blob(self.src, stored.ns, name, loc if loc is not None else stored.loc)
                if data is None:
                    raise CheckpointDataError(self.src.thread_id, f"checkpoint {stored.id}",
                                              f"value {name} is missing")
                blobs[name] = data
            return None

        if ref[0] == "b":
            return ["b", ref[1], ref[2], moved(ref[1], ref[3])]
        return ["l", ref[1], ref[2], [[seg[0], seg[1], moved(seg[0], seg[2])] for seg in ref[3]]]


def copy_records(threads: Threads, src: Thread, dst: Thread) -> None:
    """Copy every checkpoint of `src` (with writes and values) into `dst`."""
    Copy(threads, src, dst).run(threads.sources(src), set())


# --- what `little runs` and `little ui` show of a thread -------------------------------------

def describe_thread(world: WorldLike, run_id: str) -> dict[str, Any] | None:
    """A thread owner run as a thread: its thread id, how many checkpoints its root graph
    holds, and the node(s) that ran in the step its newest checkpoint records (None when
    that is not known: the input checkpoint, or writes stored by another process). None
    for a run that owns no thread. Reads the thread's document, its index and one record."""
    threads = Threads(world, "events" if getattr(world, "kind", "") == "local" else "files")
    # A pruned thread on the events layout lives on in run `<owner>_<generation>`.
    owner, generation = _owner_and_generation(run_id)
    doc = world.read_document(threads.doc_path(owner))
    if not isinstance(doc, dict) or not isinstance(doc.get("threadId"), str):
        return None
    if int(doc.get("generation") or 0) != generation:
        return None  # a log the thread has left (its deletion is under way)
    th = threads.find(doc["threadId"], fresh=True)
    if th is None:
        return None
    sources = threads.sources(th)
    count = len({e.id for src in sources for e in src.entries(th, "")})
    heads = [s for s in (src.head(th, "") for src in sources) if s is not None]
    head = max(heads, key=lambda s: s.id) if heads else None
    nodes = last_nodes(head.record) if head is not None else []
    return {"threadId": th.thread_id, "checkpoints": count,
            "lastNode": ", ".join(nodes) if nodes else None}


_GENERATION_RUN = re.compile(r"(run_lg_[0-9a-f]{32})_(\d+)")


def _owner_and_generation(run_id: str) -> tuple[str, int]:
    """The thread owner and log generation of a run that holds a thread's records."""
    m = _GENERATION_RUN.fullmatch(run_id)
    return (m.group(1), int(m.group(2))) if m else (run_id, 0)


def last_nodes(record: dict[str, Any]) -> list[str]:
    """The node(s) whose run a checkpoint record was the first to include: those that saw
    the newest channel versions (`versions_seen`, which LangGraph moves on for each node that
    finishes). Read without LangGraph's serializer: the checkpoint body is plain msgpack."""
    body = record.get("c")
    if not isinstance(body, list) or len(body) != 2 or body[0] != "msgpack":
        return []  # the first layout's record, or another serializer's
    seen = ormsgpack.unpackb(bytes(body[1])).get("versions_seen") or {}
    newest: dict[str, Any] = {}
    for node, versions in seen.items():
        if not node.startswith("__") and isinstance(versions, dict) and versions:
            newest[node] = max(versions.values())
    if not newest:
        return []
    top = max(newest.values())
    return sorted(n for n, v in newest.items() if v == top)
