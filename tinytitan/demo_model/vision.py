"""``demo-vision``: a tiny Gemma 3 vision model (random weights) built deterministically on this machine.

Gemma 3 is the family whose image tokens take ordinary positions in the text (one rope position each, as any
token), so a request with images decodes in the continuous batch like any other once its prompt is read.
What the directory holds, as a Gemma 3 checkpoint converted for MLX does:

* ``config.json``: ``model_type: gemma3`` with a ``gemma3_text`` text config (hidden 64, 2 layers: one sliding-
  window layer, one global) and a ``siglip_vision_model`` vision config (hidden 32, 1 layer) at Gemma 3's real
  image size (896 pixels, 14-pixel patches, 4,096 patches pooled into 256 image tokens).
* ``preprocessor_config.json`` / ``processor_config.json``: Gemma 3's own values, as google/gemma-3-4b-it ships
  them (896×896, mean and std 0.5, bilinear resampling, 256 tokens per image, no pan-and-scan).
* ``tokenizer.json``: the demo model's byte-level BPE (trained on the same generated corpus) with Gemma 3's special
  tokens (``<bos>``, ``<eos>``, ``<start_of_turn>``, ``<end_of_turn>``, ``<start_of_image>``, ``<end_of_image>``,
  ``<image_soft_token>``); ``tokenizer_config.json`` with Gemma 3's chat template, word for word.
* ``model.safetensors``: float32 weights drawn from a fixed seed under the names mlx-vlm's ``gemma3`` model reads
  (mlx-lm's ``gemma3`` reads the language model's part of the same file).

``ensure_demo_vision()`` builds once into the user cache (``tinytitan/demo-vision-<recipe hash>``), atomically.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path
from typing import Any, Dict

from .cache import _cache_root, install
from .corpus import _Gen
from .weights import write_safetensors

MODEL_ID = "demo-vision"
RECIPE_REVISION = 1
SEED = 20261203

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                  "<end_of_image>", "<image_soft_token>"]
VOCAB_SIZE = 4096
CORPUS = {"chars": 400_000, "pseudo_words": 600}

TEXT_CONFIG = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16,
               "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
               "sliding_window": 1024, "sliding_window_pattern": 2, "max_position_embeddings": 32768,
               "hidden_activation": "gelu_pytorch_tanh", "rope_scaling": None, "vocab_size": VOCAB_SIZE}
VISION_CONFIG = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                 "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": 14, "image_size": 896,
                 "num_channels": 3, "layer_norm_eps": 1e-06, "vision_use_head": False}
MM_TOKENS_PER_IMAGE = 256

# google/gemma-3-4b-it's preprocessor_config.json and processor_config.json
PREPROCESSOR_CONFIG = {
    "do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True, "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": 256,
    "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": None, "pan_and_scan_min_crop_size": None,
    "pan_and_scan_min_ratio_to_activate": None, "processor_class": "Gemma3Processor", "resample": 2,
    "rescale_factor": 0.00392156862745098, "size": {"height": 896, "width": 896},
}
PROCESSOR_CONFIG = {"image_seq_length": 256, "processor_class": "Gemma3Processor"}

# Gemma 3's chat template (google/gemma-3-*-it), word for word
CHAT_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"
)


def recipe_version() -> str:
    """A short hash of everything that decides the built files."""
    recipe = {"revision": RECIPE_REVISION, "seed": SEED, "special": SPECIAL_TOKENS, "vocab": VOCAB_SIZE,
              "corpus": CORPUS, "text": TEXT_CONFIG, "vision": VISION_CONFIG, "mm": MM_TOKENS_PER_IMAGE,
              "pre": PREPROCESSOR_CONFIG, "proc": PROCESSOR_CONFIG, "template": CHAT_TEMPLATE}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def default_demo_vision_dir() -> Path:
    return _cache_root() / f"demo-vision-{recipe_version()}"


def ensure_demo_vision(path=None) -> Path:
    """The demo vision model's directory, built once (atomically) into the user cache."""
    return install(Path(path) if path is not None else default_demo_vision_dir(), build_demo_vision)


