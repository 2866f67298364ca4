"""Step and run values: typed by annotations through the codec (codec.py: values keep their types),
stored as plain JSON, read back from the log (spilled parts included)."""

from __future__ import annotations

from typing import Any

from ..errors import ReplayDivergenceError, SchemaValidationError, StepError
from ..world.payloads import read_back
from ..world.protocol import WorldLike
from .codec import PLAIN, Codec, ValueCodecError, input_codec, return_codec


def to_json_value(value: Any, run_id: str, where: str) -> Any:
    """`value` as frozen plain JSON (a pydantic model dumped in JSON mode), or StepError."""
    try:
        return PLAIN.encode(value)
    except ValueCodecError as e:
        raise StepError(run_id, where, f"output is not JSON-serialisable ({e.reason})") from None


def codec_problem(what: str, e: ValueCodecError) -> str:
    """`the output (annotated Order) does not fit: at qty: ...`"""
    if e.type_name == PLAIN.type_name:
        return f"{what} is not JSON-serialisable ({e.reason})"
    return f"{what} (annotated {e.type_name}) {e.reason}"


def encode_step_output(codec: Codec, value: Any, run_id: str, path: str) -> tuple[Any, Any]:
    """(the frozen JSON to store, the value the workflow gets): decoded from that JSON, so
    a first run gets what a resume will. StepError when it does not fit."""
    try:
        stored = codec.encode(value)
        return stored, codec.decode(stored)
    except ValueCodecError as e:
        raise StepError(run_id, path, codec_problem("the output", e)) from None


def decode_stored(codec: Codec, stored: Any, run_id: str, path: str, what: str) -> Any:
    """A value read back from the log, as its annotation types it. A stored value that no
    longer fits the code's annotation is a divergence: the code changed under the run."""
    if codec.plain:
        return stored
    try:
        return codec.decode(stored)
    except ValueCodecError as e:
        raise ReplayDivergenceError(
            run_id, path, f"the stored {what} no longer fits the code's annotation "
            f"{e.type_name}: {e.reason}") from None


def encode_input(wf: Any, input: Any, run_id: str) -> Any:
    """A workflow's input as frozen JSON, typed by its `input` annotation; one that does not
    fit is refused (SchemaValidationError) before anything is written. No input (None)
    stays None whatever the annotation, as `run_workflow(wf)` and `little run` without
    `--input` give it."""
    codec = PLAIN if input is None else input_codec(wf.fn)
    try:
        stored = codec.encode(input)
        if not codec.plain:
            # Encoded again from the typed value: the input given as a model or as its
            # JSON (in any order, a set's members in any order) is one input, one hash.
            stored = codec.encode(codec.decode(stored))
    except ValueCodecError as e:
        if codec.plain:
            raise SchemaValidationError(f"input of run {run_id}", f"not JSON ({e.reason})") from None
        raise SchemaValidationError(f"input of run {run_id}",
                                    f"{e.reason} (annotated {e.type_name})") from None
    return stored


def decode_input(wf: Any, stored: Any, run_id: str) -> Any:
    codec = PLAIN if stored is None else input_codec(wf.fn)
    return decode_stored(codec, stored, run_id, "(input)", "input")


def encode_output(wf: Any, value: Any, run_id: str) -> tuple[Any, Any]:
    """(frozen JSON, typed value) of what a workflow returned; StepError when it does not
    fit its return annotation."""
    return encode_step_output(return_codec(wf.fn), value, run_id, "(workflow output)")


def output_json(wf: Any, value: Any) -> Any:
    """A `RunResult.output` as JSON again, for whatever hands it on (the CLI, a manifest,
    a pipeline's record): by the workflow's return annotation when it fits, else as plain
    JSON would take it (a supervisor's `Done(...)` of its own shape)."""
    codec = return_codec(wf.fn) if wf is not None else PLAIN
    try:
        return codec.encode(value)
    except ValueCodecError:
        if codec.plain:
            raise
    from .codec import encode_untyped

    return encode_untyped(value)


def decode_output(wf: Any, stored: Any, run_id: str) -> Any:
    codec = return_codec(wf.fn) if wf is not None else PLAIN
    return decode_stored(codec, stored, run_id, "(output)", "output")


def stored_value(world: WorldLike, value: Any, ref: str | None = None) -> Any:
    """A value read back from a run's log, as the run produced it (every reader resolves
    spilled values, so all readers see one truth): the artifact `ref` when the runtime
    stored it as one (`outputRef` of a large step or run output); otherwise a plain copy of the inline
    value with every part the World spilled (`{"$ref": …}`) read back. A scalar is
    returned as it is. Reads go through `world.read_artifact`, so a tracing World sees them.
    """
    if ref:
        return world.read_artifact(ref)
    if isinstance(value, (dict, list)):
        return read_back(value, world.read_artifact)
    return value
