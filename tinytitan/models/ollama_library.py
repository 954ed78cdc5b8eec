"""Ollama's model library on disk (``~/.ollama/models``, or ``$OLLAMA_MODELS``), served as it stands.

Layout (Ollama's ``server/manifest.go``, ``types/model/name.go``):
- ``manifests/<host>/<namespace>/<model>/<tag>``: a JSON manifest; ``config`` and each of ``layers`` name a
  blob by digest, size and media type;
- ``blobs/sha256-<hex>``: the blobs. ``application/vnd.ollama.image.model`` is the GGUF,
  ``….template`` a Go template, ``….params`` JSON parameters (``stop``, ``num_ctx``, ``temperature`` …),
  ``….system`` the default system prompt; the config blob says format, family, parameter size, file type.

Rules:
- a model is named as ``ollama list`` names it: ``model:tag`` on Ollama's registry and ``library``
  namespace, ``namespace/model:tag`` in another namespace, ``host/namespace/model:tag`` on another host;
- its digest is the SHA-256 of the manifest file, its size the sum of the manifest's blob sizes, its
  modification time the manifest's (what ``/api/tags`` shows, as Ollama computes them);
- the GGUF's own chat template is used; where it has none, the manifest's Go template translated
  (``go_template``), refused by name where it cannot be; a LoRA adapter or a vision projector is refused;
  ``….prompt`` is the older media type of a template;
- the parameters become the model's defaults: ``num_ctx`` its context window (``generation_config.json``'s
  ``context_window``; the config's ``max_position_embeddings`` stays as trained: RoPE scaling reads it); a
  ``stop`` word that is one token of the vocabulary ends generation whatever the request says (as the GGUF's
  end-of-turn tokens do), longer ones are its default stop strings (``generation_config.json``'s ``stop_strings``), which a
  request's own ``stop`` replaces (Ollama's request options replace the Modelfile's);
  ``temperature``/``top_p``/``top_k``/``repeat_penalty``/``min_p`` its sampling defaults;
- the ``system`` layer is the model's default system prompt (``generation_config.json``'s
  ``system_prompt``): first in a conversation that does not open with a system message, on every protocol
  (Ollama's chat and generate do the same; a request's own system message, or ``system``, wins);
- the ``messages`` layer (the Modelfile's ``MESSAGE`` lines) is the model's own turns, after the leading
  system message and before the conversation's (where Ollama's generate puts them; its chat puts them
  before a request's own system message, which would make it a mid-conversation one).
  A served model is a directory of links to the converted weights (``<cache>/ollama/…``) with these files
  rewritten, and ``ollama.json`` holding what the listing shows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("tinytitan.models")

DEFAULT_HOST, DEFAULT_NAMESPACE = "registry.ollama.ai", "library"
MEDIA = "application/vnd.ollama.image."
LAYOUT = "v4"  # what a served directory holds; a new layout is written beside an older one
SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
            "repeat_penalty": "repetition_penalty"}


# the layers Ollama's own loader reads (server/images.go GetModel): a missing blob of one fails the model there
READ_LAYERS = ("model", "adapter", "projector", "prompt", "template", "system", "params", "messages", "license")


class OllamaModelRefused(ValueError):
    pass


def default_root() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


def is_library(root: Path) -> bool:
    return (root / "manifests").is_dir() and (root / "blobs").is_dir()


def display_name(host: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's ``DisplayShortest``: the default host and namespace left out, the tag always kept."""
    if host.lower() != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace.lower() != DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


@dataclass
class OllamaModel:
    name: str
    manifest: Path
    digest: str  # hex SHA-256 of the manifest file
    size: int
    modified: float
    blobs: dict[str, Path] = field(default_factory=dict)  # media type suffix -> blob
    config: dict = field(default_factory=dict)

    @property
    def gguf(self) -> Path:
        return self.blobs["model"]

    def text(self, kind: str) -> str | None:
        return self.blobs[kind].read_text(encoding="utf-8") if kind in self.blobs else None

    def params(self) -> dict:
        raw = self.text("params")
        params = json.loads(raw) if raw else {}
        if not isinstance(params, dict):
            raise ValueError("the parameters are not a JSON object")
        return params

    def messages(self) -> list[dict]:
        """The Modelfile's ``MESSAGE`` turns (a JSON list of Ollama messages), as role and text."""
        raw = self.text("messages")
        turns = json.loads(raw) if raw else []
        return [{"role": t["role"], "content": t.get("content") or ""} for t in turns
                if isinstance(t, dict) and t.get("role") in ("system", "user", "assistant")]


def blob_path(root: Path, digest: str) -> Path:
    return root / "blobs" / digest.replace(":", "-")


def manifests(root: Path) -> list[OllamaModel]:
    """Every model the library holds, sorted by name; a manifest that cannot be read is skipped with a
    warning (as Ollama skips it)."""
    out = []
    base = root / "manifests"
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        parts = path.relative_to(base).parts
        if len(parts) != 4:
            continue
        try:
            raw = path.read_bytes()
            manifest = json.loads(raw)
            layers = manifest.get("layers") or []
            blobs = {}
            for layer in layers:
                media = layer.get("mediaType", "")
                if media.startswith(MEDIA):
                    blobs.setdefault(media[len(MEDIA):], blob_path(root, layer["digest"]))
            config_layer = manifest.get("config") or {}
            config = {}
            if config_layer.get("digest") and blob_path(root, config_layer["digest"]).is_file():
                config = json.loads(blob_path(root, config_layer["digest"]).read_text())
            size = sum(int(layer.get("size") or 0) for layer in [*layers, config_layer])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: not an Ollama manifest this server reads: %s", path, exc)
            continue
        out.append(OllamaModel(display_name(*parts), path, hashlib.sha256(raw).hexdigest(), size,
                               path.stat().st_mtime, blobs, config))
    return sorted(out, key=lambda m: m.name)


