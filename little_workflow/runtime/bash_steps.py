"""Bash steps: just-bash over views of the World's filesystem, recorded like a step.

Mounts: /scratch (this step, read-write, the working directory), /run (run scratch),
/memory/org (read-only), /memory/pipeline and /memory/workflow (writes journaled),
/skills/<name> (read-only skill folders), plus user mounts. Nothing else of any real
filesystem is visible: the rest of the tree is a throw-away in-memory filesystem.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MissingExtraError, UnsupportedSourceError, WorldPathError

if TYPE_CHECKING:
    from .context import RunContext


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


def check_skill_sources(world: Any, wf: Any) -> None:
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


def world_path(world: Any, source: str) -> str:
    if ".." in source.split("/"):
        raise WorldPathError(f"mount source {source!r} may not contain '..'")
    return source if source.startswith("/") else world.path(source)


def _skill_fs(world: Any, source: Any) -> Any:
    from fs_adapters.bash import FsspecBashFS

    kind = _source_kind(source)
    if kind == "world":
        return FsspecBashFS(world.files, world_path(world, source))
    if kind == "host":
        from fsspec.implementations.local import LocalFileSystem

        path = str(source)[len("file://"):] if str(source).startswith("file://") else str(source)
        return FsspecBashFS(LocalFileSystem(), path)
    import fsspec

    fs, path = fsspec.core.url_to_fs(source)
    return FsspecBashFS(fs, path)


def build_filesystem(ctx: "RunContext", step_path: str, mounts: dict[str, Any] | None) -> Any:
    from just_bash.fs import InMemoryFs
    from just_bash.fs.mountable_fs import MountableFs, MountableFsOptions

    from fs_adapters.bash import FsspecBashFS, ReadOnlyBashFS, SingleFileBashFS

    world = ctx.world
    files = world.files
    root = MountableFs(MountableFsOptions(base=InMemoryFs()))

    def folder(path: str) -> str:
        world.publisher.ensure_dir(path)
        return path

    memory = ctx.memory
    root.mount("/scratch", FsspecBashFS(files, folder(
        world.path("runs", ctx.run_id, "steps", *step_path.split("/"), "scratch"))))
    root.mount("/run", FsspecBashFS(files, folder(world.path("runs", ctx.run_id, "scratch"))))
    root.mount("/memory/org", ReadOnlyBashFS(FsspecBashFS(files, memory.org.root), "/memory/org"))
    for name in ("pipeline", "workflow"):
        store = getattr(memory, name)  # its on_write journals memory.written
        root.mount(f"/memory/{name}", FsspecBashFS(files, store.root, on_write=store._on_write))
    for name, source in ctx.workflow.skills.items():
        root.mount(f"/skills/{name}", ReadOnlyBashFS(_skill_fs(world, source), f"/skills/{name}"))
    for at, mount in (mounts or {}).items():
        if not isinstance(mount, Mount):
            mount = Mount(str(mount))
        real = world_path(world, mount.source)
        if mount.single_file:
            root.mount(at, SingleFileBashFS(files, real, read_only=mount.read_only))
        else:
            view = FsspecBashFS(files, real)
            root.mount(at, ReadOnlyBashFS(view, at) if mount.read_only else view)
    return root


class BashResult(dict):  # type: ignore[type-arg]
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
    ctx: "RunContext",
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
