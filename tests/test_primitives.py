"""The storage primitives, tested on their own over every backend (as pyeventsourcing's
base recorder tests): one `PublisherCase` and one `EventStoreCase`, subclassed per backend.
A new backend is done when its two subclasses pass.

Publishers: memory, DirFileSystem over memory, local disk, PyFilesystem2 MemoryFS and
OSFS, S3 (moto server) and Azure Blob (Azurite). Event stores: a `FileEventStore` over
each of those publishers, and local_world's `SqliteEventStore`. "Another host" is a second
filesystem object (its own caches and session) or, for SQLite, a second connection."""

from __future__ import annotations

import os
from typing import Any

import pytest
from test_backend_guarantees import pair_factory

from little_workflow.world.event_stores import EventStore, FileEventStore, SqliteEventStore
from little_workflow.world.publish import TEMP_PREFIX, Publisher, publisher_for


class Backend:
    """One storage: its filesystem object, a root folder on it, and more filesystem
    objects over the same storage on demand."""

    def __init__(self, kind: str, tmp_path: Any, request: Any):
        self.kind, self.tmp_path = kind, tmp_path
        self.make_fs, root = pair_factory(kind, tmp_path, request)
        self.fs = self.make_fs()
        self.root = str(self.fs._strip_protocol(root)).rstrip("/")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def publisher(self) -> Publisher:
        return publisher_for(self.fs)

    def other_host(self) -> Publisher:
        return publisher_for(self.make_fs())


# ---- Publisher ----------------------------------------------------------------------------

class PublisherCase:
    kind: str

    @pytest.fixture
    def backend(self, tmp_path: Any, request: Any) -> Backend:
        return Backend(self.kind, tmp_path, request)

    def test_publish_if_absent_keeps_the_first_bytes(self, backend: Backend) -> None:
        p = backend.publisher()
        path = backend.path("runs", "run_a", "0000000001.json")  # parent folders made
        assert p.publish_if_absent(path, b"first")
        assert not p.publish_if_absent(path, b"second")
        assert p.read(path) == b"first"
        assert not backend.other_host().publish_if_absent(path, b"third")
        assert backend.other_host().read(path) == b"first"

    def test_read_of_nothing_is_none(self, backend: Backend) -> None:
        p = backend.publisher()
        assert p.read(backend.path("missing.json")) is None
        assert p.read(backend.path("no", "such", "folder", "f.json")) is None

    def test_replace_creates_then_overwrites(self, backend: Backend) -> None:
        p = backend.publisher()
        path = backend.path("documents", "outer.json")
        p.replace(path, b"v1")
        assert p.read(path) == b"v1"
        p.replace(path, b"v2-longer")
        assert p.read(path) == b"v2-longer"
        assert backend.other_host().read(path) == b"v2-longer"

    def test_list_names_is_sorted_and_leaves_temporary_names_out(self, backend: Backend) -> None:
        p = backend.publisher()
        folder = backend.path("listing")
        assert p.list_names(folder) == []
        for name in ("b.json", "a.json", "sub/c.json"):
            assert p.publish_if_absent(f"{folder}/{name}", b"x")
        # A writer's leftover temporary file (a crash between write and publish).
        backend.fs.pipe_file(f"{folder}/{TEMP_PREFIX}0123-a.json", b"torn")
        assert p.list_names(folder) == ["a.json", "b.json", "sub"]
        assert backend.other_host().list_names(folder) == ["a.json", "b.json", "sub"]

    def test_info_says_file_or_folder_or_nothing(self, backend: Backend) -> None:
        p = backend.publisher()
        path = backend.path("info", "f.bin")
        assert p.info(path) is None
        assert p.publish_if_absent(path, b"12345")
        assert p.info(path) == {"type": "file", "size": 5}
        assert p.info(backend.path("info")) == {"type": "directory", "size": 0}

    def test_remove_says_whether_there_was_a_file(self, backend: Backend) -> None:
        p = backend.publisher()
        path = backend.path("rm", "f.json")
        assert p.publish_if_absent(path, b"x")
        assert p.remove(path)
        assert p.read(path) is None and p.info(path) is None
        assert p.remove(path) is not p.remove_tells_absence  # nothing there
        assert p.publish_if_absent(path, b"again")  # the name is free again

    def test_remove_dir_removes_only_an_empty_folder(self, backend: Backend) -> None:
        p = backend.publisher()
        full, empty = backend.path("dirs", "full"), backend.path("dirs", "empty")
        assert p.publish_if_absent(f"{full}/f.json", b"x")
        p.ensure_dir(empty)
        p.ensure_dir(empty)  # again: nothing to do
        assert not p.remove_dir(full)
        assert p.read(f"{full}/f.json") == b"x"
        p.remove_dir(empty)  # True where folders are real; nothing to remove elsewhere
        assert p.list_names(backend.path("dirs")) == ["full"]
        assert not p.remove_dir(backend.path("dirs", "never-made"))

    def test_a_folder_emptied_of_its_files_is_listed_as_declared(self, backend: Backend) -> None:
        p = backend.publisher()
        assert p.publish_if_absent(backend.path("parent", "child", "only.json"), b"x")
        assert p.remove(backend.path("parent", "child", "only.json"))
        listed = p.list_names(backend.path("parent"))
        assert listed == (["child"] if p.empty_folders_stay else []), (listed, p.empty_folders_stay)

    def test_list_page_from_a_start_key_where_the_store_has_one(self, backend: Backend) -> None:
        p = backend.publisher()
        base = backend.path("index")
        for name in ("b/2", "a/1", "a/2", "c/1"):
            assert p.publish_if_absent(f"{base}/{name}", b"")
        page = p.list_page(base, "", 2)
        if page is None:  # no keyed listing here: the catalogue lists folder by folder
            assert p.list_names(base) == ["a", "b", "c"]
            return
        assert page == ["a/1", "a/2"]
        assert p.list_page(base, "a/2", 10) == ["b/2", "c/1"]
        assert p.list_page(base, "c/1", 10) == []

    def test_sync_makes_nothing_visible_go_away(self, backend: Backend) -> None:
        # What sync() makes durable is proven under a power cut (test_world_conformance);
        # here: every backend offers it, and it changes nothing that can be read.
        p = backend.publisher()
        path = backend.path("sync", "f.json")
        assert p.publish_if_absent(path, b"x", durable=False)
        p.sync()
        assert p.read(path) == b"x"

    def test_flags_are_declared(self, backend: Backend) -> None:
        p = backend.publisher()
        assert isinstance(p.blocking, bool)
        assert p.atomic_publication and p.multi_writer  # tabled in the README


