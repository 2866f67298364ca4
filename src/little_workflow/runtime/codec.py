"""Values keep their types — stored as JSON, given back as the annotation types them: one
codec per annotation, driven by pydantic.

A value goes to storage as plain JSON and comes back as the type its annotation names:

- encode: pydantic's JSON mode (the annotation's `SchemaSerializer`, by alias), then
  every list that was a set sorted by the canonical JSON of its members, so one value is
  one byte string — one digest, one idempotency key — in every process (a set's
  iteration order changes with PYTHONHASHSEED);
- decode: `SchemaValidator.validate_json` of that JSON. JSON mode is the dump's exact
  inverse: bytes from base64, tuples and sets from arrays, datetimes from ISO strings.

Callers return decode(encode(value)) on a first run too, so it sees what a resume sees.
Schemas are built once per annotation and kept (`codec_for`); a function's annotation is
resolved once per function object (`return_codec`, `input_codec`).

Plain JSON (`PLAIN`: today's rules and cost, a copy) for an unannotated function, `Any`,
`object`, `None`, a bare TypeVar, and an annotation that cannot be resolved or that
pydantic refuses (`typing.TypedDict` before Python 3.12).

bytes are base64, except inside a pydantic model or pydantic dataclass: pydantic reuses
such a class's own serializer and validator, so its config (`ser_json_bytes` /
`val_json_bytes`, utf8 by default) decides there.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import threading
import types
import typing
import weakref
from collections import OrderedDict
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError
from pydantic_core import (
    CoreConfig,
    PydanticSerializationError,
    SchemaSerializer,
    SchemaValidator,
    to_json,
)

from ..world.ids import canonical_json
from ..world.models import thaw
from ..world.payloads import frozen_json

_BASE64_BYTES: CoreConfig = {"ser_json_bytes": "base64", "val_json_bytes": "base64"}
#: Keys of a core schema node that hold data, not sub-schemas (a default value, literal
#: choices, user metadata): left as they are when the schema is copied.
_DATA_KEYS = frozenset({"metadata", "default", "expected", "cls", "custom_error_context",
                        "config", "ref", "function"})
_MAX_CACHED_ANNOTATIONS = 4096


class ValueCodecError(Exception):
    """A value that cannot be encoded as JSON, or stored JSON that does not fit the
    annotation. Callers turn it into the error of their place (StepError,
    SchemaValidationError, ReplayDivergenceError) naming the step and `type_name`."""

    def __init__(self, type_name: str, reason: str):
        self.type_name, self.reason = type_name, reason
        super().__init__(f"{reason} (type {type_name})")


class PlainCodec:
    """Plain JSON: what an unannotated function gets. A top-level pydantic model is dumped
    in JSON mode, as before types were kept; the value read back is a plain copy."""

    plain = True
    annotation: Any = Any
    type_name = "JSON"

    def encode(self, value: Any) -> Any:
        if isinstance(value, BaseModel):
            out = value.model_dump(mode="json")
            sort_sets(value, out, by_alias=False)
            return frozen_json(out, "value")
        try:
            return frozen_json(value, "value")
        except TypeError as e:
            raise ValueCodecError(self.type_name, f"{e}; annotate the function's return type "
                                  "to store other types") from None

    def decode(self, stored: Any) -> Any:
        return thaw(stored)


PLAIN = PlainCodec()


class ValueCodec:
    """Encodes values of one annotation to JSON and decodes that JSON back to them."""

    plain = False

    def __init__(self, annotation: Any, schema: Any):
        self.annotation = annotation
        self.type_name = type_name(annotation)
        schema = _with_base64_bytes(schema)
        self._serializer = SchemaSerializer(schema, _BASE64_BYTES)
        self._validator = SchemaValidator(schema, _BASE64_BYTES)
        self._sorts_sets = _may_hold_sets(schema)
        # A str, int or bool is its own JSON and its own decoding: no pydantic call (the
        # common `-> int` step costs what an unannotated one does).
        self._scalar = annotation if annotation in (str, int, bool) else None

    def encode(self, value: Any) -> Any:
        """The value as frozen JSON. A value of another type is dumped as pydantic infers
        it; `decode` then says whether it fits (a dict for a model does)."""
        if type(value) is self._scalar:
            return value
        try:
            out = self._serializer.to_python(value, mode="json", by_alias=True, warnings=False)
        except (PydanticSerializationError, ValueError, TypeError) as e:
            raise ValueCodecError(self.type_name, f"cannot be encoded as JSON: {_hint(e)}") from None
        if self._sorts_sets:
            sort_sets(value, out, by_alias=True)
        try:
            return frozen_json(out, "value")
        except TypeError as e:
            raise ValueCodecError(self.type_name, f"cannot be encoded as JSON: {e}") from None

    def decode(self, stored: Any) -> Any:
        if type(stored) is self._scalar:
            return stored
        try:
            return self._validator.validate_json(to_json(stored), by_alias=True, by_name=True)
        except ValidationError as e:
            raise ValueCodecError(self.type_name, f"does not fit: {_first_error(e)}") from None


Codec = typing.Union[PlainCodec, ValueCodec]


def type_name(annotation: Any) -> str:
    """How an error names a type: `Order`, `int`, `tuple[int, str]`."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing_extensions.", "").replace("typing.", "")


