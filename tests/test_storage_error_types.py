"""Each storage failure is its own `StorageError` subclass, made where the failure is met:
one mapping per source — OSError errnos (`storage_errors.storage_error`), sqlite3 errors
(`storage_errors.sqlite_storage_error`), PyFilesystem2 errors (`fs_adapters.pyfilesystem`),
S3 responses (`fs_adapters.object_store.storage_error`) and Azure responses
(`fs_adapters.azure_blob.storage_error`) — and one test per mapping, with a real trigger
wherever one can be had (as eventsourcing's sqlite tests). Callers tell failures apart
with isinstance, never by reading the message."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow import errors
from little_workflow.ops.cli_support import is_damaged_events_db
from little_workflow.testing import FaultPlan, faulty_local_world
from little_workflow.world.storage_errors import sqlite_storage_error, storage_error

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SUBCLASSES = ["StorageDamagedError", "StorageNotADatabaseError", "StorageFullError",
              "StorageReadOnlyError", "StoragePermissionError", "StorageNotFoundError",
              "StorageIOError", "StorageUnreachableError"]


@pytest.mark.parametrize("name", SUBCLASSES)
def test_every_subclass_is_public_and_a_storage_error(name):
    cls = getattr(lw, name)
    assert cls is getattr(errors, name) and name in lw.__all__
    assert issubclass(cls, lw.StorageError) and cls is not lw.StorageError
    e = cls("/data/events/events.db", "it failed", "do this")
    # StorageError's own behaviour is kept: path, problem, one message with the hint.
    assert (e.path, e.problem, str(e)) == ("/data/events/events.db", "it failed",
                                           "/data/events/events.db: it failed; do this")
    assert isinstance(e, OSError) and isinstance(e, lw.LittleWorkflowError)


# ---- OSError errnos -------------------------------------------------------------------

def os_error(code: int, path: str = "/data/wf/events/x.json") -> OSError:
    return OSError(code, os.strerror(code), path)


def disk_full() -> OSError:
    """A real ENOSPC: /dev/full refuses every write with it."""
    try:
        with open("/dev/full", "wb", buffering=0) as f:
            f.write(b"x")
    except OSError as e:
        return e
    raise AssertionError("/dev/full accepted a write")


def missing_file(tmp_path) -> OSError:
    try:
        open(tmp_path / "no" / "such-file", "rb")
    except OSError as e:
        return e
    raise AssertionError("opened a missing file")


ERRNO_CASES = [
    ("ENOSPC (real, /dev/full)", lambda tmp: disk_full(), "StorageFullError"),
    ("EDQUOT", lambda tmp: os_error(errno.EDQUOT), "StorageFullError"),
    ("EFBIG", lambda tmp: os_error(errno.EFBIG), "StorageFullError"),
    ("EROFS", lambda tmp: os_error(errno.EROFS), "StorageReadOnlyError"),
    ("EACCES", lambda tmp: os_error(errno.EACCES), "StoragePermissionError"),
    ("EPERM", lambda tmp: os_error(errno.EPERM), "StoragePermissionError"),
    ("EIO", lambda tmp: os_error(errno.EIO), "StorageIOError"),
    ("ENOENT (real)", missing_file, "StorageNotFoundError"),
    # No finer class fits: the base class, with what the OS said.
    ("ENOTDIR", lambda tmp: os_error(errno.ENOTDIR), "StorageError"),
    ("EMFILE", lambda tmp: os_error(errno.EMFILE), "StorageError"),
]


@pytest.mark.parametrize("label,make,expected", ERRNO_CASES, ids=[c[0] for c in ERRNO_CASES])
def test_oserror_mapping(tmp_path, label, make, expected):
    cause = make(tmp_path)
    e = storage_error(cause, "/fallback/path")
    assert type(e) is getattr(lw, expected), (label, type(e))
    assert e.errno == cause.errno  # kept for callers that want the OS's own code
    assert e.path == (cause.filename or "/fallback/path")
    assert os.strerror(cause.errno) in e.problem
    assert storage_error(e, "/other") is e  # already typed: returned as it is


def test_oserror_without_a_filename_names_the_given_path():
    e = storage_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "/data/artifacts/x")
    assert isinstance(e, lw.StorageFullError) and e.path == "/data/artifacts/x"


# ---- sqlite3 errors -------------------------------------------------------------------

def sqlite_failure(fn) -> sqlite3.Error:
    try:
        fn()
    except sqlite3.Error as e:
        return e
    raise AssertionError("SQLite did not fail")


def small_db(path) -> str:
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE t (x)")
    c.executemany("INSERT INTO t VALUES (?)", [("p" * 500,) for _ in range(300)])
    c.commit()
    c.close()
    return str(path)


def corrupt(tmp_path) -> sqlite3.Error:
    db = small_db(tmp_path / "c.db")
    with open(db, "r+b") as f:  # the header page stays; the b-tree pages after it do not
        f.seek(4096)
        f.write(bytes(range(256)) * ((os.path.getsize(db) - 4096) // 256))
    return sqlite_failure(lambda: sqlite3.connect(db).execute("SELECT * FROM t").fetchall())


def not_a_database(tmp_path) -> sqlite3.Error:
    (tmp_path / "g.db").write_bytes(b"not a database, just bytes " * 200)
    return sqlite_failure(lambda: sqlite3.connect(tmp_path / "g.db").execute("PRAGMA user_version"))


def read_only(tmp_path) -> sqlite3.Error:
    db = small_db(tmp_path / "r.db")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    return sqlite_failure(lambda: conn.execute("INSERT INTO t VALUES (1)"))


def full(tmp_path) -> sqlite3.Error:
    conn = sqlite3.connect(tmp_path / "f.db")
    conn.execute("PRAGMA max_page_count = 3")
    return sqlite_failure(lambda: [conn.execute("CREATE TABLE t (x)"),
                                   conn.execute("INSERT INTO t VALUES (?)", ("x" * 50_000,))])


def not_authorized(tmp_path) -> sqlite3.Error:
    conn = sqlite3.connect(tmp_path / "a.db")
    conn.set_authorizer(lambda *args: sqlite3.SQLITE_DENY)
    return sqlite_failure(lambda: conn.execute("CREATE TABLE t (x)"))


def missing_dir(tmp_path) -> sqlite3.Error:
    return sqlite_failure(lambda: sqlite3.connect(tmp_path / "no-such-dir" / "events.db"))


def io_error(tmp_path) -> sqlite3.Error:
    # No portable way to make a disk fail a read: the error SQLite raises then, built.
    e = sqlite3.OperationalError("disk I/O error")
    e.sqlite_errorcode, e.sqlite_errorname = 778, "SQLITE_IOERR_WRITE"
    return e


def busy(tmp_path) -> sqlite3.Error:
    db = small_db(tmp_path / "b.db")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    return sqlite_failure(lambda: other.execute("BEGIN IMMEDIATE"))


SQLITE_CASES = [
    ("SQLITE_CORRUPT", corrupt, "StorageDamagedError"),
    ("SQLITE_NOTADB", not_a_database, "StorageNotADatabaseError"),
    ("SQLITE_READONLY", read_only, "StorageReadOnlyError"),
    ("SQLITE_FULL", full, "StorageFullError"),
    ("SQLITE_AUTH", not_authorized, "StoragePermissionError"),
    ("SQLITE_CANTOPEN (no such dir)", missing_dir, "StorageNotFoundError"),
    ("SQLITE_IOERR_WRITE", io_error, "StorageIOError"),
    ("SQLITE_BUSY", busy, "StorageError"),  # contention: no finer class
]


@pytest.mark.parametrize("label,make,expected", SQLITE_CASES, ids=[c[0] for c in SQLITE_CASES])
def test_sqlite_mapping(tmp_path, label, make, expected):
    cause = make(tmp_path)
    assert cause.sqlite_errorname.startswith(label.split()[0])
    db = str(tmp_path / "no-such-dir" / "events.db") if "CANTOPEN" in label else str(
        tmp_path / "events.db")
    e = sqlite_storage_error(db, cause)
    assert type(e) is getattr(lw, expected), (label, type(e))
    assert e.path == db and str(cause) in e.problem


# ---- through the Worlds: each error is made where it happens ------------------------

def test_local_world_damaged_and_not_a_database(tmp_path):
    data = tmp_path / "garbage"
    (data / "events").mkdir(parents=True)
    (data / "events" / "events.db").write_bytes(b"not a database " * 300)
    with pytest.raises(lw.StorageNotADatabaseError):
        lw.local_world(str(data))
    data_dir = str(tmp_path / "smashed")
    world = lw.local_world(data_dir)
    for i in range(300):
        world.append_event(f"run_{i % 3}", "x", {"i": i, "pad": "p" * 500})
    world.close()
    db = os.path.join(data_dir, "events", "events.db")
    with open(db, "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(os.path.getsize(db) - 4096))
    with pytest.raises(lw.StorageDamagedError) as caught:  # found by the check on open
        lw.local_world(data_dir)
    assert caught.value.path == db


@pytest.mark.parametrize("code,expected", [(errno.ENOSPC, "StorageFullError"),
                                            (errno.EROFS, "StorageReadOnlyError"),
                                            (errno.EIO, "StorageIOError")])
def test_a_publish_failing_in_local_world_raises_the_subclass(tmp_path, code, expected):
    plan = FaultPlan(crash_at=1, error=code)
    world = faulty_local_world(str(tmp_path / "d"), plan)
    with pytest.raises(lw.StorageError) as caught:
        world.write_artifact("run_f", "s", "a", {"x": 1})
    assert type(caught.value) is getattr(lw, expected)
    assert caught.value.path.startswith(str(tmp_path / "d"))


def test_pyfilesystem_read_only_and_full_map_to_their_classes():
    from fs.memoryfs import MemoryFS
    from fs.wrap import read_only as pyfs_read_only

    from fs_adapters.pyfilesystem import PyFilesystemFS

    inner = MemoryFS()
    lw.virtual_world(PyFilesystemFS(inner), "/wf").append_event("run_a", "x", {})
    with pytest.raises(lw.StorageReadOnlyError) as caught:  # opening makes its folders
        lw.virtual_world(PyFilesystemFS(pyfs_read_only(inner)), "/wf")
    assert caught.value.path == "/wf"

    class FullFS(MemoryFS):
        def openbin(self, path, mode="r", buffering=-1, **options):
            if "/events/" in path and any(c in mode for c in "wxa"):
                import fs.errors

                raise fs.errors.InsufficientStorage(path)
            return super().openbin(path, mode, buffering, **options)

    world = lw.virtual_world(PyFilesystemFS(FullFS()), "/wf")
    with pytest.raises(lw.StorageFullError) as caught:
        world.append_event("run_a", "x", {})
    assert caught.value.path.startswith("/wf/events/run_a/")


# Real mounts in a private mount namespace (`unshare -m`, root only): a tiny tmpfs that
# fills up, and one remounted read-only. Nothing is visible outside the child.
MOUNT_CHILD = textwrap.dedent("""
    import os, subprocess, sys
    import little_workflow as lw
    mount, case = sys.argv[1], sys.argv[2]

    def report(e):
        print(type(e).__name__, e.path, sep="\\t")

    data = os.path.join(mount, "data")
    try:
        if case == "full":
            world = lw.local_world(data)
            for i in range(100_000):
                world.append_event("run_full", "x", {"i": i, "pad": "p" * 20_000})
            print("never full")
        else:
            lw.local_world(data).close()
            subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
            try:
                lw.local_world(data)
            except lw.StorageError as e:
                report(e)  # an existing data dir
            lw.local_world(os.path.join(mount, "new"))  # one it would have to create
    except lw.StorageError as e:
        report(e)