class TestMemoryPublisher(PublisherCase):
    kind = "memory"


class TestDirFsMemoryPublisher(PublisherCase):
    kind = "dirfs-memory"


class TestLocalFilePublisher(PublisherCase):
    kind = "local-file"


class TestPyfsMemoryPublisher(PublisherCase):
    kind = "pyfs-memory"


class TestPyfsOsfsPublisher(PublisherCase):
    kind = "pyfs-osfs"


class TestS3Publisher(PublisherCase):
    kind = "s3"


class TestAzurePublisher(PublisherCase):
    kind = "azure"


# ---- EventStore ---------------------------------------------------------------------------

RUN, OTHER = "run_prim1", "run_prim2"


def envelope(sequence: int, text: str = "") -> bytes:
    # Bytes as the World hands them in: UTF-8 JSON, not only ASCII.
    return f'{{"sequence":{sequence},"text":"{text or "é"}"}}'.encode()


class EventStoreCase:
    kind: str

    @pytest.fixture
    def stores(self, tmp_path: Any, request: Any) -> Any:
        """(store, a factory of more stores over the same storage)."""
        if self.kind == "sqlite":
            db = str(tmp_path / "events.db")
            made: list[SqliteEventStore] = []

            def make() -> EventStore:
                made.append(SqliteEventStore(db))
                return made[-1]

            yield make(), make
            for store in made:
                store.close()
            return
        backend = Backend(self.kind, tmp_path, request)
        yield (FileEventStore(backend.publisher(), backend.root),
               lambda: FileEventStore(backend.other_host(), backend.root))

    def test_publish_if_absent_keeps_the_first_event(self, stores: Any) -> None:
        store, _ = stores
        assert store.publish_if_absent(RUN, 1, envelope(1, "first"), durable=True,
                                       idempotency_key=None)
        assert not store.publish_if_absent(RUN, 1, envelope(1, "second"), durable=True,
                                           idempotency_key=None)
        assert store.read_one(RUN, 1) == envelope(1, "first")

    def test_read_after_returns_committed_events_in_order(self, stores: Any) -> None:
        store, _ = stores
        for seq in range(1, 6):
            assert store.publish_if_absent(RUN, seq, envelope(seq), durable=seq == 5,
                                           idempotency_key=None)
        assert store.read_after(RUN, 0) == [(s, envelope(s)) for s in range(1, 6)]
        assert store.read_after(RUN, 3) == [(4, envelope(4)), (5, envelope(5))]
        assert store.read_after(RUN, 5) == []
        assert store.read_after(OTHER, 0) == []

    def test_read_one_of_nothing_is_none(self, stores: Any) -> None:
        store, _ = stores
        assert store.read_one(RUN, 1) is None
        assert store.publish_if_absent(RUN, 1, envelope(1), durable=True, idempotency_key=None)
        assert store.read_one(RUN, 2) is None
        assert store.read_one(OTHER, 1) is None

    def test_run_ids_are_the_runs_with_events(self, stores: Any) -> None:
        store, _ = stores
        assert store.run_ids() == []
        for run_id in (OTHER, RUN):
            assert store.publish_if_absent(run_id, 1, envelope(1), durable=True,
                                           idempotency_key=None)
        assert sorted(store.run_ids()) == [RUN, OTHER]

    def test_enqueued_appends_settle_in_order(self, stores: Any) -> None:
        store, _ = stores
        tickets = [store.enqueue(RUN, seq, envelope(seq), durable=seq == 3,
                                 idempotency_key=None) for seq in (1, 2, 3)]
        assert [t.wait() for t in tickets] == [True, True, True]
        taken = store.enqueue(RUN, 2, envelope(2, "late"), durable=True, idempotency_key=None)
        assert taken.wait() is False
        assert store.read_one(RUN, 2) == envelope(2)

    def test_another_host_sees_the_events_and_cannot_take_their_sequences(self, stores: Any) -> None:
        store, make = stores
        for seq in (1, 2):
            assert store.publish_if_absent(RUN, seq, envelope(seq), durable=True,
                                           idempotency_key=None)
        other = make()
        assert other.read_after(RUN, 0) == [(1, envelope(1)), (2, envelope(2))]
        assert not other.publish_if_absent(RUN, 2, envelope(2, "other"), durable=True,
                                           idempotency_key=None)
        assert other.publish_if_absent(RUN, 3, envelope(3), durable=True, idempotency_key=None)
        assert store.read_after(RUN, 2) == [(3, envelope(3))]

    def test_an_event_after_a_missing_one(self, stores: Any) -> None:
        store, _ = stores
        assert store.publish_if_absent(RUN, 1, envelope(1), durable=True, idempotency_key=None)
        published = store.publish_if_absent(RUN, 3, envelope(3), durable=True,
                                            idempotency_key=None)
        if store.checks_predecessor:  # refused in the same step as the write: no hole
            assert not published and store.read_after(RUN, 0) == [(1, envelope(1))]
        else:  # published; a whole-log read shows the jump, which the World reports
            assert published
            assert store.read_after(RUN, 0) == [(1, envelope(1)), (3, envelope(3))]

    def test_delete_run_removes_every_event_and_counts_the_bytes(self, stores: Any) -> None:
        store, _ = stores
        for seq in (1, 2, 3):
            assert store.publish_if_absent(RUN, seq, envelope(seq), durable=True,
                                           idempotency_key=None)
        assert store.publish_if_absent(OTHER, 1, envelope(1), durable=True, idempotency_key=None)
        freed = store.delete_run(RUN)
        assert freed >= sum(len(envelope(s)) for s in (1, 2, 3))
        assert store.read_after(RUN, 0) == [] and store.run_ids() == [OTHER]
        assert store.publish_if_absent(RUN, 1, envelope(1, "new run"), durable=True,
                                       idempotency_key=None)
        assert store.read_after(RUN, 0) == [(1, envelope(1, "new run"))]

    def test_withdraw_takes_back_only_its_own_event(self, stores: Any) -> None:
        store, _ = stores
        assert store.publish_if_absent(RUN, 1, envelope(1), durable=True, idempotency_key=None)
        assert store.publish_if_absent(RUN, 2, envelope(2), durable=True, idempotency_key=None)
        if store.checks_predecessor:  # never asked: such a store cannot publish past a hole
            with pytest.raises(NotImplementedError):
                store.withdraw(RUN, 2, envelope(2))
            return
        store.withdraw(RUN, 2, envelope(2, "not these bytes"))
        assert store.read_one(RUN, 2) == envelope(2)
        store.withdraw(RUN, 2, envelope(2))
        assert store.read_after(RUN, 0) == [(1, envelope(1))]

    def test_sync_after_non_durable_appends_keeps_them_readable(self, stores: Any) -> None:
        # What sync() makes durable is proven under a power cut (test_world_conformance).
        store, make = stores
        for seq in (1, 2, 3):
            assert store.publish_if_absent(RUN, seq, envelope(seq), durable=False,
                                           idempotency_key=None)
        store.sync()
        assert make().read_after(RUN, 0) == [(s, envelope(s)) for s in (1, 2, 3)]


class TestMemoryEventStore(EventStoreCase):
    kind = "memory"


class TestDirFsMemoryEventStore(EventStoreCase):
    kind = "dirfs-memory"


class TestLocalFileEventStore(EventStoreCase):
    kind = "local-file"


class TestPyfsMemoryEventStore(EventStoreCase):
    kind = "pyfs-memory"


class TestPyfsOsfsEventStore(EventStoreCase):
    kind = "pyfs-osfs"


class TestS3EventStore(EventStoreCase):
    kind = "s3"


class TestAzureEventStore(EventStoreCase):
    kind = "azure"


class TestSqliteEventStore(EventStoreCase):
    kind = "sqlite"

    def test_an_idempotency_key_is_taken_once_per_run(self, stores: Any) -> None:
        store, _ = stores
        assert store.publish_if_absent(RUN, 1, envelope(1), durable=True, idempotency_key="k")
        assert not store.publish_if_absent(RUN, 2, envelope(2), durable=True, idempotency_key="k")
        assert store.publish_if_absent(OTHER, 1, envelope(1), durable=True, idempotency_key="k")
        assert os.path.basename(store.db_path) == "events.db"
