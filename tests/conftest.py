"""Fixtures: every World and filesystem the conformance suite runs on."""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any, Callable

import pytest
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def keep_bytecode_out_of_the_tree() -> str | None:
    """Under PYTHONDONTWRITEBYTECODE (set by many Docker images) nothing is cached: every
    xdist worker re-rewrites every test module's asserts (~7 CPU-s each) and every child
    process the tests start compiles little_workflow again (~0.06 CPU-s each, hundreds of
    them). The variable's point is a tree free of .pyc files, so the bytecode goes to a
    private folder under the temp dir instead (PYTHONPYCACHEPREFIX, inherited by xdist
    workers and child processes). An explicit PYTHONPYCACHEPREFIX is left alone."""
    if not sys.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX"):
        return None
    import tempfile

    prefix = os.path.join(tempfile.gettempdir(), f"little-workflow-pycache-{os.getuid()}")
    os.makedirs(prefix, mode=0o700, exist_ok=True)
    if os.stat(prefix).st_uid != os.getuid():
        return None  # someone else's folder: bytecode from it could be anything
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return prefix


BYTECODE_PREFIX = keep_bytecode_out_of_the_tree()


def pytest_report_header(config: Any) -> list[str]:
    import soak
    from checkout import SRC

    # Which copy runs: a PYTHONPATH naming a checkout's root instead of its src/ would
    # silently test the installed copy.
    header = [soak.describe(), f"little_workflow: {SRC}"]
    if BYTECODE_PREFIX:
        header.append(f"PYTHONDONTWRITEBYTECODE is set: bytecode kept in {BYTECODE_PREFIX}")
    return header


#: Tests known to take long (tests/slowest.txt), longest first.
SLOWEST_LIST = os.path.join(ROOT, "tests", "slowest.txt")


def slowest_first(nodeids: list[str], listed: list[str]) -> list[int]:
    """The order to run `nodeids` in: those named in `listed` first, in its order (an entry
    without `[params]` names every parametrization), then the rest as collected."""
    rank = {name: i for i, name in enumerate(listed)}

    def key(index: int) -> tuple[int, int]:
        nodeid = nodeids[index]
        if "@" in nodeid.rsplit("]", 1)[-1]:  # xdist's "@group" suffix
            nodeid = nodeid[:nodeid.rindex("@")]
        place = rank.get(nodeid, rank.get(nodeid.split("[", 1)[0], len(rank)))
        return place, index

    return sorted(range(len(nodeids)), key=key)


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Under xdist the run lasts until its last worker finishes, and a worker takes the
    next test as it frees up: a 60-second test handed out in the last minute sets the wall
    clock alone. The longest tests go out first (xdist_groups of several tests already do:
    `--dist loadgroup` hands out the biggest groups first). Without xdist the order does
    not matter for time and is left as collected."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        with open(SLOWEST_LIST) as f:
            listed = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        return
    order = slowest_first([item.nodeid for item in items], listed)
    items[:] = [items[i] for i in order]


def private_memory() -> MemoryFileSystem:
    return MemoryFileSystem(skip_instance_cache=True, global_store=False)


class WorldMaker:
    """Makes Worlds over one storage; `reopen()` makes a fresh World over the same files,
    as a restarted process would (fresh filesystem object where the backend allows)."""

    def __init__(self, kind: str, tmp_path: Any, request: Any):
        self.kind = kind
        self.tmp_path = tmp_path
        self.request = request
        self._fs: Any = None
        if kind == "memory":
            self._fs = private_memory()
        elif kind == "dirfs-memory":
            self._fs = DirFileSystem(path="/base", fs=private_memory())
        elif kind == "local-file":
            self._fs = LocalFileSystem()
        elif kind == "pyfs-memory":
            from fs.memoryfs import MemoryFS

            from fs_adapters.pyfilesystem import PyFilesystemFS

            self._pyfs = MemoryFS()
            self._fs = PyFilesystemFS(self._pyfs)
        elif kind == "pyfs-osfs":
            from fs.osfs import OSFS

            from fs_adapters.pyfilesystem import PyFilesystemFS

            os.makedirs(tmp_path / "osfs", exist_ok=True)
            self._fs = PyFilesystemFS(OSFS(str(tmp_path / "osfs")))
        elif kind == "s3":
            s3 = request.getfixturevalue("moto_s3")
            self._s3 = s3
            self._bucket = s3.new_bucket()
            self._fs = s3.filesystem()
        elif kind == "azure":
            # Registers its publisher, as the entry point does once the package is installed.
            import fs_adapters.azure_blob  # noqa: F401

            azurite = request.getfixturevalue("azurite")
            self._azurite = azurite
            self._bucket = azurite.new_container()
            self._fs = azurite.filesystem()

    @property
    def data_dir(self) -> str:
        if self.kind == "local-file":
            return str(self.tmp_path / "wf")
        if self.kind == "local_world":
            return str(self.tmp_path / "lw")
        if self.kind in ("s3", "azure"):
            return f"{self._bucket}/wf"
        return "/wf"

    def __call__(self, **kwargs: Any) -> Any:
        if self.kind == "local_world":
            return lw.local_world(self.data_dir, **kwargs)
        return lw.virtual_world(self._fs, self.data_dir, **kwargs)

    def reopen(self, **kwargs: Any) -> Any:
        if self.kind == "s3":
            self._fs = self._s3.filesystem()  # a second host: its own object and caches
        elif self.kind == "azure":
            self._fs = self._azurite.filesystem()  # a second host
        elif self.kind == "pyfs-osfs":
            from fs.osfs import OSFS

            from fs_adapters.pyfilesystem import PyFilesystemFS

            self._fs = PyFilesystemFS(OSFS(str(self.tmp_path / "osfs")))
        return self(**kwargs)

    @property
    def fs(self) -> Any:
        return self._fs


WORLD_KINDS = ["memory", "local-file", "dirfs-memory", "local_world", "pyfs-memory", "pyfs-osfs", "s3", "azure"]


@pytest.fixture(params=WORLD_KINDS)
def make_world(request: Any, tmp_path: Any) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


@pytest.fixture
def world(make_world: WorldMaker) -> Any:
    return make_world()


@pytest.fixture
def memory_world() -> Any:
    return lw.virtual_world(private_memory(), "/wf")


@pytest.fixture
def local_world_(tmp_path: Any) -> Any:
    return lw.local_world(str(tmp_path / "data"))


def unique_run() -> str:
    return "run_" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def moto_s3() -> Any:
    from s3_server import MotoS3

    server = MotoS3()
    yield server
    server.stop()


Maker = Callable[..., Any]


@pytest.fixture(scope="session")
def strict_mypy_cache(tmp_path_factory: Any) -> str:
    """One `mypy --strict` cache per test process, new each session, for the files that
    check user code with --strict (test_user_types, test_value_types_mypy: one xdist group,
    so one worker builds it): the first run analyses the standard library, pydantic and
    little_workflow once (~8 CPU-seconds cold), the next ones only their own files.
    Incremental mode re-checks a file whose content changed, so the verdicts are those of a
    cold run; a file checked through it must not repeat another's module name and content
    (mypy would serve that module from the cache without reporting its notes again)."""
    return str(tmp_path_factory.mktemp("strict-mypy-cache"))


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: Any) -> Any:
    from azurite_server import Azurite, shared

    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The workers of one run share its base temp dir's parent, and one emulator.
        with shared(str(tmp_path_factory.getbasetemp().parent)) as server:
            yield server
        return
    server = Azurite()
    yield server
    server.stop()
