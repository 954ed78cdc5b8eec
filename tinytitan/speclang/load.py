"""Loading spec/*.yaml: parse, check against the meta-schema, check cross-references, compile.

A malformed spec file fails here, at load, with ``SpecError("<file>: <path>: <problem>")``. What the load cannot
see, whether the names a spec gives to code (route handlers, request and machine hooks) are the protocol module's,
is checked when the module starts, by ``ProtocolSpec.check_provided``: one check and one wording for all three.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..chat_request import ChatRequest
from ..events import EVENT_TYPES
from . import meta_check, paths, template

# the template roots every machine provides (speclang/machine.py and protocols/base.py)
BUILTIN_ROOTS = frozenset({"ev", "vars", "req", "emitted", "state", "error", "id", "created", "model", "choice",
                           "prompt_tokens"})
EVENT_FIELDS = {name: {f.name for f in dataclasses.fields(cls)} for name, cls in EVENT_TYPES.items()}


class SpecError(ValueError):
    pass


def spec_dir() -> Path:
    """spec/ beside the package in a source checkout; the copy inside the package in an installed wheel."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "spec", here / "_spec"):
        if (candidate / "shared.yaml").is_file():
            return candidate
    raise SpecError(f"no spec directory found near {here}")


# libyaml's parser where PyYAML was built with it (its wheels are): the same documents, about six times faster —
# reading the spec files was a second of every server's start
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(text: str) -> Any:
    """``yaml.safe_load``, on libyaml where it is there."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)


@functools.lru_cache(maxsize=1)
def _meta_validator() -> jsonschema.Draft202012Validator:
    schema = read_yaml((Path(__file__).parent / "meta_schema.yaml").read_text())
    return jsonschema.Draft202012Validator(schema)


@dataclass(frozen=True)
class ErrorKind:
    status: int
    type: str
    code: str | None = None
    headers: dict = field(default_factory=dict)


@dataclass
class ProtocolSpec:
    """One protocol's tables, checked. ``machine()`` and ``validator`` are compiled from it."""

    name: str
    source: str
    raw: dict
    headers: dict[str, str] = field(default_factory=dict)
    error_envelope: dict = field(default_factory=dict)
    error_kinds: dict[str, ErrorKind] = field(default_factory=dict)
    error_by_header: dict[str, str] = field(default_factory=dict)
    error_params: dict[str, str] = field(default_factory=dict)
    routes: list[dict] = field(default_factory=list)
    request: dict = field(default_factory=dict)
    maps: dict[str, dict] = field(default_factory=dict)
    context: dict[str, dict] = field(default_factory=dict)
    fold: dict | None = None
    stream: dict | None = None
    extra: dict = field(default_factory=dict)
    # stream event name → the ``$paths`` its templates look up (``data``, ``event``, ``when``), read once at load
    lookups: dict[str, frozenset[str]] = field(default_factory=dict)
    # stream event name → its templates compiled (what a machine renders at every token), built once at load
    event_templates: dict[str, template.EventTemplate] = field(default_factory=dict, repr=False)

    def error_kind(self, kind: str) -> ErrorKind:
        return self.error_kinds.get(kind) or self.error_kinds["server_error"]

    def check_provided(self, what: str, named, provided) -> None:
        """The names this spec gives to code (``what``: route handlers, request or machine hooks) are ones the
        protocol module provides: checked when the module starts, as the load cannot see the module."""
        missing = sorted(set(named) - set(provided))
        if missing:
            raise ValueError(f"{self.source}: {what} not provided by the protocol module: {missing}")

    @property
    def computed(self) -> list[str]:
        """The context names the protocol's module computes (``stream.computed``): templates may use them."""
        return list((self.stream or {}).get("computed") or [])

    @property
    def vars_used(self) -> set[str]:
        """The ``$vars.<name>`` names the stream templates use: the fields a protocol's state must have."""
        return {steps[1] for used in self.lookups.values() for steps in map(paths.steps, used)
                if steps[0] == "vars" and len(steps) > 1}

    @property
    def framing(self) -> str:
        """How the stream's wire events are written: ``sse`` or ``ndjson``."""
        return (self.stream or {}).get("framing", "sse")

    @property
    def content_type(self) -> str:
        return FRAMING_CONTENT_TYPES[self.framing]


FRAMING_CONTENT_TYPES = {"sse": "text/event-stream; charset=utf-8", "ndjson": "application/x-ndjson"}


def _fail(source: str, path: str, problem: str) -> SpecError:
    return SpecError(f"{source}: {path or '<top>'}: {problem}")


def _json_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def load_protocol(name_or_path: str | Path, directory: Path | None = None) -> ProtocolSpec:
    path = Path(name_or_path)
    if path.suffix != ".yaml":
        path = (directory or spec_dir()) / f"{name_or_path}.yaml"
    return compile_spec(read_spec(path), path.name)