""")


def private_mount_available() -> bool:
    # Not require_tool: without a private mount these tests inject the errno instead.
    if os.geteuid() != 0:
        return False
    try:
        r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    except FileNotFoundError:
        return False
    return r.returncode == 0


def run_on_private_mount(tmp_path, case: str, size: str) -> list[list[str]]:
    mount = tmp_path / "mnt"
    mount.mkdir()
    child = tmp_path / "child.py"
    child.write_text(MOUNT_CHILD)
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f'mount -t tmpfs -o size={size} tmpfs "$1" && exec "$2" "$3" "$1" "$4"', "sh",
         str(mount), sys.executable, str(child), case],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": SRC})
    assert r.returncode == 0, r.stderr[-3000:]
    return [line.split("\t") for line in r.stdout.splitlines()]


def test_local_world_on_a_disk_that_fills_up(tmp_path):
    if private_mount_available():
        lines = run_on_private_mount(tmp_path, "full", "16m")
        assert len(lines) == 1 and lines[0][0] == "StorageFullError", lines
        assert lines[0][1].startswith(str(tmp_path / "mnt" / "data")), lines
        return
    # Without the privilege to mount: the same errno, injected under the publisher.
    world = faulty_local_world(str(tmp_path / "d"), FaultPlan(crash_at=1, error=errno.ENOSPC))
    with pytest.raises(lw.StorageFullError):
        world.write_artifact("run_f", "s", "a", {"x": 1})


def test_local_world_on_a_read_only_mount(tmp_path):
    if private_mount_available():
        lines = run_on_private_mount(tmp_path, "read-only", "16m")
        assert [line[0] for line in lines] == ["StorageReadOnlyError"] * 2, lines
        assert lines[0][1].startswith(str(tmp_path / "mnt" / "data")), lines
        assert lines[1][1].startswith(str(tmp_path / "mnt" / "new")), lines
        return
    world = faulty_local_world(str(tmp_path / "d"), FaultPlan(crash_at=1, error=errno.EROFS))
    with pytest.raises(lw.StorageReadOnlyError):
        world.write_artifact("run_f", "s", "a", {"x": 1})


NOBODY_CHILD = textwrap.dedent("""
    import os, sys, tempfile
    import little_workflow as lw
    # Everything imported as root first: this Python may live under /root.
    lw.local_world(tempfile.mkdtemp()).append_event("run_warm", "x", {})
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    for data in sys.argv[1:]:
        try:
            lw.local_world(data).append_event("run_p", "x", {})
            print("opened", data)
        except lw.StorageError as e:
            print(type(e).__name__, e.path, sep="\\t")