# ---- annotations to codecs -------------------------------------------------------------

_lock = threading.Lock()
_by_annotation: OrderedDict[Any, Codec] = OrderedDict()
_by_return: weakref.WeakKeyDictionary[Any, Codec] = weakref.WeakKeyDictionary()
_by_input: weakref.WeakKeyDictionary[Any, Codec] = weakref.WeakKeyDictionary()


def codec_for(annotation: Any) -> Codec:
    """The codec of a resolved annotation (cached)."""
    if annotation is Any or annotation is object or annotation is None \
            or annotation is type(None) or isinstance(annotation, TypeVar):
        return PLAIN
    try:
        codec = _by_annotation.get(annotation)
    except TypeError:  # unhashable metadata in an Annotated[...]: built each time
        return _build(annotation)
    if codec is None:
        codec = _build(annotation)
        with _lock:
            _by_annotation[annotation] = codec
            if len(_by_annotation) > _MAX_CACHED_ANNOTATIONS:
                _by_annotation.popitem(last=False)
    return codec


def _build(annotation: Any) -> Codec:
    try:
        schema = TypeAdapter(annotation).core_schema
    except (PydanticUserError, NameError, TypeError):
        # Documented fallback (values keep their types where they can): a type pydantic
        # refuses, or a model whose forward references do not resolve, is stored as plain JSON.
        return PLAIN
    return ValueCodec(annotation, schema)


def return_codec(fn: Any) -> Codec:
    """The codec of what calling `fn` gives a step: its return annotation (a partial's
    function's; an async function's awaited type; a class called as a step: the class)."""
    func = _function_of(fn)
    if func is None:
        return PLAIN
    if isinstance(func, type):
        return codec_for(func)
    if "return" not in func.__annotations__:
        return PLAIN  # the unannotated step: no lookup, no lock
    codec = _by_return.get(func)
    if codec is None:
        hint = _resolved(func, func.__annotations__["return"])
        codec = PLAIN if hint is _UNRESOLVED else codec_for(_awaited(hint))
        with _lock:
            _by_return[func] = codec
    return codec


def input_codec(fn: Any) -> Codec:
    """The codec of a workflow function's input: its `input` parameter's annotation (or
    the second parameter's, after `ctx`)."""
    func = _function_of(fn)
    if func is None or isinstance(func, type):
        return PLAIN
    codec = _by_input.get(func)
    if codec is None:
        code = func.__code__
        names = code.co_varnames[:code.co_argcount]
        name = "input" if "input" in names else (names[1] if len(names) > 1 else None)
        raw = func.__annotations__.get(name) if name else None
        hint = _UNRESOLVED if raw is None else _resolved(func, raw)
        codec = PLAIN if hint is _UNRESOLVED else codec_for(hint)
        with _lock:
            _by_input[func] = codec
    return codec