def check(model: OllamaModel) -> None:
    if "model" not in model.blobs or not model.gguf.is_file():
        raise OllamaModelRefused(f"{model.name}: the manifest names no model blob on disk")
    for kind, path in model.blobs.items():  # (as Ollama's GetModel fails on a layer it reads; others are left be)
        if kind in READ_LAYERS and not path.is_file():
            raise OllamaModelRefused(f"{model.name}: its {MEDIA}{kind} layer's blob ({path.name}) is not on disk")
    for kind, read in (("params", model.params), ("messages", model.messages)):
        try:
            read()
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise OllamaModelRefused(f"{model.name}: its {MEDIA}{kind} layer is not what Ollama writes: "
                                     f"{exc}") from None
    for kind, what in (("adapter", "a LoRA adapter"), ("projector", "a vision projector")):
        if kind in model.blobs:
            hint = ("; GGUF vision models are not served: serve its MLX or Hugging Face version (mlx-vlm reads "
                    "Gemma 3 and Mistral 3 vision models)") if kind == "projector" else ""
            raise OllamaModelRefused(f"{model.name}: {what} ({MEDIA}{kind}) is not supported{hint}")


def chat_template(model: OllamaModel, gguf_has_template: bool) -> str | None:
    """The template to give the converter: None where the GGUF has its own, else the manifest's translated."""
    from .go_template import Untranslatable, translate

    if gguf_has_template:
        return None
    source = model.text("template") or model.text("prompt")  # "prompt": a template's older media type
    if not source:
        raise OllamaModelRefused(f"{model.name}: neither the GGUF nor the manifest has a chat template")
    import jinja2

    try:
        out = translate(source)
        jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(out)  # refused here, not at each request
        return out
    except (Untranslatable, jinja2.TemplateSyntaxError) as exc:
        raise OllamaModelRefused(f"{model.name}: its Ollama template cannot be translated to Jinja: {exc}") from None


def served_dir(model: OllamaModel, converted: Path, cache: Path) -> Path:
    """A directory of links to ``converted`` with the manifest's parameters as the model's defaults, and
    ``ollama.json`` with what the listing shows; rewritten whenever the manifest changes."""
    stem = re.sub(r"[^\w.-]", "_", model.name)
    out = cache / "ollama" / f"{stem}-{model.digest[:12]}-{converted.name[-24:]}-{LAYOUT}"
    if (out / "ollama.json").is_file():
        return out
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    rewritten = {"config.json", "generation_config.json", "tokenizer_config.json", "ollama.json"}
    for f in converted.iterdir():
        if f.name not in rewritten and not (tmp / f.name).exists():
            (tmp / f.name).symlink_to(f.resolve())
    params = model.params()
    config = json.loads((converted / "config.json").read_text())
    gen = json.loads((converted / "generation_config.json").read_text())
    tok_config = json.loads((converted / "tokenizer_config.json").read_text())
    if params.get("num_ctx"):
        # the served context window (tinytitan's key, read by the backend); the model's own
        # max_position_embeddings stays as trained: mlx-lm's long-RoPE scaling reads it
        gen["context_window"] = tok_config["model_max_length"] = int(params["num_ctx"])
    stops = params.get("stop") or []
    vocab = _vocab(converted)
    eos = list(config.get("eos_token_id") or [])
    strings = []
    for stop in stops if isinstance(stops, list) else [stops]:
        if not isinstance(stop, str) or not stop:
            continue
        if stop in vocab:  # one token: it ends generation as the GGUF's end-of-turn tokens do, whatever the request
            if vocab[stop] not in eos:
                eos.append(vocab[stop])
        elif stop not in strings:  # text: the model's default stop strings, replaced by a request's own
            strings.append(stop)
    config["eos_token_id"] = gen["eos_token_id"] = eos
    if strings:
        gen["stop_strings"] = strings
    gen.update({hf: params[k] for k, hf in SAMPLING.items() if k in params})
    system = model.text("system")
    if system:
        gen["system_prompt"] = system
    history = model.messages()
    if history:
        gen["default_messages"] = history
    facts = {"name": model.name, "digest": model.digest, "size": model.size, "modified_at": model.modified,
             "details": {"format": model.config.get("model_format") or "gguf",
                         "family": model.config.get("model_family") or "",
                         "families": model.config.get("model_families") or [],
                         "parameter_size": model.config.get("model_type") or "",
                         "quantization_level": model.config.get("file_type") or ""},
             "params": params, "system": system}
    for name, obj in (("config.json", config), ("generation_config.json", gen),
                      ("tokenizer_config.json", tok_config), ("ollama.json", facts)):
        (tmp / name).write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        os.replace(tmp, out)
    except OSError:  # another process made it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _vocab(converted: Path) -> dict[str, int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(converted / "tokenizer.json")).get_vocab(with_added_tokens=True)