""")


def test_local_world_in_a_dir_the_user_may_not_write(tmp_path):
    import tempfile

    base = tempfile.mkdtemp(prefix="lw-perm-")  # pytest's tmp dirs are 0700 to root
    try:
        os.chmod(base, 0o755)
        existing = os.path.join(base, "existing")
        lw.local_world(existing).close()
        for path, dirs, files in os.walk(existing):
            for name in dirs + files:
                os.chmod(os.path.join(path, name), 0o555 if name in dirs else 0o444)
        os.chmod(existing, 0o555)
        os.chmod(base, 0o555)
        r = subprocess.run([sys.executable, "-c", NOBODY_CHILD, existing,
                            os.path.join(base, "fresh")], capture_output=True, text=True,
                           cwd="/", timeout=120, env={**os.environ, "PYTHONPATH": SRC})
        lines = [line.split("\t") for line in r.stdout.splitlines()]
        assert [line[0] for line in lines] == ["StoragePermissionError"] * 2, (lines, r.stderr)
        assert lines[0][1].startswith(existing) and lines[1][1] == os.path.join(base, "fresh")
    finally:
        for path, _dirs, _ in os.walk(base):
            os.chmod(path, 0o755)
        shutil.rmtree(base)


# ---- object stores --------------------------------------------------------------------

def client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": code},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


def test_s3_missing_bucket_is_not_found(moto_s3):
    with pytest.raises(lw.StorageNotFoundError, match="bucket 'lw-no-such-bucket'"):
        lw.virtual_world(moto_s3.filesystem(), "lw-no-such-bucket/wf")


def test_s3_unreachable_endpoint(moto_s3):
    import s3fs
    from s3_server import _free_port

    fs = s3fs.S3FileSystem(
        skip_instance_cache=True, key="testing", secret="testing",
        client_kwargs={"endpoint_url": f"http://127.0.0.1:{_free_port()}",
                       "region_name": "us-east-1"},
        config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 1})
    fs.retries = 1
    with pytest.raises(lw.StorageUnreachableError) as caught:
        lw.virtual_world(fs, "lw-bucket/wf")
    assert caught.value.path.startswith("s3://lw-bucket/wf/")


@pytest.mark.parametrize("code,status,expected", [
    ("AccessDenied", 403, "StoragePermissionError"),
    ("InvalidAccessKeyId", 403, "StoragePermissionError"),
    ("NoSuchBucket", 404, "StorageNotFoundError"),
    ("InvalidRequest", 400, "StorageError"),
])
def test_s3_response_mapping(code, status, expected):
    from fs_adapters.object_store import storage_error as s3_storage_error

    e = s3_storage_error(client_error(code, status), "bucket/wf/events/x.json", "publishing")
    assert type(e) is getattr(lw, expected) and e.path == "s3://bucket/wf/events/x.json"


def test_azure_wrong_key_and_missing_container(azurite):
    container = azurite.new_container()
    wrong = azurite.connection_string.replace("AccountKey=Eby8", "AccountKey=Xby8")
    with pytest.raises(lw.StoragePermissionError):
        lw.virtual_world(azurite.filesystem(connection_string=wrong), f"{container}/wf")
    with pytest.raises(lw.StorageNotFoundError):
        lw.virtual_world(azurite.filesystem(), "lw-no-such-container/wf")


def test_azure_no_response_is_unreachable():
    from azure.core.exceptions import ServiceRequestError

    from fs_adapters.azure_blob import storage_error as azure_storage_error

    # What the SDK raises when no response came back (refused connection, DNS).
    e = azure_storage_error(ServiceRequestError("Connection refused"), "c/wf/x", "reading")
    assert type(e) is lw.StorageUnreachableError and e.path == "az://c/wf/x"


# ---- callers use isinstance -------------------------------------------------------------

def test_the_cli_tells_a_damaged_events_db_by_its_class_not_its_words():
    db = "/data/events/events.db"
    assert is_damaged_events_db(lw.StorageDamagedError(db, "SQLite: some new wording"))
    # Words that look like damage on another failure are not damage.
    assert not is_damaged_events_db(lw.StorageError(db, "a malformed, damaged request"))
    assert not is_damaged_events_db(lw.StorageDamagedError("/data/other.db", "malformed"))
