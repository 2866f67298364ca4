"""LangGraph checkpoints in any World: `WorldCheckpointSaver(world)`.

```python
from little_workflow.ext.langgraph import WorldCheckpointSaver

graph = builder.compile(checkpointer=WorldCheckpointSaver(lw.virtual_world("s3://b/wf")))
```

Everything goes through World methods, so it works on every World and `tracing_world`
sees each read and write; `langgraph_store.py` says where records live (files on virtual
Worlds, the thread's own event log on `local_world`).

A checkpoint record holds the checkpoint without its values, its metadata, and for each
channel its version and where its value is:

- `["i", type, bytes]` inline: a small value (≤ 1 KiB serialized), written again with
  each checkpoint that holds it, as cheap as a reference;
- `["b", name, type, loc]` a blob first stored by the checkpoint in `name`; a checkpoint
  whose channel keeps its version points at the blob its parent points at, so a value is
  stored once per version (as PostgresSaver's `checkpoint_blobs`);
- `["l", type, header, [[name, size, loc], …]]` a list (a msgpack array) as segments of
  its items' bytes: a new version that appends to its parent's list stores only the new
  items, and the last segments merge while one is no more than twice the next, so a list
  is a handful of segments and a chat's messages are stored about log(n) times each,
  not once per turn. Reading concatenates them behind the array's header.

So a thread's storage grows with what changes, not with the conversation times its length.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, TypeVar

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        SerializerProtocol,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "little_workflow.ext.langgraph needs LangGraph: pip install 'little-workflow[langgraph]'"
    ) from e

from ..world.protocol import WorldLike

# Once defined here; the World owns it now, and the old import path keeps working.
from ..world.vocabulary import INLINE_LIMIT as INLINE_LIMIT
from .langgraph_store import (
    LRU,
    CheckpointDataError,
    Entry,
    Regenerated,
    Stored,
    Thread,
    Threads,
    copy_records,
    filter_tags,
    id_name,
    metadata_tags,
    ns_key,
    tag,
    thread_owner_run_id,
)

__all__ = ["CheckpointDataError", "WorldCheckpointSaver", "thread_owner_run_id"]

#: A serialized channel value up to this size is kept in the checkpoint record itself.
INLINE_VALUE = 1024
#: Bytes of list items kept in memory to diff a list's next version against (per saver).
LIST_CACHE_BYTES = 64 * 1024 * 1024

T = TypeVar("T")


def _configurable(config: RunnableConfig | None) -> dict[str, Any]:
    conf = (config or {}).get("configurable")
    if not isinstance(conf, dict) or "thread_id" not in conf:
        raise ValueError(
            "a LangGraph checkpointer config needs configurable.thread_id, "
            f"e.g. {{'configurable': {{'thread_id': 't1'}}}}; got {config!r}"
        )
    return conf


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns,
                             "checkpoint_id": checkpoint_id}}


def _array_header(data: bytes) -> int:
    """Length of the msgpack array header `data` starts with, 0 when it is no array."""
    first = data[0] if data else 0
    if 0x90 <= first <= 0x9F:
        return 1
    return {0xDC: 3, 0xDD: 5}.get(first, 0)


@functools.lru_cache(maxsize=1024)  # a graph's few task paths, once per task otherwise
def _node_of(task_path: str) -> str | None:
    """The node a task runs, from LangGraph's task path (`~__pregel_pull, node`)."""
    parts = [p.strip() for p in task_path.split(",")]
    if len(parts) >= 2 and parts[0] == "~__pregel_pull":
        return parts[1]
    return None


#: Where LangGraph passes a run's durability to its saver (in the config's configurable,
#: when the run was given one; "async" is its default).
DURABILITY_KEY = "__pregel_durability"
#: The longest a new thread's run waits for its first checkpoint (a put that hangs longer
#: has failed, and LangGraph reports that itself).
FIRST_PUT_WAIT_SECONDS = 60.0