def _json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_demo_vision(path) -> Path:
    """Write the demo vision model at ``path``."""
    from .tokenizer import _train_tokenizer

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(VOCAB_SIZE, _Gen(SEED, CORPUS["pseudo_words"]).corpus(CORPUS["chars"]),
                           special=SPECIAL_TOKENS, added=[])
    tok.save(str(out / "tokenizer.json"), pretty=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    _json(out / "tokenizer_config.json", {
        "add_bos_token": False, "add_eos_token": False,
        "added_tokens_decoder": {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                               "single_word": False, "special": True} for t in SPECIAL_TOKENS},
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
        "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                 "image_token": "<image_soft_token>"},
        "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False, "model_max_length": 32768,
        "processor_class": "Gemma3Processor", "spaces_between_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
    _json(out / "special_tokens_map.json", {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                                            "unk_token": "<unk>", "boi_token": "<start_of_image>",
                                            "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"})
    _json(out / "preprocessor_config.json", PREPROCESSOR_CONFIG)
    _json(out / "processor_config.json", PROCESSOR_CONFIG)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    eos = [ids["<eos>"], ids["<end_of_turn>"]]
    _json(out / "config.json", {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "boi_token_index": ids["<start_of_image>"], "eoi_token_index": ids["<end_of_image>"],
        "image_token_index": ids["<image_soft_token>"], "mm_tokens_per_image": MM_TOKENS_PER_IMAGE,
        "eos_token_id": eos, "pad_token_id": ids["<pad>"], "bos_token_id": ids["<bos>"],
        "initializer_range": 0.02, "torch_dtype": "float32", "vocab_size": VOCAB_SIZE, "text_config": TEXT_CONFIG,
        "vision_config": VISION_CONFIG, "tinytitan_demo": {"variant": "vision", "recipe": recipe_version()},
    })
    _json(out / "generation_config.json", {"bos_token_id": ids["<bos>"], "eos_token_id": eos,
                                           "pad_token_id": ids["<pad>"], "do_sample": False})
    _write_weights(out / "model.safetensors")  # last: its presence marks a finished build
    return out


def param_shapes() -> Dict[str, tuple]:
    """The parameters of mlx-vlm's ``gemma3`` model for this config (names and MLX layouts, as a converted
    checkpoint stores them; checked against mlx-vlm in the tests)."""
    t, v = TEXT_CONFIG, VISION_CONFIG
    h, hd, ff, nq, nkv = t["hidden_size"], t["head_dim"], t["intermediate_size"], t["num_attention_heads"], \
        t["num_key_value_heads"]
    vh, vff, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    shapes: Dict[str, tuple] = {"language_model.model.embed_tokens.weight": (VOCAB_SIZE, h),
                                "language_model.model.norm.weight": (h,),
                                "multi_modal_projector.mm_input_projection_weight": (vh, h),
                                "multi_modal_projector.mm_soft_emb_norm.weight": (vh,)}
    for i in range(t["num_hidden_layers"]):
        q = f"language_model.model.layers.{i}."
        shapes.update({q + n: (h,) for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                              "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight")})
        shapes.update({q + "self_attn.q_proj.weight": (nq * hd, h), q + "self_attn.k_proj.weight": (nkv * hd, h),
                       q + "self_attn.v_proj.weight": (nkv * hd, h), q + "self_attn.o_proj.weight": (h, nq * hd),
                       q + "self_attn.q_norm.weight": (hd,), q + "self_attn.k_norm.weight": (hd,),
                       q + "mlp.gate_proj.weight": (ff, h), q + "mlp.up_proj.weight": (ff, h),
                       q + "mlp.down_proj.weight": (h, ff)})
    s = "vision_tower.vision_model."
    shapes.update({s + "embeddings.patch_embedding.weight": (vh, p, p, v["num_channels"]),
                   s + "embeddings.patch_embedding.bias": (vh,),
                   s + "embeddings.position_embedding.weight": ((v["image_size"] // p) ** 2, vh),
                   s + "post_layernorm.weight": (vh,), s + "post_layernorm.bias": (vh,)})
    for i in range(v["num_hidden_layers"]):
        q = f"{s}encoder.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes.update({f"{q}self_attn.{n}.weight": (vh, vh), f"{q}self_attn.{n}.bias": (vh,)})
        shapes.update({q + "mlp.fc1.weight": (vff, vh), q + "mlp.fc1.bias": (vff,), q + "mlp.fc2.weight": (vh, vff),
                       q + "mlp.fc2.bias": (vh,), q + "layer_norm1.weight": (vh,), q + "layer_norm1.bias": (vh,),
                       q + "layer_norm2.weight": (vh,), q + "layer_norm2.bias": (vh,)})
    return shapes


def _init(name: str, shape: tuple):
    """Seeded values: Gemma's RMS norms (which scale by 1 + weight) zeros, layer norms ones, biases zeros,
    embeddings std 0.02, projections std 1/sqrt(fan_in)."""
    import numpy as np

    if len(shape) == 1:
        ones = name.startswith("vision_tower") and "norm" in name and name.endswith("weight")
        return (np.ones if ones else np.zeros)(shape, dtype="<f4")
    fan_in = int(np.prod(shape[1:]))
    std = 0.02 if "embed" in name else fan_in ** -0.5
    rng = np.random.RandomState((SEED + zlib.crc32(name.encode())) % 2**32)
    return ((rng.random_sample(shape) * 2.0 - 1.0) * (std * 3.0**0.5)).astype("<f4")


def _write_weights(path: Path) -> None:
    write_safetensors(path, ((name, _init(name, shape)) for name, shape in sorted(param_shapes().items())))
