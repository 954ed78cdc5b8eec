"""What ``tinytitan serve``'s flags say to serve: the backends (a model, a catalog, the scripted backend,
the demo models), their prompt cache on disk, speculative decoding, and a group of processes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .errors import LOAD_ERRORS, load_error_text
from .models.names import spellings

log = logging.getLogger("tinytitan")


def find_model_dirs(root: Path) -> list[Path]:
    """Every MLX model directory under root (a config.json beside *.safetensors), sorted by name."""
    from .models.resolve import files_under

    return sorted({p.parent for p in files_under(root, lambda name: name == "config.json")
                   if any(p.parent.glob("*.safetensors"))})


def second_engine_available() -> bool:
    """mlx has a second engine only where its default device is a GPU (Metal on Apple silicon); on Linux the
    CPU is its only engine, so no ``<id>@cpu`` twin is offered there."""
    import mlx.core as mx

    return bool(getattr(mx, "metal", None) and mx.metal.is_available())


def cpu_twins(backends: list, cache_bytes: int) -> list:
    from .engine.backends.mlx import MLXBackend

    return [type(b)(b.path, f"{b.model_id}@cpu", prompt_cache_bytes=cache_bytes, lazy=True, device="cpu")
            for b in backends if isinstance(b, MLXBackend)]


def make_backends(args) -> list:
    if args.reasoning_effort is not None:
        from .engine.prompt.reasoning import NAMES, SCALE, level_key

        if level_key(args.reasoning_effort) not in SCALE:
            raise SystemExit(f"--reasoning-effort {args.reasoning_effort} is not a reasoning level: "
                             f"{', '.join(NAMES)} (or none, max …)")
    default_reasoning = args.reasoning_effort or ({"on": True, "off": False}.get(args.thinking))
    cache_bytes = args.prompt_cache_mib << 20
    window = getattr(args, "context_window", None)  # (a Namespace built by hand may leave it out)
    if window is not None and not args.script:
        raise SystemExit("--context-window applies to --script only: a model's window comes from its config.json")
    if getattr(args, "script_images", False) and not args.script:
        raise SystemExit("--script-images applies to --script only: a model's config says whether it reads images")
    if window is not None and window < 1:
        raise SystemExit(f"--context-window must be a positive number of tokens, not {window}")
    if args.script:
        if getattr(args, "draft_model", None):
            speculative_config(args)  # refused: the scripted backend has no model to draft for
        from .engine.cache.memory import PromptCache
        from .engine.backends.scripted import SCRIPTED_CONTEXT_WINDOW, ScriptedBackend, demo_tokenizer, load_script

        import yaml

        try:
            script = load_script(args.script)
        except (OSError, ValueError, TypeError, yaml.YAMLError) as exc:
            raise SystemExit(f"--script {args.script}: {exc}".replace("\n", " ")) from None
        backends = [ScriptedBackend(script, demo_tokenizer(),
                                    model_id=args.model_id or "tinytitan-scripted",
                                    context_window=window or SCRIPTED_CONTEXT_WINDOW,
                                    prompt_cache=PromptCache(cache_bytes))]
        backends[0].takes_images = bool(getattr(args, "script_images", False))
    elif args.models_dir:
        from .engine.backends.vision import backend_class
        from .engine.group.ranks import Unshardable

        from .models.resolve import list_models, models_root

        root = models_root(args.models_dir)
        found = list_models(root, _gguf_form(args))
        if not found:
            raise SystemExit(f"no models (an Ollama library, MLX directories, *.gguf files, Hugging Face cache repos) "
                             f"under {root}")
        group = getattr(args, "group", None)  # under mlx.launch every rank lists the same catalog (lockstep.py)
        backends = []
        for m in found:  # a model that cannot be served is left out, said, as a GGUF that cannot be (resolve.py)
            try:
                b = backend_class(m.path, group)(m.path, m.model_id, prompt_cache_bytes=cache_bytes, lazy=True,
                                                 speculative=speculative_config(args, group=group), group=group)
                refused = unservable(b)
            except LOAD_ERRORS as exc:
                refused = load_error_text(exc)
            if refused:
                log.warning("%s: not served: %s", m.path, refused)
            else:
                backends.append(b)
        if not backends:
            raise SystemExit(f"no model under {root} can be served (the log says why of each)")
        if args.model_id:  # one of the catalog's models (each keeps its own id): the one named first
            # spelt as a request may name it (``x:latest`` is ``x``), as Engine.resolve reads it
            chosen = next(([b for b in backends if b.model_id == n] for n in spellings(args.model_id)
                           if any(b.model_id == n for b in backends)), [])
            if not chosen:
                raise SystemExit(f"--model-id {args.model_id}: no such model under {root} (it picks one of the "
                                 f"catalog's: {', '.join(b.model_id for b in backends)})")
            backends = chosen + [b for b in backends if b is not chosen[0]]
        log.info("catalog: %s", ", ".join(b.model_id for b in backends))
    else:
        if args.model == "demo-vision":  # the built-in vision demo model (a tiny Gemma 3)
            from .demo_model.vision import MODEL_ID, ensure_demo_vision

            path, model_id = ensure_demo_vision(), args.model_id or MODEL_ID
        elif args.model:
            from .models.resolve import ModelNotFound, resolve

            try:
                found = resolve(args.model, _gguf_form(args))
            except ModelNotFound as exc:
                raise SystemExit(str(exc)) from None
            path, model_id = found.path, args.model_id or found.model_id
        else:
            from .demo_model import demo_model_id, ensure_demo_model

            path, model_id = ensure_demo_model(), args.model_id or demo_model_id()
        from .engine.speculative.draft_model import DraftModelRefused

        from .engine.backends.vision import backend_class
        from .engine.group.ranks import Unshardable

        group = getattr(args, "group", None)
        try:  # the tokenizer and template judged before the weights are read (which may take minutes)
            backends = [backend_class(path, group)(path, model_id, prompt_cache_bytes=cache_bytes, lazy=True,
                                                   speculative=speculative_config(args, draft=True, group=group),
                                                   group=group)]
            refused = unservable(backends[0])
            if refused:
                raise SystemExit(f"cannot serve the model {model_id} from {path}: {refused}")
            backends[0].ensure_loaded()
        except (DraftModelRefused, Unshardable) as exc:
            raise SystemExit(str(exc)) from None
        except LOAD_ERRORS as exc:  # missing or damaged weights, a config mlx-lm cannot read …
            raise SystemExit(f"cannot load the model {model_id} from {path}: {load_error_text(exc)}") from None
    if not args.script and getattr(args, "group", None) is None and second_engine_available():
        backends += cpu_twins(backends, cache_bytes)
    for b in backends:
        b.default_reasoning = default_reasoning
    kv_bits = getattr(args, "kv_bits", None)
    if kv_bits is not None and not args.script:
        for b in backends:
            b.kv_bits = kv_bits
            if b.loaded:  # a resident model is checked now; a catalog's on its load
                try:
                    b.check_kv_bits()
                except ValueError as exc:
                    raise SystemExit(str(exc)) from None
    attach_prompt_disk(backends, args)
    for b in backends:  # a resident model's template compiled now: a first turn (after a restart too) costs what
        if b.loaded:  # a later one does
            b.warm()
    return backends


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "*.tiktoken")


def unservable(backend) -> str | None:
    """Why a model whose files loaded still cannot be served as a chat model (as a GGUF without a chat template
    is refused: models/gguf.py; or a template that renders no conversation at all), or None."""
    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None:
        return None
    try:  # (without its files, transformers builds an empty tokenizer: one token, which reads no text)
        words = len(tokenizer.get_vocab())
    except Exception:  # noqa: BLE001 — a tokenizer that cannot list its vocabulary is judged by its use
        words = None
    if words is not None and words < 2:
        return f"it has no tokenizer ({', '.join(TOKENIZER_FILES)})"
    if not getattr(tokenizer, "chat_template", None):
        return ("it has no chat template (tokenizer_config.json's chat_template, or chat_template.jinja): it cannot "
                "be served as a chat model")
    failure = backend.template_failure()  # (else every request would be refused, with this same reason)
    if failure:
        return f"its chat template fails on every conversation: {failure}"
    return None


def attach_prompt_disk(backends: list, args) -> None:
    """Each model's prompt cache also on disk (``--prompt-cache-dir``), unless it is 'off'. Not under
    mlx.launch: every rank must take the same prefix, and a rank's disk is its own (lockstep.py)."""
    where = getattr(args, "prompt_cache_dir", None) or os.environ.get("TINYTITAN_PROMPT_CACHE_DIR")
    mib = getattr(args, "prompt_cache_disk_mib", 0)
    if where == "off" or not mib or mib <= 0 or args.script:
        return
    if getattr(args, "group", None) is not None:
        log.info("prompt cache on disk: off under mlx.launch (each rank keeps its prefixes in memory)")
        return
    from .engine.backends.mlx import MLXBackend
    from .engine.cache.disk import PromptDisk
    from .engine.cache.disk_files import default_dir, layout_of

    directory = Path(where) if where else default_dir()
    for b in backends:
        if not isinstance(b, MLXBackend):
            continue
        disk = PromptDisk(directory, sorted(b.path.glob("*.safetensors")),
                          lambda b=b: layout_of(b.ensure_loaded(), b.kv_bits, b.images_layout), mib << 20,
                          queued_bytes=b.prompt_cache.max_bytes)
        b.prompt_cache.disk = disk
        if b.loaded:  # a model resident from the start: its digest and index are read now, in the background
            disk.start()
    log.info("prompt cache on disk: %s (up to %d MiB)", directory, mib)


