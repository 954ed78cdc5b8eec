"""A GGUF file (Ollama, llama.cpp) converted once into an mlx-lm model directory, then served like any other.

Rules, checked on the header before a weight is read, each refusal naming what it refuses:

- architectures: ``llama`` (Llama, Mistral, SmolLM …), ``qwen2``, ``qwen3`` (dense; no experts);
- tensor storage: Q4_0, Q4_1 and Q8_0, which MLX loads in its own affine layout (group size 32, bits per tensor
  read off the packed width), kept quantized; F32/F16/BF16 as they are. Every other type (the K-quants, the
  IQ types …) is refused: MLX would silently widen them to floats;
- the tokenizer is byte-level BPE rebuilt from the metadata (``gguf_tokenizer``), the chat template is the
  metadata's ``tokenizer.chat_template`` (a GGUF without one is refused: a guessed template is a wrong model).

GGUF stores a Llama's Q/K rows permuted for the interleaved RoPE, so a Llama config says
``rope_traditional: true``; Qwen GGUFs use the split-half RoPE and are not permuted.

Two forms: ``quantized`` (as shipped) and ``float32`` (dequantized: on Linux mlx's CPU backend runs float32
matrix products on OpenBLAS, while its quantized kernels have no fast path). ``preferred_form()`` says which
this platform runs faster (``tools/bench_gguf_forms.py`` measures it), within a memory bound. The directory is cached under
``<cache>/gguf/<name>-<digest>-<form>`` (``cache_root()``), written to a temporary directory and renamed into
place, so a second start (or a second process) reuses it.
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

from .gguf_header import GGUFError, read_header
from .gguf_tokenizer import UnsupportedTokenizer, build_tokenizer

log = logging.getLogger("tinytitan.gguf")

CONVERTER_VERSION = 1  # part of the cache key: a converter change converts again
QUANTIZED = {"Q4_0", "Q4_1", "Q8_0"}
FLOATS = {"F32", "F16", "BF16"}
GROUP_SIZE = 32  # the block size of Q4_0, Q4_1, Q8_0
FORMS = ("quantized", "float32")

# architecture -> (mlx-lm model_type, rope_traditional)
ARCHITECTURES = {"llama": ("llama", True), "qwen2": ("qwen2", False), "qwen3": ("qwen3", False)}

_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_SUFFIXES = ("weight", "bias", "scales", "biases")


class UnsupportedGGUF(ValueError):
    """A GGUF this converter refuses; the message names what and lists what is supported."""


def cache_root() -> Path:
    """``$TINYTITAN_CACHE``, else ``$XDG_CACHE_HOME/tinytitan``, else ``~/.cache/tinytitan``."""
    if os.environ.get("TINYTITAN_CACHE"):
        return Path(os.environ["TINYTITAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tinytitan"


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


def mlx_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    base, _, suffix = gguf_name.rpartition(".")
    if suffix not in _SUFFIXES:
        raise UnsupportedGGUF(f"tensor {gguf_name} is not supported")
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", base)
    if m and m.group(2) in _LAYER:
        return f"model.layers.{m.group(1)}.{_LAYER[m.group(2)]}.{suffix}"
    if base in _TOP:
        return f"{_TOP[base]}.{suffix}"
    raise UnsupportedGGUF(f"tensor {gguf_name} is not supported (a dense Llama/Qwen2/Qwen3 layer has "
                          f"{', '.join(sorted(_LAYER))})")


def check(path: Path) -> dict:
    """Read the header and refuse, by name, what cannot be converted faithfully; returns the metadata."""
    try:
        meta, tensors = read_header(path)
    except (GGUFError, OSError) as exc:
        raise UnsupportedGGUF(str(exc)) from None
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise UnsupportedGGUF(f"{path.name}: architecture {arch!r} is not supported (supported: "
                              f"{', '.join(ARCHITECTURES)})")
    bad = sorted({t.type for t in tensors} - QUANTIZED - FLOATS)
    if bad:
        first = next(t.name for t in tensors if t.type == bad[0])
        raise UnsupportedGGUF(f"{path.name}: quantization {', '.join(bad)} (e.g. {first}) is not supported; "
                              f"supported: {', '.join(sorted(QUANTIZED))} (kept quantized) and "
                              f"{', '.join(sorted(FLOATS))}")
    for t in tensors:
        if t.name == "rope_freqs.weight":
            raise UnsupportedGGUF(f"{path.name}: rope_freqs (Llama 3.1-style RoPE scaling) is not supported")
        mlx_name(t.name)
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none", "linear"):
        raise UnsupportedGGUF(f"{path.name}: RoPE scaling {scaling!r} is not supported (none, linear are)")
    if not meta.get("tokenizer.chat_template"):
        raise UnsupportedGGUF(f"{path.name} has no chat template (tokenizer.chat_template): it cannot be "
                              "served as a chat model")
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise UnsupportedGGUF(f"{path.name}: tokenizer.ggml.model {meta.get('tokenizer.ggml.model')!r} is not "
                              "supported: only byte-level BPE ('gpt2') is rebuilt from a GGUF")
    return meta


def file_digest(path: Path) -> str:
    """The file's SHA-256, remembered per (path, size, mtime) in ``<cache>/gguf/digests.json`` so a second
    start does not read a multi-gigabyte file again."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    memo_path = cache_root() / "gguf" / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if key in memo:
        return memo[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    memo[key] = h.hexdigest()
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_name(f".digests.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo, indent=0))
        os.replace(tmp, memo_path)
    except OSError:
        pass  # a read-only cache: the digest is computed again next time
    return memo[key]


def cached_dir(path: Path, form: str) -> Path:
    """Where ``path`` converted to ``form`` lives (whether or not it is there yet)."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}: one of {', '.join(FORMS)}")
    digest = file_digest(path)[:16]
    stem = re.sub(r"[^\w.-]", "_", path.stem)
    return cache_root() / "gguf" / f"{stem}-{digest}-v{CONVERTER_VERSION}-{form}"


def ensure_converted(path: str | Path, form: str | None = None) -> Path:
    """The mlx-lm directory for a GGUF file, converting it the first time (UnsupportedGGUF if it cannot)."""
    path = Path(path)
    form = form or preferred_form(path)
    target = cached_dir(path, form)
    if (target / "config.json").is_file():
        log.info("%s: using the converted model in %s", path.name, target)
        return target
    meta = check(path)  # refused before anything is written
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        t0 = time.perf_counter()
        log.info("converting %s (%.0f MB) to an MLX model (%s) in %s …", path.name, path.stat().st_size / 1e6,
                 form, target)
        convert(path, tmp, form, meta)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
        log.info("converted %s in %.1fs", path.name, time.perf_counter() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def convert(path: Path, out: Path, form: str = "quantized", meta: dict | None = None) -> None:
    """Write the mlx-lm model directory for ``path`` into ``out`` (``meta``: what ``check`` read of it, when the
    caller already has it)."""
    import mlx.core as mx

    meta = meta or check(path)
    arch = meta["general.architecture"]
    weights, full = mx.load(str(path), return_metadata=True)
    log.info("converting: read %d tensors", len(weights))
    try:
        tok, specials = build_tokenizer(full)
    except UnsupportedTokenizer as exc:
        raise UnsupportedGGUF(f"{path.name}: {exc}") from None
    renamed = {mlx_name(k): v for k, v in weights.items()}
    bits = _bits(renamed)
    if form == "float32":
        renamed = _dequantized(renamed, bits)
        bits = {}
    config = _config(meta, arch, full, renamed, bits)
    log.info("converting: writing weights")
    mx.save_safetensors(str(out / "model.safetensors"), renamed, metadata={"format": "mlx"})
    tok.save(str(out / "tokenizer.json"))
    eos_ids = config["eos_token_id"]
    _write(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": meta["tokenizer.chat_template"],
        "bos_token": specials["bos"], "eos_token": specials["eos"], "pad_token": specials["padding"],
        "unk_token": None, "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
    })
    _write(out / "generation_config.json", {"eos_token_id": eos_ids, "bos_token_id": config.get("bos_token_id")})
    _write(out / "gguf_source.json", {"file": path.name, "form": form, "architecture": arch,
                                      "name": meta.get("general.name"), "file_type": meta.get("general.file_type")})
    _write(out / "config.json", config)


def _bits(weights: dict) -> dict[str, int]:
    """Bits per quantized module, from the packed width: a row of ``in`` values is ``in*bits/32`` uint32 words
    and ``in/32`` groups."""
    bits = {}
    for name, scales in weights.items():
        if not name.endswith(".scales"):
            continue
        module = name[:-len(".scales")]
        packed = weights[f"{module}.weight"].shape[-1]
        b, rem = divmod(packed * 32, scales.shape[-1] * GROUP_SIZE)
        if rem or b not in (4, 8):
            raise UnsupportedGGUF(f"tensor {module}: {b} bits per weight is not a layout MLX loads")
        bits[module] = b
    return bits


def _dequantized(weights: dict, bits: dict[str, int]) -> dict:
    import mlx.core as mx

    out = {}
    for name, w in weights.items():
        module, _, suffix = name.rpartition(".")
        if module in bits:
            if suffix == "weight":
                out[name] = mx.dequantize(w, weights[f"{module}.scales"], weights[f"{module}.biases"],
                                          group_size=GROUP_SIZE, bits=bits[module]).astype(mx.float32)
            continue  # scales, biases: folded into the weight
        out[name] = w.astype(mx.float32)
    mx.eval(out)
    return out


def _config(meta: dict, arch: str, full: dict, weights: dict, bits: dict[str, int]) -> dict:
    def get(key, default=None):
        return meta.get(f"{arch}.{key}", default)

    model_type, traditional = ARCHITECTURES[arch]
    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    tokens = full["tokenizer.ggml.tokens"]
    eos = [int(meta[f"tokenizer.ggml.{k}_token_id"]) for k in ("eos", "eot", "eom")
           if meta.get(f"tokenizer.ggml.{k}_token_id") is not None]
    config = {
        "model_type": model_type,
        "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM"}[arch]],
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "vocab_size": len(tokens),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "rope_traditional": traditional,
        "max_position_embeddings": int(get("context_length", 4096)),
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "attention_bias": "model.layers.0.self_attn.q_proj.bias" in weights,
        "eos_token_id": list(dict.fromkeys(eos)),
        "torch_dtype": "float32",
    }
    if meta.get("tokenizer.ggml.bos_token_id") is not None:
        config["bos_token_id"] = int(meta["tokenizer.ggml.bos_token_id"])
    if get("rope.scaling.type") == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": float(get("rope.scaling.factor", 1.0))}
    if bits:
        common = max(set(bits.values()), key=list(bits.values()).count)
        q = {"group_size": GROUP_SIZE, "bits": common}
        q.update({m: {"group_size": GROUP_SIZE, "bits": b} for m, b in sorted(bits.items()) if b != common})
        config["quantization"] = config["quantization_config"] = q
    return config


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
