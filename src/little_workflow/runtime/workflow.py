"""Workflow definitions, their version ids, and JSON Schema validation."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generic, Protocol, TypeVar

from ..errors import SchemaValidationError
from ..world.ids import content_hash, validate_name, workflow_version_id
from .deadlines import Deadline, seconds_of

if TYPE_CHECKING:
    import jsonschema

WorkflowFn = Callable[..., Awaitable[Any]]

#: The `ctx` a workflow function gets is a RunContext; spelled Any here because context.py
#: imports this module (no import cycle, even for type checkers).
AnyContext = Any

#: What a workflow takes and returns, for type checkers: `Workflow[In, Out]`.
In = TypeVar("In")
Out = TypeVar("Out", covariant=True)
InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")


def _validator(schema: dict[str, Any] | None, what: str) -> "jsonschema.Draft7Validator | None":
    if schema is None:
        return None
    import jsonschema  # ~45 ms: only for workflows that declare a schema

    try:
        jsonschema.Draft7Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise SchemaValidationError(f"the {what} schema itself", e.message) from None
    # No format checker: draft-07 `format` is an annotation here. A *property* named
    # "format" is an ordinary property and is validated like any other.
    return jsonschema.Draft7Validator(schema)


def validate_against(validator: "jsonschema.Draft7Validator | None", value: Any, what: str) -> None:
    if validator is None:
        return
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        path = "$" + "".join(f"[{p!r}]" for p in error.absolute_path)
        raise SchemaValidationError(what, error.message, path)


@dataclass(frozen=True)
class Workflow(Generic[In, Out]):
    """A workflow definition made by `@workflow`. Call `run_workflow(wf, input)`.

    For type checkers it is `Workflow[In, Out]`: `async def f(ctx, input: In) -> Out`.
    The run stores its input and output as JSON and gives them back typed by those
    annotations: a workflow returning a pydantic model returns that model."""

    id: str
    fn: Callable[[AnyContext, In], Awaitable[Out]]
    version: str | None = None
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    skills: dict[str, str] = field(default_factory=dict)
    definition_hash: str = ""
    #: Seconds: the deadline of a run started without `deadline=` (None: no deadline).
    timeout: float | None = None
    _input_validator: Any = None
    _output_validator: Any = None

    @property
    def version_id(self) -> str:
        return workflow_version_id(self.definition_hash)

    @property
    def code_version(self) -> str:
        """The version runs of this code are pinned to (recorded in `run.created`):
        `version` when the decorator was given one, else the definition hash."""
        return self.version if self.version is not None else self.definition_hash

    def validate_input(self, value: Any) -> None:
        validate_against(self._input_validator, value, f"input of workflow {self.id!r}")

    def validate_output(self, value: Any) -> None:
        validate_against(self._output_validator, value, f"output of workflow {self.id!r}")

    def version_record(self) -> dict[str, Any]:
        return {
            "workflowVersionId": self.version_id,
            "workflowId": self.id,
            "version": self.version,
            "definitionHash": self.definition_hash,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "skills": self.skills,
        }

    async def __call__(self, ctx: AnyContext, input: In) -> Out:
        return await self.fn(ctx, input)


def _source_of(fn: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"


class WorkflowDecorator(Protocol):
    """What `workflow(...)` returns: `async def f(ctx, input: X) -> Y` becomes a
    `Workflow[X, Y]` (a pydantic model Y stays Y: values keep their types)."""

    def __call__(self, fn: Callable[[AnyContext, InputT], Awaitable[OutputT]], /
                 ) -> Workflow[InputT, OutputT]: ...


def workflow(
    id: str | None = None,
    *,
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    version: str | None = None,
    skills: dict[str, str] | None = None,
    timeout: Deadline | None = None,
) -> WorkflowDecorator:
    """Declare an `async def fn(ctx, input)` as a durable workflow.

    `timeout` (a timedelta or seconds): the deadline of a run started without
    `deadline=`; past it the run is cancelled with its sub-runs (DESIGN §17). It is not
    part of the version: changing it changes new runs only.

    A run is pinned to the version of the code that created it: `version` when given,
    else the definition hash (the source, schemas and skills). Other code may not resume
    it (`WorkflowVersionError`): give it the run's `version=` to declare that it continues
    those runs, or fork the run onto it (`fork_run`)."""

    def decorate(fn: WorkflowFn) -> Workflow[Any, Any]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {fn.__qualname__} must be an async function")
        workflow_id = validate_name("workflow id", id or fn.__name__)
        timeout_seconds = seconds_of(timeout, f"the timeout of workflow {workflow_id!r}")
        # A pathlib.Path source is a host folder: spelled as a file:// URL from here on.
        skill_map = {
            name: (f"file://{os.path.abspath(src)}" if isinstance(src, os.PathLike) else src)
            for name, src in (skills or {}).items()
        }
        for name in skill_map:
            validate_name("skill name", name)
        definition_hash = content_hash(
            {
                "workflowId": workflow_id,
                # "1" was the default before runs were pinned: hashing an unversioned
                # definition as before keeps the runs it created resumable after an upgrade.
                "version": "1" if version is None else str(version),
                "inputSchema": input_schema,
                "outputSchema": output_schema,
                "skills": skill_map,
                "source": _source_of(fn),
            }
        )
        return Workflow(
            id=workflow_id,
            fn=fn,
            version=None if version is None else str(version),
            input_schema=input_schema,
            output_schema=output_schema,
            skills=skill_map,
            definition_hash=definition_hash,
            timeout=timeout_seconds,
            _input_validator=_validator(input_schema, f"input of {workflow_id!r}"),
            _output_validator=_validator(output_schema, f"output of {workflow_id!r}"),
        )

    return decorate  # type: ignore[return-value]  # typed by WorkflowDecorator
