"""The names a served model answers to: its id, its id with Ollama's ``:latest`` tag (what ``ollama list`` shows,
copied into any client; Ollama's own /v1 takes it too), and its id with ``-fast`` (the fast path); and on Ollama's
routes, any spelling Ollama's own server reads as the same name (``ollama_spelling``).

Ollama's reading of a name (types/model/name.go ``ParseName``, internal/modelref ``ParseRef``):
- ``[host/][namespace/]model[:tag]``, the host ``registry.ollama.ai``, the namespace ``library`` and the tag
  ``latest`` where they are left out: ``x``, ``x:latest``, ``library/x`` and ``registry.ollama.ai/library/x:latest``
  are one name; spaces around it and a ``:local`` source suffix are dropped (a ``:cloud`` one names a model
  elsewhere: a name, never one served here); a name with two sources (``x:local:cloud``) is refused.
- Parts are compared without regard to case (its server canonicalises each part against the models it has).
- A part is 1 to 80 characters (a host 350) of letters, digits, ``_``, ``-`` and ``.`` (not in a namespace; a host
  may hold ``:``), starting with a letter, digit or ``_``: a name outside that is not Ollama's, and only the name as
  sent can match it.
"""

from __future__ import annotations

LATEST = ":latest"
FAST_SUFFIX = "-fast"
_DEFAULTS = ("registry.ollama.ai", "library", "latest")  # host, namespace, tag
_MISSING = "!MISSING!"  # (Ollama's stand-in for an empty part beside a separator: never valid)


def spellings(name: str) -> tuple[str, ...]:
    """The ids ``name`` may mean, in the order to try them: the name as given (a served id may itself end in
    ``:latest``, ``--model-id``), then without the tag."""
    return tuple(dict.fromkeys((name, name.removesuffix(LATEST))))


def _cut_last(s: str, sep: str) -> tuple[str, str, bool]:
    before, found, after = s.rpartition(sep)
    if not found:
        return s, "", False
    return before or _MISSING, after or _MISSING, True


def _valid(part: str, kind: str) -> bool:
    if not 1 <= len(part) <= (350 if kind == "host" else 80):
        return False
    if not (part[0].isascii() and (part[0].isalnum() or part[0] == "_")):
        return False
    extra = {"host": "_-.:", "namespace": "_-"}.get(kind, "_-.")
    return all(c.isascii() and (c.isalnum() or c in extra) for c in part[1:])


def ollama_parts(name: str, cased: bool = False) -> tuple[str, str, str, str] | None:
    """(host, namespace, model, tag) of ``name`` as Ollama's ParseName reads it, defaults filled in, in lower case
    (names compare so), or ``cased`` as sent (Ollama's errors print a name so); None where Ollama would not take it
    as a name."""
    host = namespace = tag = ""
    if name.rfind(":") > name.rfind("/"):
        name, tag, _ = _cut_last(name, ":")
    rest, model, cut = _cut_last(name, "/")
    if not cut:
        model = name
    else:
        rest, namespace, cut = _cut_last(rest, "/")
        if not cut:
            namespace = rest
        else:
            host = rest.split("://", 1)[-1]
    parts = (host or _DEFAULTS[0], namespace or _DEFAULTS[1], model, tag or _DEFAULTS[2])
    if not all(_valid(p, k) for p, k in zip(parts, ("host", "namespace", "model", "tag"))):
        return None
    return parts if cased else tuple(p.lower() for p in parts)  # type: ignore[return-value]


def _source(name: str) -> tuple[str, str | None]:
    """(``name`` less its source, the source it names: ``"local"``, ``"cloud"`` or None), as Ollama's ParseRef reads a
    source: a last ``:local`` or ``:cloud`` (any case, spaces around it), or a last tag ending in ``-cloud``
    (``x:7b-cloud``, a model at ``x:7b`` elsewhere)."""
    before, sep, tail = name.rpartition(":")
    if not sep:
        return name, None
    kind = tail.strip().lower()
    if kind in ("local", "cloud"):
        return before, kind
    if "/" not in tail and kind.endswith("-cloud"):
        return f"{before}:{tail.strip()[:-len('-cloud')]}", "cloud"
    return name, None


def conflicting_source(name: str) -> bool:
    """Whether ``name`` names its source twice (``x:local:cloud``, ``x:cloud:local``, ``x:7b-cloud:local``): Ollama's
    handlers refuse it (400 "use either :local or :cloud, not both") before they look for the model."""
    base, source = _source(name.strip())
    return source is not None and _source(base)[1] is not None


def _local(name: str) -> str:
    """``name`` as Ollama's ParseRef leaves it: spaces around it and an explicit ``:local`` source dropped."""
    base, source = _source(name.strip())
    return base if source == "local" else name.strip()


def ollama_reads(name: str) -> bool:
    """Whether Ollama's server takes ``name`` as a model name at all (the rules above); an empty one is its own
    case (Ollama's "model is required"). Its chat, generate and show answer any other 400 "invalid model name"."""
    # a cloud source (``x:7b:cloud``, ``x:7b-cloud``) is set aside too: a name Ollama reads, of a model not served
    # here (404); a name with two sources is refused before (``conflicting_source``)
    name = _source(name.strip())[0]
    return not name or ollama_parts(name) is not None


def ollama_spelling(name: str, ids: list[str]) -> str | None:
    """The served name (an id, or an id's ``-fast`` name) that ``name``, sent on Ollama's API, means as Ollama
    reads names (the rules above); None where it means none of them."""
    name = _local(name)
    names = [n for i in ids for n in (i, i + FAST_SUFFIX)]
    want = ollama_parts(name) if name else None
    if name in names or want is None:  # (the exact spelling first: two ids may differ only in case)
        return name if name in names else None
    return next((n for n in names if ollama_parts(n) == want), None)
