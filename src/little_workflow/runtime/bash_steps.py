"""Bash steps: just-bash over views of the World's filesystem, recorded like a step.

Mounts: /scratch (this step, read-write, the working directory), /run (run scratch),
/memory/org (read-only), /memory/pipeline and /memory/workflow (writes journaled),
/skills/<name> (read-only skill folders), plus user mounts. Nothing else of any real
filesystem is visible: the rest of the tree is a throw-away in-memory filesystem.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

from ..errors import MissingExtraError, UnsupportedSourceError, WorldPathError
from ..world.protocol import WorldLike


@dataclass(frozen=True)
class Mount:
    """A user mount for a bash step. `source` is a path in the World's filesystem
    (relative paths are relative to the data dir)."""

    source: str
    read_only: bool = False
    single_file: bool = False


def read_only(source: str) -> Mount:
    """Mount a folder of the World's filesystem read-only."""
    return Mount(source, read_only=True)


def file_mount(source: str, *, read_only: bool = True) -> Mount:
    """Mount one file (and nothing beside it) at the mount path."""
    return Mount(source, read_only=read_only, single_file=True)


def _source_kind(source: Any) -> str:
    if isinstance(source, pathlib.PurePath) or (isinstance(source, str) and source.startswith("file://")):
        return "host"
    if isinstance(source, str) and "://" in source:
        return "remote"
    if isinstance(source, str) and source:
        return "world"
    raise UnsupportedSourceError(f"skill source {source!r} is not a path or URL")


def check_skill_sources(world: WorldLike, wf: Any) -> None:
    """Refuse host and remote skill folders on worlds that cannot mount them — before a
    run is created."""
    for name, source in wf.skills.items():
        kind = _source_kind(source)
        if kind != "world" and not world.host_sources_allowed:
            raise UnsupportedSourceError(
                f"workflow {wf.id!r}: skill {name!r} comes from a {kind} source ({source}); "
                f"{world.kind} worlds mount only folders inside the World's filesystem — "
                "copy it there, or use local_world"
            )


def relative_source(world: WorldLike, source: str) -> str:
    """A mount source as a path relative to the data dir (absolute ones must lie in it)."""
    if ".." in source.split("/"):
        raise WorldPathError(f"mount source {source!r} may not contain '..'")
    if source.startswith("/"):
        root = world.data_dir.rstrip("/") + "/"
        if not (source + "/").startswith(root):
            raise WorldPathError(f"mount source {source!r} is outside the World's data dir {world.data_dir}")
        return source[len(root):]
    return source


def _skill_fs(world: WorldLike, source: Any) -> Any:
    from fs_adapters.bash import FsspecBashFS

    kind = _source_kind(source)
    if kind == "world":
        return FsspecBashFS(world.file_view(relative_source(world, source)), "")
    if kind == "host":
        from fsspec.implementations.local import LocalFileSystem

        path = str(source)[len("file://"):] if str(source).startswith("file://") else str(source)
        return FsspecBashFS(LocalFileSystem(), path)
    import fsspec

    fs, path = fsspec.core.url_to_fs(source)
    return FsspecBashFS(fs, path)


def build_filesystem(ctx: Any, step_path: str, mounts: dict[str, Any] | None) -> Any:
    """The bash filesystem: every mount a view through the World's file methods, so each
    write is an atomic, durable replacement (and, under /memory, journaled first)."""
    from just_bash.fs import InMemoryFs
    from just_bash.fs.mountable_fs import MountableFs, MountableFsOptions

    from fs_adapters.bash import FsspecBashFS, ReadOnlyBashFS, SingleFileBashFS

    world = ctx.world
    root = MountableFs(MountableFsOptions(base=InMemoryFs()))

    def view(relative: str, **options: Any) -> Any:
        return FsspecBashFS(world.file_view(relative, **options), "")

    memory = ctx.memory
    root.mount("/scratch", FsspecBashFS(ctx.scratch_view("steps", *step_path.split("/"), "scratch"), ""))
    root.mount("/run", FsspecBashFS(ctx.scratch, ""))
    root.mount("/memory/org", ReadOnlyBashFS(view(memory.org.root), "/memory/org"))
    for name in ("pipeline", "workflow"):
        store = getattr(memory, name)
        root.mount(f"/memory/{name}", view(store.root, journal=store.journal))
    for name, source in ctx.workflow.skills.items():
        root.mount(f"/skills/{name}", ReadOnlyBashFS(_skill_fs(world, source), f"/skills/{name}"))
    for at, mount in (mounts or {}).items():
        if not isinstance(mount, Mount):
            mount = Mount(str(mount))
        relative = relative_source(world, mount.source)
        if mount.single_file:
            folder, _, name = relative.rpartition("/")
            root.mount(at, SingleFileBashFS(world.file_view(folder), name, read_only=mount.read_only))
        else:
            mounted = view(relative)
            root.mount(at, ReadOnlyBashFS(mounted, at) if mount.read_only else mounted)
    return root


class BashResult(dict[str, Any]):
    """{"stdout", "stderr", "exitCode"} — also `.stdout`, `.stderr`, `.exit_code`."""

    @property
    def stdout(self) -> str:
        return str(self["stdout"])

    @property
    def stderr(self) -> str:
        return str(self["stderr"])

    @property
    def exit_code(self) -> int:
        return int(self["exitCode"])


async def run_bash_step(
    ctx: Any,
    path: str,
    script: str,
    mounts: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    limits: Any = None,
    network: Any = None,
) -> BashResult:
    """Run `script` in just-bash; returns {"stdout", "stderr", "exitCode"}, recorded as
    step `path`, so a resumed run does not run it again."""
    try:
        from just_bash import Bash, ExecutionLimits
        from just_bash.interpreter.errors import ExecutionLimitError
    except ImportError:
        raise MissingExtraError("bash steps", "bash") from None
    if isinstance(limits, dict):
        limits = ExecutionLimits(**limits)

    async def execute() -> dict[str, Any]:
        bash = Bash(fs=build_filesystem(ctx, path, mounts), cwd="/scratch", env=env,
                    limits=limits, network=network)  # no network unless configured
        try:
            result = await bash.exec(script)
        except ExecutionLimitError as e:
            # The script hit an execution limit: record it as a failed command (as a shell
            # killed by a resource limit would be), not as a crash of the step.
            return {"stdout": "", "stderr": f"little-workflow: execution limit: {e}\n",
                    "exitCode": 124}
        return {"stdout": result.stdout, "stderr": result.stderr, "exitCode": result.exit_code}

    return BashResult(await ctx.step(path, execute))