@dataclass
class FirstPut:
    """A new thread's first checkpoint: begun, and stored (or failed)."""

    started: bool = False
    done: threading.Event = field(default_factory=threading.Event)


#: The asyncio task awaiting `aput`/`aput_writes` (their work runs on some pool thread),
#: by id: a task kept alive here would keep its result and frames.
_ASYNC_CALLER: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "little_workflow_langgraph_async_caller", default=None)


def caller() -> tuple[str, int]:
    """Who makes a saver call: the asyncio task awaiting it, else the OS thread."""
    task = _ASYNC_CALLER.get()
    return ("task", task) if task is not None else ("thread", threading.get_ident())


class Riders:
    """Whether a thread's writes may ride — wait for the next checkpoint's sync instead of
    syncing themselves — learned per thread in this process. They ride once someone other
    than their caller made the thread's puts (LangGraph's loop: its executor's threads or
    tasks, any of which may also store the writes); a caller that makes every put itself
    cannot be making the next one while it waits. A ride that waited in vain (RIDE_SECONDS:
    a server whose requests each put, then write, on whatever pool thread) turns riding off
    for that thread until a put is seen beginning while writes are in flight, as in
    LangGraph's loop."""

    MANY: Final = ("many", 0)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._putters = LRU(4096)  # thread owner -> caller(), or MANY once two
        self._off = LRU(4096)  # owners whose last ride waited in vain, no overlap since
        self._writing: dict[str, int] = {}  # owner -> put_writes calls in flight

    def put(self, owner: str) -> None:
        me = caller()
        with self._lock:
            putter = self._putters.peek(owner)
            if putter is None or (putter != self.MANY and putter != me):
                self._putters.put(owner, me if putter is None else self.MANY)
            if self._writing.get(owner):
                self._off.pop(owner, None)

    def writes_begin(self, owner: str) -> None:
        with self._lock:
            self._writing[owner] = self._writing.get(owner, 0) + 1

    def may_ride(self, owner: str) -> bool:
        me = caller()
        with self._lock:
            putter = self._putters.peek(owner)
            return putter is not None and putter != me and self._off.peek(owner) is None

    def writes_end(self, owner: str, *, waited_in_vain: bool = False) -> None:
        with self._lock:
            left = self._writing.get(owner, 1) - 1
            if left:
                self._writing[owner] = left
            else:
                self._writing.pop(owner, None)
            if waited_in_vain:
                self._off.put(owner, True)


#: The first checkpoint the graph run in this context waits for (see `get_next_version`).
#: A context variable, not a thread-local: `ainvoke` looks its thread up on a worker
#: thread but runs its steps on the event loop, and two runs on one loop are two tasks.
_AWAITED_FIRST_PUT: contextvars.ContextVar[FirstPut | None] = contextvars.ContextVar(
    "little_workflow_langgraph_first_put", default=None)


@dataclass(frozen=True)
class ListState:
    """A stored list version: its items' bytes and the segments that hold them."""

    kind: str
    region: bytes
    segments: tuple[tuple[str, int, Any], ...]


@dataclass(frozen=True)
class Retention:
    """What `prune_old` keeps of each namespace of a thread: its newest `keep_last`
    checkpoints and those younger than `keep_for` (both, when both are given); always its
    newest, and the ancestors a kept checkpoint's delta channels are rebuilt from."""

    keep_last: int | None = None
    keep_for: timedelta | float | None = None


class WorldCheckpointSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer over any World (sync and async, thread-safe).

    Every write is durable when it returns. The async methods run the sync ones in a
    worker thread, so a World on an object store never blocks the event loop.
    `layout` ("files" or "events") overrides where new threads are kept; by default
    `local_world` keeps them in events (one SQLite commit a record), others in files.
    """

    def __init__(self, world: WorldLike, *, serde: SerializerProtocol | None = None,
                 layout: str | None = None) -> None:
        super().__init__(serde=serde)
        if layout not in (None, "files", "events"):
            raise ValueError(f"unknown layout {layout!r}: use 'files' or 'events'")
        self.world = world
        preferred = layout or ("events" if getattr(world, "kind", "") == "local" else "files")
        self._threads = Threads(world, preferred)
        self._lock = threading.Lock()
        # Caches of storage, never the truth: where a checkpoint's values are (so a child
        # points at its parent's blobs), stored lists (so a child stores only new items),
        # and the nodes whose writes a checkpoint got (so its child names its last node).
        self._channels: LRU = LRU(1024)
        self._lists: LRU = LRU(256)
        self._list_bytes = 0
        self._nodes: LRU = LRU(1024)
        # Kept here, not on the Thread: a reader replaces that object.
        self._riders = Riders()
        # New threads' first checkpoints, by thread id, and in each graph's own Python
        # thread the one its run is waiting for (see `get_next_version`).
        self._first_puts: dict[str, FirstPut] = {}

    # ---- threads and retries ----------------------------------------------------------

    def _retrying(self, th: Thread, op: Callable[[Thread], T]) -> T:
        for _ in range(5):
            try:
                return op(th)
            except Regenerated:
                # Another process compacted the thread: its document names the new log.
                th = self._threads.wait_for_generation(th)
        return op(th)

    def _find(self, thread_id: str) -> Thread | None:
        return self._threads.find(str(thread_id), fresh=True)

    # ---- reading ---------------------------------------------------------------------

    def _head(self, th: Thread, ns: str) -> Stored | None:
        found = [s for s in (src.head(th, ns) for src in self._threads.sources(th)) if s]
        return max(found, key=lambda s: s.id) if found else None

    def _get(self, th: Thread, ns: str, checkpoint_id: str) -> Stored | None:
        for src in self._threads.sources(th):
            found = src.get(th, ns, checkpoint_id)
            if found is not None:
                return found
        return None

    def _resolved(self, stored: Stored, ref: Any) -> Any:
        """A reference with this record's own location filled in (events: its sequence)."""
        if ref is None or ref[0] in ("i", "a") or stored.loc is None:
            return ref
        if ref[0] == "b":
            return ref if ref[3] is not None else ["b", ref[1], ref[2], stored.loc]
        return ["l", ref[1], ref[2], [[s[0], s[1], s[2] if s[2] is not None else stored.loc]
                                      for s in ref[3]]]

    def _blob(self, th: Thread, stored: Stored, name: str, loc: Any) -> bytes:
        layout = self._threads.layout(th) if stored.layout == "legacy" else \
            self._threads.layouts[stored.layout]
        data = layout.blob(th, stored.ns, name, loc)
        if data is None:
            raise CheckpointDataError(th.thread_id, f"checkpoint {stored.id}", f"value {name} is missing")
        return data

    def _value(self, th: Thread, stored: Stored, channel: str, version: Any, ref: Any) -> Any:
        kind = ref[0]
        if kind == "i":
            return self.serde.loads_typed((ref[1], bytes(ref[2])))
        if kind == "a":  # first layout: a value kept as an artifact
            return self.serde.loads_typed((ref[1], bytes(self.world.read_artifact(ref[2]))))
        if kind == "b":
            return self.serde.loads_typed((ref[2], self._blob(th, stored, ref[1], ref[3])))
        region = b"".join(self._blob(th, stored, s[0], s[2]) for s in ref[3])
        if version is not None:
            self._remember_list(th.owner, stored.ns, channel, version,
                                ListState(ref[1], region, tuple(tuple(s) for s in ref[3])))
        return self.serde.loads_typed((ref[1], bytes(ref[2]) + region))

    def _remember_list(self, owner: str, ns: str, channel: str, version: Any, state: ListState) -> None:
        with self._lock:
            key = (owner, ns, channel, version)
            old = self._lists.pop(key, None)
            if old is not None:
                self._list_bytes -= len(old.region)
            self._lists.put(key, state)
            self._list_bytes += len(state.region)
            while self._list_bytes > LIST_CACHE_BYTES and len(self._lists) > 1:
                _, dropped = self._lists.popitem(last=False)
                self._list_bytes -= len(dropped.region)

    def _tuple(self, th: Thread, stored: Stored) -> CheckpointTuple:
        rec = stored.record
        checkpoint = self.serde.loads_typed((rec["c"][0], bytes(rec["c"][1])))
        values: dict[str, Any] = {}
        channels: dict[str, Any] = {}
        for ch, (version, ref) in (rec.get("v") or {}).items():
            if ref is None:
                continue
            ref = self._resolved(stored, ref)
            channels[ch] = [version, ref]
            values[ch] = self._value(th, stored, ch, version, ref)
        checkpoint["channel_values"] = values
        with self._lock:
            self._channels.put((th.owner, stored.ns, stored.id), channels)
        metadata = self.serde.loads_typed((rec["m"][0], bytes(rec["m"][1])))
        parent = stored.parent
        return CheckpointTuple(
            config=_config(th.thread_id, stored.ns, stored.id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=_config(th.thread_id, stored.ns, parent) if parent else None,
            pending_writes=self._pending_writes(th, stored),
        )

    def _pending_writes(self, th: Thread, stored: Stored) -> builtins.list[tuple[str, str, Any]]:
        rows = []
        for src in self._threads.sources(th):
            rows += src.writes(th, stored.ns, stored.id, stored)
        rows.sort(key=lambda r: writes_sort_key(r[0], r[1], r[2]))
        out = []
        for _path, task_id, _idx, channel, kind, data in rows:
            if isinstance(data, list):  # first layout: a value kept as an artifact
                data = self.world.read_artifact(data[2])
            out.append((task_id, channel, self.serde.loads_typed((kind, bytes(data)))))
        return out

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found, first = self._get_tuple(config)
        if first is not None:
            _AWAITED_FIRST_PUT.set(first)
        return found

    def _get_tuple(self, config: RunnableConfig) -> tuple[CheckpointTuple | None, FirstPut | None]:
        """The checkpoint, and for a new thread under durability="async" the first put
        its run is to wait for (the caller notes it in its own context)."""
        conf = _configurable(config)
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = get_checkpoint_id(config)
        th = self._find(conf["thread_id"])
        if th is None:
            self._threads.prepare(str(conf["thread_id"]))
            if conf.get(DURABILITY_KEY, "async") != "async":
                return None, None
            first = FirstPut()
            with self._lock:
                self._first_puts[str(conf["thread_id"])] = first
            return None, first

        def read(t: Thread) -> CheckpointTuple | None:
            stored = self._get(t, ns, checkpoint_id) if checkpoint_id else self._head(t, ns)
            return self._tuple(t, stored) if stored is not None else None

        return self._retrying(th, read), None

    def _entries(self, th: Thread, ns: str | None) -> builtins.list[tuple[Any, Entry]]:
        out = []
        for src in self._threads.sources(th):
            out += [(src, e) for e in src.entries(th, ns)]
        out.sort(key=lambda x: x[1].id, reverse=True)
        return out

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None:
            threads: Any = self._threads.all()  # one document at a time
            only_ns, only_id = None, None
        else:
            conf = _configurable(config)
            found = self._find(conf["thread_id"])
            threads = [found] if found is not None else []
            only_ns = conf.get("checkpoint_ns")
            only_id = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        wanted = filter_tags(filter) if filter else set()
        remaining = [limit]
        for th in threads:
            done: set[tuple[str, str]] = set()
            while th is not None:
                try:
                    yield from self._list_thread(th, only_ns, only_id, before_id, filter,
                                                 wanted, remaining, done)
                    break
                except Regenerated:
                    # Compacted meanwhile: go on in the new log, past what was yielded.
                    th = self._threads.wait_for_generation(th)
            if remaining[0] is not None and remaining[0] <= 0:
                return

    def _list_thread(self, th: Thread, only_ns: str | None, only_id: str | None,
                     before_id: str | None, filter: dict[str, Any] | None,
                     wanted: set[str] | None, remaining: builtins.list[int | None],
                     done: set[tuple[str, str]]) -> Iterator[CheckpointTuple]:
        for src, entry in self._entries(th, only_ns):
            if remaining[0] is not None and remaining[0] <= 0:
                return
            if (only_id and entry.id != only_id) or (before_id and entry.id >= before_id):
                continue
            if wanted and entry.tags is not None and not wanted <= entry.tags:
                continue  # its metadata cannot match: not read
            stored = src.load(th, entry)
            if stored is None or (stored.ns, stored.id) in done:
                continue  # removed meanwhile, or yielded before a compaction
            if filter:
                metadata = self.serde.loads_typed((stored.record["m"][0], bytes(stored.record["m"][1])))
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            item = self._tuple(th, stored)
            done.add((stored.ns, stored.id))
            if remaining[0] is not None:
                remaining[0] -= 1
            yield item

    # ---- writing ---------------------------------------------------------------------

    def _parent_channels(self, th: Thread, ns: str, parent: str | None) -> dict[str, Any] | None:
        if parent is None:
            return None
        with self._lock:
            known = self._channels.peek((th.owner, ns, parent))
        if known is not None or th.layout != "files":
            # On the events layout an unknown parent is not looked for (it may cost a read
            # of the log): its values are stored again, which is correct, only larger.
            return known
        stored = self._threads.layout(th).get(th, ns, parent)
        if stored is None:
            return None
        return {ch: [v, self._resolved(stored, ref)] for ch, (v, ref) in (stored.record.get("v") or {}).items()
                if ref is not None and ref[0] != "a"}

    def _encode(self, th: Thread, ns: str, checkpoint_id: str, checkpoint: Checkpoint,
                new_versions: ChannelVersions, parent: dict[str, Any] | None,
                ) -> tuple[dict[str, Any], dict[str, bytes], dict[str, ListState]]:
        versions = checkpoint["channel_versions"]
        prefix = id_name(checkpoint_id)
        channels: dict[str, Any] = {}
        blobs: dict[str, bytes] = {}
        lists: dict[str, ListState] = {}
        for ch, value in checkpoint["channel_values"].items():
            version = versions.get(ch)
            prev = parent.get(ch) if parent is not None else None
            if prev is not None and version is not None and prev[0] == version and ch not in new_versions:
                channels[ch] = prev  # unchanged since the parent: its value is stored
                continue
            kind, data = self.serde.dumps_typed(value)
            if len(data) <= INLINE_VALUE:
                channels[ch] = [version, ["i", kind, data]]
                continue
            header = _array_header(data) if kind == "msgpack" else 0
            if header:
                ref, state = self._list_ref(th, ns, prefix, ch, kind, data, header, prev, blobs)
                channels[ch] = [version, ref]
                lists[ch] = state
                continue
            name = f"{prefix}.{len(blobs)}"
            blobs[name] = data
            channels[ch] = [version, ["b", name, kind, None]]
        return channels, blobs, lists

    def _list_ref(self, th: Thread, ns: str, prefix: str, channel: str, kind: str, data: bytes,
                  header: int, prev: Any, blobs: dict[str, bytes]) -> tuple[builtins.list[Any], ListState]:
        region = data[header:]
        segments: builtins.list[builtins.list[Any]] = []
        offset = 0
        if prev is not None and prev[1] is not None and prev[1][0] == "l":
            with self._lock:
                old = self._lists.peek((th.owner, ns, channel, prev[0]))
            if (old is not None and old.kind == kind and len(region) >= len(old.region)
                    and region.startswith(old.region)):
                segments = [list(s) for s in old.segments]
                offset = len(old.region)
        new_names: set[str] = set()

        def add(start: int, end: int) -> builtins.list[Any]:
            name = f"{prefix}.{len(blobs)}"
            while name in blobs:
                name += "x"
            blobs[name] = region[start:end]
            new_names.add(name)
            return [name, end - start, None]

        if len(region) > offset or not segments:
            segments.append(add(offset, len(region)))
        # Merge the newest segments while one is no more than twice the next: sizes fall
        # geometrically, so a list of n items is O(log n) segments and each item is
        # rewritten O(log n) times in all.
        while len(segments) >= 2 and segments[-2][1] < 2 * segments[-1][1]:
            start = sum(s[1] for s in segments[:-2])
            merged = add(start, start + segments[-2][1] + segments[-1][1])
            for s in segments[-2:]:
                if s[0] in new_names:
                    blobs.pop(s[0], None)
            segments[-2:] = [merged]
        return ["l", kind, data[:header], segments], ListState(kind, region, tuple(tuple(s) for s in segments))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = _configurable(config)
        first = None
        if self._first_puts:  # read without the lock: only a get_tuple before this put adds one
            with self._lock:
                first = self._first_puts.pop(str(conf["thread_id"]), None)
        if first is None:
            return self._put(config, conf, checkpoint, metadata, new_versions)
        first.started = True
        try:
            return self._put(config, conf, checkpoint, metadata, new_versions)
        finally:
            first.done.set()

    def get_next_version(self, current: int | None, channel: None = None) -> int:
        """Also where a new thread's run waits, once, for its first checkpoint: LangGraph
        calls this in the graph's own thread (under `ainvoke`, on its event loop) as each
        step ends, and under durability="async" the graph otherwise runs on while that
        checkpoint is stored — a crash before it lands (a few quick nodes later) loses the
        whole thread, input and all, where losing the last steps is what async allows.
        Waited for only once its put is running on a worker thread, so the wait never
        needs the caller's thread or loop (under durability="exit" no put begins before
        the run ends). Under `ainvoke` the loop is blocked for that one put; LangGraph
        gives the saver no awaitable point between steps."""
        first = _AWAITED_FIRST_PUT.get()
        if first is not None and first.started:
            _AWAITED_FIRST_PUT.set(None)
            first.done.wait(FIRST_PUT_WAIT_SECONDS)
        return super().get_next_version(current, channel)

    def _put(
        self,
        config: RunnableConfig,
        conf: dict[str, Any],
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = checkpoint["id"]
        parent = conf.get("checkpoint_id")
        th = self._threads.for_write(thread_id)
        self._riders.put(th.owner)
        body: dict[str, Any] = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        md = get_checkpoint_metadata(config, metadata)
        if th.layout == "events" and md.get("counters_since_delta_snapshot"):
            # DeltaChannels: LangGraph waits for this namespace's writes before putting
            # its next checkpoint, so they cannot wait for that checkpoint's sync.
            self._threads.layouts["events"].writes_awaited.put((th.run_id, ns_key(ns)), True)
        channels, blobs, lists = self._encode(th, ns, checkpoint_id, checkpoint, new_versions,
                                              self._parent_channels(th, ns, parent))
        with self._lock:
            nodes = self._nodes.pop((th.owner, ns, parent), None) if parent else None
        record = {
            "f": 2, "n": ns, "i": checkpoint_id, "p": parent,
            "c": list(self.serde.dumps_typed(body)), "m": list(self.serde.dumps_typed(md)),
            "v": channels, "g": metadata_tags(dict(md)), "a": self.world.clock.now(),
            "x": sorted(nodes) if nodes else None,
        }

        written = [th]

        def write(t: Thread) -> Any:
            written[0] = t  # a compaction meanwhile moves the thread to its next log
            if t.layout == "events" and not t.documented:
                self._threads.layout(t).start(t)
            return self._threads.layout(t).add_checkpoint(t, ns, checkpoint_id, record, blobs)

        loc = self._retrying(th, write)
        th = written[0]
        if loc is None:
            resolved = channels  # nothing to fill in: every reference names its file
        else:
            stored = Stored(ns, checkpoint_id, parent, record, loc, th.layout)
            resolved = {ch: [v, self._resolved(stored, ref)] for ch, (v, ref) in channels.items()}
        with self._lock:
            self._channels.put((th.owner, ns, checkpoint_id), resolved)
        for ch, state in lists.items():
            segs = tuple((s[0], s[1], s[2] if s[2] is not None else loc) for s in state.segments)
            self._remember_list(th.owner, ns, ch, channels[ch][0], ListState(state.kind, state.region, segs))
        if not th.documented:
            # After the first record: the thread is safe as soon as that one is stored.
            self._threads.document(th)
        return _config(thread_id, ns, checkpoint_id)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = _configurable(config)
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = conf["checkpoint_id"]
        th = self._threads.for_write(thread_id)
        regular: builtins.list[builtins.list[Any]] = []
        special: builtins.list[builtins.list[Any]] = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            kind, data = self.serde.dumps_typed(value)
            (regular if idx >= 0 else special).append([idx, channel, kind, data])

        def write(t: Thread) -> tuple[Any, Any]:
            layout = self._threads.layout(t)
            if t.layout == "events":
                if not t.documented:
                    layout.start(t)
                # One fsync a super-step: the writes ride the checkpoint that follows them
                # when someone else makes the puts (`Riders`).
                return layout, layout.add_writes(t, ns, checkpoint_id, task_id, task_path,
                                                 regular, special,
                                                 ride=self._riders.may_ride(t.owner))
            layout.add_writes(t, ns, checkpoint_id, task_id, task_path, regular, special)
            return layout, None

        self._riders.writes_begin(th.owner)
        waited_in_vain = False
        try:
            layout, ticket = self._retrying(th, write)
            if ticket is not None:
                waited_in_vain = not layout.await_durable(ticket)
        finally:
            self._riders.writes_end(th.owner, waited_in_vain=waited_in_vain)
        node = _node_of(task_path)
        if node is not None:
            with self._lock:
                key = (th.owner, ns, checkpoint_id)
                found = self._nodes.peek(key)
                if found is None:
                    found = set()
                    self._nodes.put(key, found)
                found.add(node)

    # ---- removing and copying ------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        th = self._find(str(thread_id))
        if th is None:
            th = Thread(str(thread_id), thread_owner_run_id(str(thread_id)), "files")
        self._threads.delete(th)

    def _remove(self, th: Thread, doomed: builtins.list[tuple[Any, Entry, Stored]], *,
                reclaim: bool) -> None:
        """Remove checkpoints with their writes (and, reclaiming, the values only they held)."""
        if not doomed:
            return
        if th.layout == "events" and reclaim:
            self._threads.compact(th, {(s.ns, s.id) for _, _, s in doomed})
            return
        by_source: dict[int, tuple[Any, builtins.list[Entry]]] = {}
        for src, e, _ in doomed:
            by_source.setdefault(id(src), (src, []))[1].append(e)
        for src, entries in by_source.values():
            src.remove(th, entries, reclaim)

    def _stored_metadata(self, th: Thread, src: Any, entry: Entry) -> tuple[Stored, dict[str, Any]] | None:
        stored = src.load(th, entry)
        if stored is None:
            return None
        rec = stored.record
        return stored, self.serde.loads_typed((rec["m"][0], bytes(rec["m"][1])))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        tags = {tag("run_id", r) for r in wanted}
        for th in list(self._threads.all()):

            def remove(t: Thread) -> None:
                doomed = []
                for src, entry in self._entries(t, None):
                    if entry.tags is not None and not (entry.tags & tags):
                        continue  # its name says another run made it: not read
                    found = self._stored_metadata(t, src, entry)
                    if found is not None and found[1].get("run_id") in wanted:
                        doomed.append((src, entry, found[0]))
                self._remove(t, doomed, reclaim=False)

            self._retrying(th, remove)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            th = self._find(thread_id)
            if th is not None:
                self._retrying(th, lambda t: self._prune_thread(t, Retention(keep_last=1)))

    def prune_old(self, thread_ids: Sequence[str] | None = None, *, keep_last: int | None = None,
                  keep_for: timedelta | float | None = None) -> int:
        """Remove old checkpoints of threads (all of them when `thread_ids` is None) with
        their writes and the values only they needed; what stays is what `Retention` says.
        Crash-safe: a kill part way leaves every thread readable, and its head whole.
        Returns how many checkpoints were removed."""
        if keep_last is None and keep_for is None:
            raise ValueError("prune_old needs keep_last or keep_for (or both)")
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, not {keep_last!r}")
        policy = Retention(keep_last, keep_for)
        if thread_ids is None:
            threads: Any = list(self._threads.all())
        else:
            threads = [t for t in map(self._find, map(str, thread_ids)) if t is not None]
        return sum(self._retrying(th, lambda t: self._prune_thread(t, policy)) for th in threads)

    def _prune_thread(self, th: Thread, policy: Retention) -> int:
        entries = self._entries(th, None)
        by_ns: dict[str, builtins.list[tuple[Any, Entry, Stored]]] = {}
        for src, entry in entries:  # newest first
            stored = src.load(th, entry)
            if stored is not None:
                by_ns.setdefault(stored.ns, []).append((src, entry, stored))
        cutoff = None
        if policy.keep_for is not None:
            seconds = policy.keep_for.total_seconds() if isinstance(policy.keep_for, timedelta) \
                else float(policy.keep_for)
            cutoff = self.world.clock.now() - seconds
        doomed: builtins.list[tuple[Any, Entry, Stored]] = []
        for items in by_ns.values():
            keep: set[str] = set()
            for i, (_src, _entry, stored) in enumerate(items):
                recent = policy.keep_last is not None and i < policy.keep_last
                young = cutoff is not None and float(stored.record.get("a") or 0) >= cutoff
                if i == 0 or recent or young:
                    keep.add(stored.id)
            keep |= self._delta_ancestors([s for _, _, s in items if s.id in keep],
                                          {s.id: s for _, _, s in items})
            doomed += [(src, entry, stored) for src, entry, stored in items if stored.id not in keep]
        self._remove(th, doomed, reclaim=True)
        return len(doomed)

    def _delta_ancestors(self, kept: builtins.list[Stored], by_id: dict[str, Stored]) -> set[str]:
        """Ancestors a kept checkpoint's DeltaChannels are rebuilt from: walk the parent
        chain, with writes, until each such channel has a stored value (what LangGraph's
        `get_delta_channel_history` reads)."""
        out: set[str] = set()
        for stored in kept:
            md = self.serde.loads_typed((stored.record["m"][0], bytes(stored.record["m"][1])))
            missing = {ch for ch in (md.get("counters_since_delta_snapshot") or {})
                       if ch not in (stored.record.get("v") or {})}
            cursor = by_id.get(stored.parent) if stored.parent else None
            while missing and cursor is not None:
                out.add(cursor.id)
                missing -= set(cursor.record.get("v") or {})
                cursor = by_id.get(cursor.parent) if cursor.parent else None
        return out

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source = self._find(str(source_thread_id))
        if source is None:
            return
        target = self._threads.for_write(str(target_thread_id))

        def copy(t: Thread) -> None:
            if t.layout == "events" and not t.documented:
                self._threads.layout(t).start(t)
            copy_records(self._threads, source, t)

        self._retrying(target, copy)
        target = self._threads.for_write(str(target_thread_id))
        if not target.documented:
            self._threads.document(target)

    # ---- async: the same operations off the event loop ------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found, first = await asyncio.to_thread(self._get_tuple, config)
        if first is not None:
            # Here, in the run's own task: the worker thread's context is a copy.
            _AWAITED_FIRST_PUT.set(first)
        return found

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        token = _ASYNC_CALLER.set(id(asyncio.current_task()))
        try:  # the thread gets a copy of this context: the caller is this task
            return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)
        finally:
            _ASYNC_CALLER.reset(token)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        token = _ASYNC_CALLER.set(id(asyncio.current_task()))
        try:
            await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)
        finally:
            _ASYNC_CALLER.reset(token)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
