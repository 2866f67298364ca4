"""fsspec's own abstract test suite over `PyFilesystemFS`, on PyFilesystem2 MemoryFS and OSFS.

The suite (`fsspec.tests.abstract`, shipped in the fsspec wheel) is what fsspec's own
implementations run: a fixtures class names the filesystem, a root path and a join; the
copy/get/put/open/pipe test classes do the rest, against a real local filesystem for get/put.
"""

from __future__ import annotations

import errno

import pytest
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractGetTests,
    AbstractOpenTests,
    AbstractPipeTests,
    AbstractPutTests,
)

from fs_adapters.pyfilesystem import PyFilesystemFS


def _pyfilesystem_fs(kind, tmp_path):
    """A `PyFilesystemFS` over a fresh MemoryFS, or an OSFS rooted in a tmp dir."""
    if kind == "memory":
        from fs.memoryfs import MemoryFS

        pyfs = MemoryFS()
    else:
        from fs.osfs import OSFS

        root = tmp_path / "osfs-root"
        root.mkdir()
        pyfs = OSFS(str(root))
    try:
        yield PyFilesystemFS(pyfs)
    finally:
        pyfs.close()


class PyFilesystemFixtures(AbstractFixtures):
    @pytest.fixture(params=["memory", "osfs"])
    def fs(self, request, tmp_path):
        yield from _pyfilesystem_fs(request.param, tmp_path)

    @pytest.fixture
    def fs_join(self):
        return lambda *args: "/".join(args)

    @pytest.fixture
    def fs_path(self):
        return ""


class TestPyFilesystemCopy(AbstractCopyTests, PyFilesystemFixtures):
    pass


class TestPyFilesystemGet(AbstractGetTests, PyFilesystemFixtures):
    pass


class TestPyFilesystemPut(AbstractPutTests, PyFilesystemFixtures):
    pass


class TestPyFilesystemOpen(AbstractOpenTests, PyFilesystemFixtures):
    pass


class TestPyFilesystemPipe(AbstractPipeTests, PyFilesystemFixtures):
    pass


# ---- what the abstract suite does not pin down: directories, errors, moves --------------


@pytest.fixture(params=["memory", "osfs"])
def pfs(request, tmp_path):
    yield from _pyfilesystem_fs(request.param, tmp_path)


def test_directories_are_real_and_errors_are_builtin(pfs):
    pfs.makedirs("/a/b/c")
    pfs.makedirs("/a/b/c", exist_ok=True)
    with pytest.raises(FileExistsError):
        pfs.makedirs("/a/b/c")
    with pytest.raises(FileExistsError):
        pfs.mkdir("/a/b")
    with pytest.raises(FileNotFoundError):
        pfs.mkdir("/x/y", create_parents=False)
    pfs.pipe_file("/a/f", b"data")
    with pytest.raises(FileExistsError):
        pfs.makedirs("/a/f", exist_ok=True)
    with pytest.raises(NotADirectoryError):
        pfs.makedirs("/a/f/g", exist_ok=True)
    with pytest.raises(IsADirectoryError):
        pfs.rm_file("/a/b")
    with pytest.raises(IsADirectoryError):
        pfs.cat_file("/a/b")
    with pytest.raises(IsADirectoryError):
        pfs.open("/a/b", "wb")
    with pytest.raises(FileNotFoundError):
        pfs.info("/nope")
    with pytest.raises(FileNotFoundError):
        pfs.ls("/nope")
    assert pfs.ls("/a", detail=False) == ["/a/b", "/a/f"]
    assert pfs.ls("/a/f", detail=False) == ["/a/f"]
    assert pfs.info("/a/b/")["type"] == "directory"


def test_rm_needs_recursive_for_a_non_empty_directory(pfs):
    pfs.pipe_file("/d/e/f", b"1")
    with pytest.raises(OSError) as err:
        pfs.rm("/d")
    assert err.value.errno == errno.ENOTEMPTY
    assert pfs.cat_file("/d/e/f") == b"1"
    pfs.makedirs("/empty")
    pfs.rm("/empty")
    assert not pfs.exists("/empty")
    pfs.rm("/d", recursive=True)
    assert not pfs.exists("/d")
    assert pfs.ls("/", detail=False) == []
    with pytest.raises(FileNotFoundError):
        pfs.rm("/d", recursive=True)


def test_append_and_exclusive_open(pfs):
    with pfs.open("/n/f", "ab") as f:
        f.write(b"one")
    with pfs.open("/n/f", "ab") as f:
        f.write(b"two")
    assert pfs.cat_file("/n/f") == b"onetwo"
    with pytest.raises(FileExistsError):
        pfs.open("/n/f", "xb")


def test_mv_follows_fsspec_semantics(pfs):
    pfs.pipe_file("/src/f", b"new")
    pfs.pipe_file("/dst", b"old")
    pfs.mv("/src/f", "/dst")  # a file onto a file: overwrite
    assert pfs.cat_file("/dst") == b"new" and not pfs.exists("/src/f")
    pfs.pipe_file("/tree/sub/x", b"x")
    pfs.makedirs("/into")
    pfs.mv("/tree", "/into", recursive=True)  # a directory onto a directory: inside it
    assert pfs.find("/into") == ["/into/tree/sub/x"]
    assert not pfs.exists("/tree")
    pfs.mv("/dst", "/into/")  # a file onto a directory: inside it
    assert pfs.cat_file("/into/dst") == b"new"
