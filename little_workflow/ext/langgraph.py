"""LangGraph checkpoints in any World: `WorldCheckpointSaver(world)`.

```python
from little_workflow.ext.langgraph import WorldCheckpointSaver

graph = builder.compile(checkpointer=WorldCheckpointSaver(lw.virtual_world("s3://b/wf")))
```

Everything goes through World methods (documents, files, artifacts), so it works on every
World and `tracing_world` sees each read and write. One LangGraph thread belongs to one
owner run id, `run_lg_<sha256(thread_id)[:32]>`, whose log holds one event,
`langgraph.thread {threadId}` (so `little runs` lists the thread and `little verify` finds
the owner of its artifacts; workers and gc leave it alone: it is never active or finished):

```
langgraph/threads/<ownerRunId>.json                     {"threadId"}  (for list(None))
runs/<ownerRunId>/langgraph/<nsKey>/c/<hex(checkpointId)>.json
runs/<ownerRunId>/langgraph/<nsKey>/w/<hex(checkpointId)>/<taskKey>[.m<k>].json
```

A checkpoint file holds the whole checkpoint (channel values included), so the newest
one is a head snapshot: reading a thread of thousands of checkpoints cold is one listing
and one read, never a replay. Checkpoint file names are the hex of the id's UTF-8 bytes,
which sorts as the ids do. A serialized value over 64 KiB is an artifact of the owner run
(content-addressed, so an unchanged large channel is stored once per thread), and
`delete_thread` is `world.delete_run(owner)`: crash-safe, and it leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

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

__all__ = ["WorldCheckpointSaver", "thread_owner_run_id"]

#: Serialized values larger than this go to artifacts (the World's inline limit).
INLINE_LIMIT = 64 * 1024
THREADS_DIR = "langgraph/threads"
ARTIFACT_NAME = "langgraph-value"
THREAD_EVENT = "langgraph.thread"


def thread_owner_run_id(thread_id: str) -> str:
    """The run id that owns a thread's files and artifacts."""
    return "run_lg_" + hashlib.sha256(str(thread_id).encode()).hexdigest()[:32]


def _ns_key(checkpoint_ns: str) -> str:
    # Namespaces hold ':' and '|' and can be long: a fixed-size key, the name is in records.
    return "ns_" + hashlib.sha256(checkpoint_ns.encode()).hexdigest()[:24]


def _id_name(checkpoint_id: str) -> str:
    return checkpoint_id.encode().hex()


def _id_from_name(name: str) -> str | None:
    if not name.endswith(".json"):
        return None
    try:
        return bytes.fromhex(name[:-5]).decode()
    except ValueError:
        return None


def _json_bytes(doc: Any) -> bytes:
    # Compact, for the C encoder: checkpoints are written once per super-step.
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def _configurable(config: RunnableConfig) -> dict[str, Any]:
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


class WorldCheckpointSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer over any World (sync and async, thread-safe).

    The async methods run the sync ones in a worker thread, so a World on an object
    store never blocks the event loop. Every write is durable when it returns (the
    World's `write_file` contract).
    """

    def __init__(self, world: Any, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.world = world
        self._lock = threading.Lock()
        self._indexed_threads: set[str] = set()

    # ---- paths ----------------------------------------------------------------------

    def _thread_dir(self, thread_id: str) -> str:
        return f"runs/{thread_owner_run_id(thread_id)}/langgraph"

    def _ns_dir(self, thread_id: str, checkpoint_ns: str) -> str:
        return f"{self._thread_dir(thread_id)}/{_ns_key(checkpoint_ns)}"

    def _checkpoint_path(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
        return f"{self._ns_dir(thread_id, checkpoint_ns)}/c/{_id_name(checkpoint_id)}.json"

    def _writes_dir(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
        return f"{self._ns_dir(thread_id, checkpoint_ns)}/w/{_id_name(checkpoint_id)}"

    # ---- value encoding ---------------------------------------------------------------

    def _dump(self, owner: str, value: Any) -> dict[str, Any]:
        kind, data = self.serde.dumps_typed(value)
        return self._pack(owner, kind, data)

    def _pack(self, owner: str, kind: str, data: bytes) -> dict[str, Any]:
        if len(data) > INLINE_LIMIT:
            manifest = self.world.write_artifact(
                owner, "", ARTIFACT_NAME, bytes(data),
                content_type="application/octet-stream", encoding="binary")
            return {"type": kind, "ref": manifest.artifact_ref}
        return {"type": kind, "data": base64.b64encode(data).decode("ascii")}

    def _raw(self, packed: dict[str, Any]) -> tuple[str, bytes]:
        if "ref" in packed:
            return packed["type"], bytes(self.world.read_artifact(packed["ref"]))
        return packed["type"], base64.b64decode(packed["data"])

    def _load(self, packed: dict[str, Any]) -> Any:
        return self.serde.loads_typed(self._raw(packed))

    def _repack(self, owner: str, packed: dict[str, Any]) -> dict[str, Any]:
        """The same value owned by another thread (copy_thread): artifacts republished."""
        if "ref" not in packed:
            return packed
        return self._pack(owner, *self._raw(packed))

    # ---- threads ---------------------------------------------------------------------

    def _index_thread(self, thread_id: str) -> None:
        with self._lock:
            if thread_id in self._indexed_threads:
                return
        owner = thread_owner_run_id(thread_id)
        # The owner run's one event: it names the thread in its log, so `little runs` lists
        # the thread and `little verify` finds an owner for its artifacts (idempotent: the
        # same key and payload from any process is the same event).
        self.world.append_event(owner, THREAD_EVENT, {"threadId": thread_id},
                                idempotency_key=THREAD_EVENT)
        self.world.create_file(f"{THREADS_DIR}/{owner}.json", _json_bytes({"threadId": thread_id}))
        with self._lock:
            self._indexed_threads.add(thread_id)

    def _thread_ids(self) -> list[str]:
        out = []
        for name in self.world.list_dir(THREADS_DIR):
            if not name.endswith(".json"):
                continue
            doc = self.world.read_document(f"{THREADS_DIR}/{name}")
            if isinstance(doc, dict) and isinstance(doc.get("threadId"), str):
                out.append(doc["threadId"])
        return out

    def _namespaces(self, thread_id: str) -> list[str]:
        """Namespace keys of a thread (folder names)."""
        return [n for n in self.world.list_dir(self._thread_dir(thread_id)) if n.startswith("ns_")]

    def _checkpoint_ids(self, thread_dir: str, ns_key: str) -> list[str]:
        """Checkpoint ids in one namespace folder, newest first."""
        names = self.world.list_dir(f"{thread_dir}/{ns_key}/c")
        ids = [i for i in map(_id_from_name, names) if i is not None]
        return sorted(ids, reverse=True)

    # ---- reading ---------------------------------------------------------------------

    def _read_record(self, path: str) -> dict[str, Any] | None:
        doc = self.world.read_document(path)
        return doc if isinstance(doc, dict) else None

    def _pending_writes(self, thread_id: str, checkpoint_ns: str,
                        checkpoint_id: str) -> list[tuple[str, str, Any]]:
        folder = self._writes_dir(thread_id, checkpoint_ns, checkpoint_id)
        found = []
        for name in self.world.list_dir(folder):
            rec = self._read_record(f"{folder}/{name}")
            if rec is not None:
                found += [(rec["taskPath"], rec["taskId"], w) for w in rec["writes"]]
        found.sort(key=lambda f: writes_sort_key(f[0], f[1], f[2]["idx"]))
        return [(task_id, w["channel"], self._load(w["value"])) for _, task_id, w in found]

    def _tuple(self, rec: dict[str, Any]) -> CheckpointTuple:
        thread_id, ns, cid = rec["threadId"], rec["checkpointNs"], rec["checkpointId"]
        checkpoint = self._load(rec["checkpoint"])
        checkpoint["channel_values"] = {ch: self._load(v) for ch, v in rec["channels"].items()}
        parent = rec.get("parentCheckpointId")
        return CheckpointTuple(
            config=_config(thread_id, ns, cid),
            checkpoint=checkpoint,
            metadata=self._load(rec["metadata"]),
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=self._pending_writes(thread_id, ns, cid),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = _configurable(config)
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            ids = self._checkpoint_ids(self._thread_dir(thread_id), _ns_key(ns))
            if not ids:
                return None
            checkpoint_id = ids[0]
        rec = self._read_record(self._checkpoint_path(thread_id, ns, checkpoint_id))
        return self._tuple(rec) if rec is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None:
            thread_ids = self._thread_ids()
            only_ns, only_id = None, None
        else:
            conf = _configurable(config)
            thread_ids = [str(conf["thread_id"])]
            only_ns = conf.get("checkpoint_ns")
            only_id = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id in thread_ids:
            thread_dir = self._thread_dir(thread_id)
            ns_keys = [_ns_key(only_ns)] if only_ns is not None else self._namespaces(thread_id)
            # Newest first across the thread's namespaces; ids decide before anything is read.
            found = sorted(((cid, key) for key in ns_keys
                            for cid in self._checkpoint_ids(thread_dir, key)), reverse=True)
            for cid, key in found:
                if remaining is not None and remaining <= 0:
                    return
                if only_id and cid != only_id:
                    continue
                if before_id and cid >= before_id:
                    continue
                rec = self._read_record(f"{thread_dir}/{key}/c/{_id_name(cid)}.json")
                if rec is None:
                    continue  # removed meanwhile
                if filter:
                    metadata = self._load(rec["metadata"])
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if remaining is not None:
                    remaining -= 1
                yield self._tuple(rec)

    # ---- writing ---------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = _configurable(config)
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        owner = thread_owner_run_id(thread_id)
        self._index_thread(thread_id)
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values", None) or {}
        record = {
            "threadId": thread_id,
            "checkpointNs": ns,
            "checkpointId": checkpoint["id"],
            "parentCheckpointId": conf.get("checkpoint_id"),
            "checkpoint": self._dump(owner, body),
            "metadata": self._dump(owner, get_checkpoint_metadata(config, metadata)),
            "channels": {ch: self._dump(owner, v) for ch, v in values.items()},
        }
        self.world.write_file(self._checkpoint_path(thread_id, ns, checkpoint["id"]),
                              _json_bytes(record))
        return _config(thread_id, ns, checkpoint["id"])

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
        owner = thread_owner_run_id(thread_id)
        folder = self._writes_dir(thread_id, ns, checkpoint_id)
        task_key = hashlib.sha256(task_id.encode()).hexdigest()[:24]
        regular: list[dict[str, Any]] = []
        special: list[dict[str, Any]] = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            entry: dict[str, Any] = {"idx": idx, "channel": channel,
                                     "value": self._dump(owner, value)}
            (regular if idx >= 0 else special).append(entry)
        head = {"taskId": task_id, "taskPath": task_path}
        if regular:
            # A task's writes are one file, published once: a crash never leaves some of
            # them stored (LangGraph would take the task as done and drop the rest), and a
            # retried task never changes writes already kept.
            path = f"{folder}/{task_key}.json"
            if not self.world.create_file(path, _json_bytes({**head, "writes": regular})):
                kept = self._read_record(path) or {**head, "writes": []}
                have = {w["idx"] for w in kept["writes"]}
                extra = [w for w in regular if w["idx"] not in have]
                if extra:
                    self.world.write_file(path, _json_bytes({**kept, "writes": kept["writes"] + extra}))
        for entry in special:
            # Errors, interrupts, resumes (idx < 0): the newest replaces the last.
            self.world.write_file(f"{folder}/{task_key}.m{-entry['idx']}.json",
                                  _json_bytes({**head, "writes": [entry]}))

    # ---- removing and copying ------------------------------------------------------

    def _remove_checkpoint(self, thread_dir: str, ns_key: str, checkpoint_id: str) -> None:
        name = _id_name(checkpoint_id)
        writes = f"{thread_dir}/{ns_key}/w/{name}"
        for w in self.world.list_dir(writes):
            self.world.remove_file(f"{writes}/{w}", durable=False)
        if self.world.file_info(writes) is not None:
            self.world.remove_dir(writes)
        # The checkpoint last and durable: until it is gone its writes may be incomplete,
        # never the other way round.
        self.world.remove_file(f"{thread_dir}/{ns_key}/c/{name}.json")

    def delete_thread(self, thread_id: str) -> None:
        owner = thread_owner_run_id(str(thread_id))
        self.world.delete_run(owner)
        self.world.remove_file(f"{THREADS_DIR}/{owner}.json")
        with self._lock:
            self._indexed_threads.discard(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for thread_id in self._thread_ids():
            thread_dir = self._thread_dir(thread_id)
            for key in self._namespaces(thread_id):
                for cid in self._checkpoint_ids(thread_dir, key):
                    rec = self._read_record(f"{thread_dir}/{key}/c/{_id_name(cid)}.json")
                    if rec is not None and self._load(rec["metadata"]).get("run_id") in wanted:
                        self._remove_checkpoint(thread_dir, key, cid)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            thread_dir = self._thread_dir(thread_id)
            for key in self._namespaces(thread_id):
                for cid in self._checkpoint_ids(thread_dir, key)[1:]:
                    self._remove_checkpoint(thread_dir, key, cid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        owner = thread_owner_run_id(target)
        source_dir, target_dir = self._thread_dir(source), self._thread_dir(target)
        copied = False
        for key in self._namespaces(source):
            for cid in self._checkpoint_ids(source_dir, key):
                rec = self._read_record(f"{source_dir}/{key}/c/{_id_name(cid)}.json")
                if rec is None:
                    continue
                if not copied:
                    self._index_thread(target)
                    copied = True
                writes = f"{source_dir}/{key}/w/{_id_name(cid)}"
                for name in self.world.list_dir(writes):
                    w = self._read_record(f"{writes}/{name}")
                    if w is not None:
                        w["writes"] = [{**x, "value": self._repack(owner, x["value"])}
                                       for x in w["writes"]]
                        self.world.write_file(f"{target_dir}/{key}/w/{_id_name(cid)}/{name}",
                                              _json_bytes(w))
                rec["threadId"] = target
                for field in ("checkpoint", "metadata"):
                    rec[field] = self._repack(owner, rec[field])
                rec["channels"] = {ch: self._repack(owner, v) for ch, v in rec["channels"].items()}
                self.world.write_file(f"{target_dir}/{key}/c/{_id_name(cid)}.json", _json_bytes(rec))

    # ---- async: the same operations off the event loop ------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

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
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