def read_spec(path: Path, seen: tuple[str, ...] = ()) -> Any:
    """A spec file's YAML, with ``errors.extends`` resolved: the named file's envelope and kinds, this
    file's own over them (one declaration of the OpenAI error table, not three copies)."""
    source = path.name
    try:
        raw = read_yaml(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{source}: no such spec file ({path})") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}") from None
    errs = raw.get("errors") if isinstance(raw, dict) else None
    if not isinstance(errs, dict) or "extends" not in errs:
        return raw
    name = errs["extends"]
    if not isinstance(name, str) or name in seen + (path.stem,):
        raise _fail(source, "errors.extends", f"cannot extend {name!r} (a spec name, and no cycles)")
    base = read_spec(path.parent / f"{name}.yaml", seen + (path.stem,))
    base_errs = base.get("errors") or {} if isinstance(base, dict) else {}
    merged = {"envelope": base_errs.get("envelope"), **{k: v for k, v in errs.items() if k != "extends"}}
    merged["kinds"] = {**(base_errs.get("kinds") or {}), **(errs.get("kinds") or {})}
    return {**raw, "errors": merged}


# compiled specs by their source and content: checking a table against the meta-schema is most of a protocol's
# construction (the Responses protocol compiles two side tables at each construction), and a spec is never
# changed once compiled. A handful per process; bounded all the same (a test may write specs of its own).
_COMPILED: dict[tuple[str, str], ProtocolSpec] = {}
_COMPILED_MAX = 64
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of dicts, lists, strings, numbers, booleans and None alone (what YAML's plain
    documents are), each of exactly that type: where ``repr`` is the table exactly."""
    kind = type(value)
    if kind is dict:
        return all(type(k) in _PLAIN and _plain(v) for k, v in value.items())
    if kind is list:
        return all(_plain(v) for v in value)
    return kind in _PLAIN


def _content_key(raw: Any) -> str | None:
    """The memo's key for a table: equal only for the same table, types and order included (a map's ``1`` is not
    its ``"1"`` nor its ``true``, a tuple is not a list, and ``extra.root``'s order is GET /'s tie-break), which a
    JSON text is not; None where the table holds anything else (not remembered)."""
    return repr(raw) if _plain(raw) else None


def compile_spec(raw: Any, source: str) -> ProtocolSpec:
    """``raw`` checked and compiled; the same content from the same source again is the same spec object, which
    holds a copy of ``raw``: the caller may go on changing its own (a variant of a table) without changing the
    spec every later load of that content gets."""
    content = _content_key(raw)
    if content is None:  # (YAML dates, sets …: the checks will say so)
        return _compile(raw, source)
    key = (source, content)
    spec = _COMPILED.get(key)
    if spec is None:
        spec = _compile(copy.deepcopy(raw), source)
        if len(_COMPILED) >= _COMPILED_MAX:
            del _COMPILED[next(iter(_COMPILED))]
        _COMPILED[key] = spec
    return spec


def _compile(raw: Any, source: str) -> ProtocolSpec:
    if not isinstance(raw, dict):
        raise _fail(source, "", "a spec file must be a mapping")
    errors = sorted(_meta_validator().iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise _fail(source, _json_path(e.absolute_path), e.message)
    errs = raw["errors"]
    if "extends" in errs:
        raise _fail(source, "errors.extends", "is resolved only when a spec file is loaded (load_protocol)")
    spec = ProtocolSpec(
        name=raw["protocol"],
        source=source,
        raw=raw,
        headers=dict(raw.get("headers") or {}),
        error_envelope=errs["envelope"],
        error_kinds={k: ErrorKind(**v) for k, v in errs["kinds"].items()},
        error_by_header=dict(errs.get("by_header") or {}),
        error_params=dict(errs.get("params") or {}),
        routes=list(raw.get("routes") or []),
        request=raw.get("request") or {},
        maps=raw.get("maps") or {},
        context=raw.get("context") or {},
        fold=raw.get("fold"),
        stream=raw.get("stream"),
        extra=raw.get("extra") or {},
    )
    if "server_error" not in spec.error_kinds:
        raise _fail(source, "errors.kinds", "must declare 'server_error'")
    _check_request(spec)
    if spec.stream is not None:
        _check_stream(spec)
    return spec


def _check_request(spec: ProtocolSpec) -> None:
    fields = spec.request.get("fields") or {}
    route_fields = {name for r in spec.routes for name in (r.get("fields") or {})}
    for i, rule in enumerate(spec.request.get("refuse") or []):
        root = rule["field"].split(".")[0].split("[")[0]
        if root not in fields and root not in route_fields:
            raise _fail(spec.source, f"request.refuse[{i}].field",
                        f"refuses '{rule['field']}', but '{root}' is not a declared request field")
        kind = rule.get("kind", "invalid_request")
        if kind not in spec.error_kinds:
            raise _fail(spec.source, f"request.refuse[{i}].kind", f"no error kind '{kind}' in errors.kinds")
    for i, path in enumerate(spec.request.get("lowercase") or []):
        if path.split(".")[0].split("[")[0] not in fields:
            raise _fail(spec.source, f"request.lowercase[{i}]", f"'{path}' is not in a declared request field")
    for i, route in enumerate(spec.routes):
        for name, f in (route.get("fields") or {}).items():
            if name not in fields and "type" not in f:
                raise _fail(spec.source, f"routes[{i}].fields.{name}",
                            f"changes '{name}', which is not a declared request field (a route's own field "
                            "declares its type)")
        for key in ("without", "only"):
            for name in route.get(key) or []:
                if name not in fields:
                    raise _fail(spec.source, f"routes[{i}].{key}", f"'{name}' is not a declared request field")
    for name, f in fields.items():
        if f.get("ignore") and (f.get("to") or f.get("hook")):
            raise _fail(spec.source, f"request.fields.{name}", "'ignore' cannot be combined with 'to' or 'hook'")
    declared = [(f"request.fields.{n}", f) for n, f in fields.items()] + [
        (f"routes[{i}].fields.{n}", f) for i, r in enumerate(spec.routes) for n, f in (r.get("fields") or {}).items()]
    targets = {f.name for f in dataclasses.fields(ChatRequest)}
    for where, f in declared:
        if "to" in f and f["to"] not in targets:
            raise _fail(spec.source, f"{where}.to", f"'{f['to']}' is not a ChatRequest field")
    for name in spec.request.get("derive") or {}:
        if name not in targets:
            raise _fail(spec.source, f"request.derive.{name}", f"'{name}' is not a ChatRequest field")
    for where, f in declared:
        if "schema" in f:
            try:
                meta_check.check(f["schema"])  # (check_schema's verdict and words: meta_check.py)
            except jsonschema.SchemaError as exc:
                inside = _json_path(exc.path)
                raise _fail(spec.source, f"{where}.schema" + (f".{inside}" if inside[:1] not in ("", "[") else inside),
                            exc.message) from None


def _check_stream(spec: ProtocolSpec) -> None:
    stream = spec.stream
    states, events = stream["states"], stream["events"]
    if stream["initial"] not in states:
        raise _fail(spec.source, "stream.initial", f"no state named '{stream['initial']}'")
    for entry, state in (stream.get("entries") or {}).items():
        if state not in states:
            raise _fail(spec.source, f"stream.entries.{entry}", f"no state named '{state}'")
    emitted_on: dict[str, set[str]] = {name: set() for name in events}  # event → the TokenEvents that emit it
    for state, table in states.items():
        for ev_name, tr in table.items():
            where = f"stream.states.{state}.{ev_name}"
            if ev_name not in EVENT_TYPES:
                raise _fail(spec.source, where, f"'{ev_name}' is not a TokenEvent (one of {', '.join(EVENT_TYPES)})")
            if tr.get("next", state) not in states:
                raise _fail(spec.source, f"{where}.next", f"no state named '{tr['next']}'")
            for j, name in enumerate(tr.get("emit", [])):
                if name not in events:
                    raise _fail(spec.source, f"{where}.emit[{j}]", f"no event named '{name}' in stream.events")
                emitted_on[name].add(ev_name)
    known = BUILTIN_ROOTS | set(spec.context) | set((spec.fold or {}).get("context") or {}) | set(spec.computed)
    for name, ev in events.items():
        where = f"stream.events.{name}"
        for m in template.map_names(ev["data"]) | template.map_names(ev.get("event", "")):
            if m not in spec.maps:
                raise _fail(spec.source, where, f"uses map '{m}', which 'maps' does not declare")
        used = template.lookups(ev["data"]) | template.lookups(ev.get("event", "")) | ({ev["when"].removeprefix("!")} if ev.get("when") else set())
        spec.lookups[name] = frozenset(used)
        spec.event_templates[name] = template.compile_event(ev, spec.maps)
        for path in sorted(used):
            steps = paths.steps(path)
            if steps[0] not in known:
                raise _fail(spec.source, where, f"uses ${path}, which no context provides (the built-in names, "
                            "'context:', or the names the module computes, declared in 'stream.computed')")
            if steps[0] == "ev" and len(steps) > 1:
                for ev_type in sorted(emitted_on[name]):
                    if not hasattr(EVENT_TYPES[ev_type], steps[1]) and steps[1] not in EVENT_FIELDS[ev_type]:
                        raise _fail(spec.source, where, f"uses ${path}, but {ev_type} (which emits it) has no "
                                    f"'{steps[1]}'")
            if steps[0] == "error" and emitted_on[name] - {"Failed"}:
                raise _fail(spec.source, where, f"uses ${path}, which only a Failed event provides")