def _function_of(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if isinstance(fn, (types.FunctionType, type)):
        return fn
    call = type(fn).__call__ if callable(fn) else None  # a callable object: its __call__
    return call if isinstance(call, types.FunctionType) else None


_UNRESOLVED: Any = object()


def _resolved(func: types.FunctionType, raw: Any) -> Any:
    """`raw` (an annotation of `func`, maybe a string under `from __future__ import
    annotations`) evaluated where `func` was defined, its closure included."""
    localns: dict[str, Any] = {}
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
        try:
            localns[name] = cell.cell_contents
        except ValueError:  # a closure variable not assigned yet
            pass
    holder = types.SimpleNamespace(__annotations__={"value": raw})
    try:
        return typing.get_type_hints(holder, globalns=func.__globals__, localns=localns,
                                     include_extras=True)["value"]
    except Exception:
        # Documented fallback (values keep their types where they can): an annotation that
        # does not resolve (a name defined nowhere the function can see) means plain JSON,
        # whatever went wrong.
        return _UNRESOLVED


def _awaited(hint: Any) -> Any:
    """A sync step function annotated `-> Awaitable[T]` (or a Coroutine) is awaited by the
    step: its value is a T."""
    origin = typing.get_origin(hint)
    if origin in (collections.abc.Awaitable, collections.abc.Coroutine):
        args = typing.get_args(hint)
        return args[-1] if args else Any
    return hint


# ---- schemas ---------------------------------------------------------------------------

def _with_base64_bytes(schema: Any) -> Any:
    """A copy of a core schema in which every nested config (a stdlib dataclass's, a
    TypedDict's) stores bytes as base64 unless it says otherwise. Copied, never changed
    in place: a model's schema belongs to its class."""
    if isinstance(schema, list):
        return [_with_base64_bytes(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in _DATA_KEYS or not isinstance(v, (dict, list)) else _with_base64_bytes(v)
           for k, v in schema.items()}
    if "type" in schema and isinstance(schema.get("config"), dict):
        out["config"] = {**_BASE64_BYTES, **schema["config"]}
    return out


def _may_hold_sets(schema: Any) -> bool:
    """Whether a value of this schema can hold a set (a set, a frozenset, or Any)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") in ("set", "frozenset", "any"):
                return True
            stack.extend(v for k, v in node.items()
                         if k not in _DATA_KEYS and isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(node)
    return False


def sort_sets(value: Any, out: Any, *, by_alias: bool) -> None:
    """Sort in place every list of `out` (the JSON pydantic made of `value`) that was a
    set in `value`. Walked side by side: pydantic writes fields in order and dicts, lists
    and sets in iteration order, so a set's members line up with their JSON."""
    if isinstance(value, (set, frozenset)):
        if isinstance(out, list) and len(out) == len(value):
            for member, encoded in zip(value, out, strict=True):
                sort_sets(member, encoded, by_alias=by_alias)
            out.sort(key=canonical_json)
        return
    if isinstance(out, dict):
        if isinstance(value, BaseModel):
            for name, field in type(value).model_fields.items():
                key = (field.serialization_alias or field.alias or name) if by_alias else name
                if key in out:
                    sort_sets(getattr(value, name, None), out[key], by_alias=by_alias)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                if f.name in out:
                    sort_sets(getattr(value, f.name, None), out[f.name], by_alias=by_alias)
        elif isinstance(value, dict) and len(value) == len(out):
            for member, encoded in zip(value.values(), out.values(), strict=True):
                sort_sets(member, encoded, by_alias=by_alias)
    elif isinstance(out, list) and isinstance(value, (list, tuple)) and len(value) == len(out):
        for member, encoded in zip(value, out, strict=True):
            sort_sets(member, encoded, by_alias=by_alias)


# ---- values without an annotation ------------------------------------------------------

def encode_untyped(value: Any) -> Any:
    """A value whose type no annotation names (an event payload), as frozen JSON: plain
    JSON as it is; a model, dataclass, datetime, UUID... by its own class's codec; sets
    sorted. Raises ValueCodecError for what pydantic cannot encode either."""
    try:
        return frozen_json(value, "value")
    except TypeError:
        pass
    return frozen_json(_untyped(value), "value")


def _untyped(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {k: _untyped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_untyped(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_untyped(v) for v in value), key=canonical_json)
    codec = codec_for(type(value))
    if codec.plain:
        raise ValueCodecError(type_name(type(value)), "is not JSON, and pydantic cannot encode it")
    return codec.encode(value)


def _first_error(e: ValidationError) -> str:
    errors = e.errors(include_url=False)
    if not errors:
        return str(e)
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "value"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"at {where}: {first.get('msg')}{more}"


def _hint(e: Exception) -> str:
    if isinstance(e, UnicodeDecodeError):
        return (f"{e}: a pydantic model stores bytes as UTF-8 text unless its config says "
                "ser_json_bytes='base64', val_json_bytes='base64'")
    return str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
