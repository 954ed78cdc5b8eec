"""A GGUF file (Ollama, llama.cpp, LM Studio) converted once into an mlx-lm model directory, then served like
any other.

Rules, checked on the header before a weight is read, each refusal naming what it refuses:

- architectures: those ``gguf_arch`` maps to an mlx-lm class (Llama/Mistral, Qwen2/3, their MoE variants,
  Phi-3, Gemma 2/3, DeepSeek-V2), each file checked for what its class cannot compute;
- tensor storage: F32/F16/BF16 and every quantized type the ``gguf`` package dequantizes (``gguf_tensors``
  says how each becomes MLX arrays); a type it cannot read is refused by name, never guessed;
- the tokenizer is rebuilt from the metadata (``gguf_tokenizer``), the chat template is the metadata's
  ``tokenizer.chat_template`` or the one the caller supplies (an Ollama manifest's); without either the file
  is refused: a guessed template is a wrong model.

Three forms: ``quantized`` (Q4_0/Q4_1/Q8_0 as shipped, other types requantized to MLX's affine 4/8 bits),
``float16`` and ``float32`` (dequantized: on Linux mlx's CPU backend runs float32 matrix products on
OpenBLAS, while its quantized kernels have no fast path). ``preferred_form()`` says which this platform runs
faster (``tools/bench_gguf_forms.py`` measures it), within a memory bound. The directory is cached under
``<cache>/gguf/<name>-<digest>-<form>`` (``cache_root()``), written to a temporary directory and renamed into
place, so a second start (or a second process) reuses it; the conversions are bounded on disk, least recently
used first, and those of an earlier converter version removed (``conversions``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import conversions
from .cache_dir import cache_root
from .gguf_arch import (ARCHITECTURES, AUXILIARY, UnfittedRope, UnmappedTensor, adjuster, arch_config, arch_refusal,
                        requantizable, widened)
from .gguf_arch import mlx_name as arch_mlx_name
from .gguf_header import GGUFError, read_header
from .gguf_tensors import FLOATS, GROUP_SIZE, ShardWriter, convert_tensors, dequantizable, floats
from .gguf_tokenizer import UnsupportedTokenizer, build_tokenizer
from .weights_digest import file_digest

log = logging.getLogger("tinytitan.gguf")

CONVERTER_VERSION = 4  # part of the cache key: a converter change converts again
FORMS = ("quantized", "float16", "float32")


class UnsupportedGGUF(ValueError):
    """A GGUF this converter refuses; the message names what and lists what is supported."""


def preferred_form(path: Path | None = None) -> str:
    """float32 where mlx runs on the CPU (Linux: float32 goes to OpenBLAS, 4-bit to mlx's own slow kernels),
    unless the float32 weights would take more than a quarter of this machine's memory; quantized where
    there is a GPU (Metal), whose quantized kernels are fast and whose memory is the limit."""
    import mlx.core as mx

    if getattr(mx, "metal", None) and mx.metal.is_available():
        return "quantized"
    if path is not None:
        need, have = float32_bytes(path), physical_memory()
        if have and need > have // 4:
            log.info("%s: float32 would need %.1f GB of this machine's %.1f GB: kept quantized", path.name,
                     need / 1e9, have / 1e9)
            return "quantized"
    return "float32"


def float32_bytes(path: Path) -> int:
    _, tensors = read_header(path)
    total = 0
    for t in tensors:
        n = 1
        for d in t.shape:
            n *= d
        total += 4 * n
    return total


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def mlx_name(gguf_name: str, arch: str = "llama") -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    try:
        return arch_mlx_name(arch, gguf_name)
    except UnmappedTensor as exc:
        raise UnsupportedGGUF(str(exc)) from None


def check(path: Path, template: str | None = None) -> dict:
    """Read the header and refuse, by name, what cannot be converted faithfully; returns the metadata.
    ``template``: the chat template to use where the file has none."""
    try:
        meta, tensors = read_header(path)
    except (GGUFError, OSError) as exc:
        raise UnsupportedGGUF(str(exc)) from None
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise UnsupportedGGUF(f"{path.name}: architecture {arch!r} is not supported (supported: "
                              f"{', '.join(ARCHITECTURES)})")
    readable = FLOATS | dequantizable()
    bad = sorted({t.type for t in tensors} - readable)
    if bad:
        first = next(t.name for t in tensors if t.type == bad[0])
        raise UnsupportedGGUF(f"{path.name}: quantization {', '.join(bad)} (e.g. {first}) is not supported: the "
                              f"gguf package cannot dequantize it (supported: {', '.join(sorted(readable))})")
    refusal = arch_refusal(arch, meta, {t.name for t in tensors})  # (before an unknown tensor's own refusal)
    if refusal:
        raise UnsupportedGGUF(f"{path.name}: {refusal}")
    for t in tensors:
        if t.name not in AUXILIARY:
            mlx_name(t.name, arch)
    if not meta.get("tokenizer.chat_template") and not template:
        raise UnsupportedGGUF(f"{path.name} has no chat template (tokenizer.chat_template): it cannot be "
                              "served as a chat model")
    if meta.get("tokenizer.ggml.model") not in ("gpt2", "llama"):
        raise UnsupportedGGUF(f"{path.name}: tokenizer.ggml.model {meta.get('tokenizer.ggml.model')!r} is not "
                              "supported: byte-level BPE ('gpt2') and SentencePiece ('llama') are rebuilt from "
                              "a GGUF")
    return meta


def cached_dir(path: Path, form: str, template: str | None = None) -> Path:
    """Where ``path`` converted to ``form`` lives (whether or not it is there yet); a template supplied from
    outside the file is part of the key."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}: one of {', '.join(FORMS)}")
    digest = file_digest(path)[:16]
    if template:
        digest += "-t" + hashlib.sha256(template.encode()).hexdigest()[:8]
    stem = re.sub(r"[^\w.-]", "_", path.stem)
    return cache_root() / "gguf" / f"{stem}-{digest}-v{CONVERTER_VERSION}-{form}"