def speculative_config(args, draft: bool = False, group=None):
    """How the served model drafts (``--prompt-lookup``, ``--draft-model``, ``--num-draft-tokens``); a draft
    model is for ``--model`` (or the demo model) only. In a group of processes (``mlx.launch``) rank 0 alone
    drafts (by prompt lookup, or with the whole draft model, which it alone loads), and its plan carries each
    draft to the followers, which draft nothing themselves and verify in step (group/lockstep.py)."""
    from .engine.speculative.speculator import SpeculativeConfig

    name = getattr(args, "draft_model", None)
    path = None
    if group is not None and group.rank != 0:
        return SpeculativeConfig(lookup=False)
    if name is not None:
        if not draft:
            raise SystemExit("--draft-model applies to --model (one model served), not to --models-dir or --script")
        from .models.resolve import ModelNotFound, resolve

        try:
            path = resolve(name, _gguf_form(args)).path
        except ModelNotFound as exc:
            raise SystemExit(f"--draft-model: {exc}") from None
    return SpeculativeConfig(lookup=getattr(args, "prompt_lookup", "on") == "on", draft_model=path,
                             draft_model_name=name, num_draft_tokens=getattr(args, "num_draft_tokens", None))


def _gguf_form(args) -> str | None:
    form = getattr(args, "gguf_form", "auto")
    return None if form == "auto" else form


# the flags every rank must be started with alike: the prompt cache a follower keeps must start each row where
# rank 0's does (its budget decides what it still holds), and the ranks' KV caches and split must match
SHARED_FLAGS = {"prompt_cache_mib": "--prompt-cache-mib", "kv_bits": "--kv-bits", "sharding": "--sharding"}


def join_group(args):
    """The group this process is a rank of, when ``mlx.launch`` started it (engine/group/ranks.py); None otherwise.
    A group serves a model (``--model``) or a catalog (``--models-dir``, the same on every host); a script is
    refused by name, and so is a rank started with other ``SHARED_FLAGS`` than rank 0 (on every rank, naming it:
    else the group would come up and break on a later turn, naming no flag)."""
    from .engine.group.ranks import Group, launched

    if not launched():
        return None
    if args.script:
        raise SystemExit("--script cannot be served by a group of processes (mlx.launch): a group serves a model, "
                         "named by --model, or a catalog, --models-dir")
    group = Group.from_env(getattr(args, "sharding", "auto"))
    if group is not None:
        values = [str(getattr(args, name, None)) for name in SHARED_FLAGS]
        every = [text.split("|") for text in group.gather_text("|".join(values))]
        for rank, theirs in enumerate(every[1:], 1):
            off = [f"{flag} {b} (rank 0: {a})" for flag, a, b in zip(SHARED_FLAGS.values(), every[0], theirs) if a != b]
            if off:
                raise SystemExit(f"rank {rank} of the group was started with {', '.join(off)}: every rank must be "
                                 f"started with the same {', '.join(SHARED_FLAGS.values())}")
    return group