def ensure_converted(path: str | Path, form: str | None = None, template: str | None = None) -> Path:
    """The mlx-lm directory for a GGUF file, converting it the first time (UnsupportedGGUF if it cannot).
    ``template``: the chat template to use where the file carries none (an Ollama manifest's)."""
    path = Path(path)
    try:
        form = form or preferred_form(path)  # (reads the header: a damaged file is refused here, by name)
    except (GGUFError, OSError) as exc:
        raise UnsupportedGGUF(str(exc)) from None
    target = cached_dir(path, form, template)
    if (target / "config.json").is_file():
        log.info("%s: using the converted model in %s", path.name, target)
        conversions.used(target, CONVERTER_VERSION)
        return target
    meta = check(path, template)  # refused before anything is written
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        t0 = time.perf_counter()
        log.info("converting %s (%.0f MB) to an MLX model (%s) in %s …", path.name, path.stat().st_size / 1e6,
                 form, target)
        try:
            convert(path, tmp, form, meta, template)
        except (UnsupportedGGUF, OSError, MemoryError):
            raise  # (said already; or the disk, full or unwritable, or memory: not the file's fault)
        except Exception as exc:  # metadata the header reader accepts but nothing can build a model from
            # (a zero head count, a merge naming a token the vocabulary lacks …): the file, named, not a traceback
            raise UnsupportedGGUF(f"{path.name}: damaged or inconsistent GGUF metadata "
                                  f"({type(exc).__name__}: {exc})") from None
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
        log.info("converted %s in %.1fs", path.name, time.perf_counter() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    conversions.used(target, CONVERTER_VERSION)  # stale versions go, the rest kept within their budget
    return target


def convert(path: Path, out: Path, form: str = "quantized", meta: dict | None = None,
            template: str | None = None) -> None:
    """Write the mlx-lm model directory for ``path`` into ``out`` (``meta``: what ``check`` read of it, when the
    caller already has it), one tensor at a time."""
    import numpy as np

    meta = meta or check(path, template)
    arch = meta["general.architecture"]
    full, tensors = read_header(path, keep_arrays=True)
    try:
        tok, specials = build_tokenizer(full)
    except UnsupportedTokenizer as exc:
        raise UnsupportedGGUF(f"{path.name}: {exc}") from None
    names = {t.name for t in tensors}
    data = np.memmap(path, dtype=np.uint8, mode="r")
    aux = {t.name: np.array(floats(data, t)) for t in tensors if t.name in AUXILIARY}  # into the config
    weights = [t for t in tensors if t.name not in AUXILIARY]
    try:
        config = arch_config(arch, meta, len(full["tokenizer.ggml.tokens"]), "output.weight" in names,
                             "blk.0.attn_q.bias" in names, aux)
    except UnfittedRope as exc:
        raise UnsupportedGGUF(f"{path.name}: {exc}") from None
    said = meta.get(f"{arch}.context_length")
    if said is None or said != config["max_position_embeddings"]:  # (missing, 0: gguf_rope.trained_context)
        log.warning("%s: %s.context_length is %s: a context window of %d tokens is assumed (the file does not say "
                    "the context it was trained for)", path.name, arch, "missing" if said is None else said,
                    config["max_position_embeddings"])

    def rename(name: str) -> str:
        return mlx_name(name, arch)

    shards, bits = ShardWriter(out), {}
    adjust = adjuster(arch, {rename(t.name) for t in weights})
    try:
        for module, arrays in convert_tensors(path, weights, form, rename, adjust, widen=widened(arch),
                                              requantize=requantizable(arch)):
            for suffix, a in arrays.items():
                shards.add(f"{module}.{suffix}", a)
            if "scales" in arrays:
                bits[module] = arrays["weight"].shape[-1] * 32 // (arrays["scales"].shape[-1] * GROUP_SIZE)
    except UnmappedTensor as exc:  # (tensors joined while converting: DeepSeek's k_b / v_b)
        raise UnsupportedGGUF(f"{path.name}: {exc}") from None
    shards.close()
    if bits:
        common = max(set(bits.values()), key=list(bits.values()).count)
        q = {"group_size": GROUP_SIZE, "bits": common}
        q.update({m: {"group_size": GROUP_SIZE, "bits": b} for m, b in sorted(bits.items()) if b != common})
        config["quantization"] = config["quantization_config"] = q
    if form == "float16":
        config["torch_dtype"] = "float16"
    try:
        tok.save(str(out / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception for a failed write (a full disk): the disk's
        raise OSError(f"cannot write {out / 'tokenizer.json'}: {exc}") from exc
    _write(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": meta.get("tokenizer.chat_template") or template,
        "bos_token": specials["bos"], "eos_token": specials["eos"], "pad_token": specials["padding"],
        "unk_token": specials["unknown"], "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
    })
    _write(out / "generation_config.json", {"eos_token_id": config["eos_token_id"],
                                            "bos_token_id": config.get("bos_token_id")})
    _write(out / "gguf_source.json", source_facts(path, meta, form, shards.total))
    _write(out / "config.json", config)


def source_facts(path: Path, meta: dict, form: str, resident_bytes: int) -> dict:
    """What a model listing says about the file: its digest, size, parameter count, quantization."""
    from .gguf_facts import file_type_name, parameter_count

    _, tensors = read_header(path)
    return {"file": path.name, "form": form, "architecture": meta["general.architecture"],
            "name": meta.get("general.name"), "file_type": meta.get("general.file_type"),
            "quantization": file_type_name(meta.get("general.file_type"), tensors),
            "parameters": parameter_count(tensors), "size": path.stat().st_size,
            "digest": "sha256:" + file_digest(path), "weights_bytes": resident_bytes}


def _write(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """``python -m tinytitan.models.gguf FILE [FORM]``: convert (or find) and print the directory."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = sys.argv[1:] if argv is None else argv
    print(ensure_converted(args[0], args[1] if len(args) > 1 else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
