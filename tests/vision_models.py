"""Tiny random-weight vision models of the families served, built from their configs (for tests/test_vision.py).

``build_mistral3(path)``: a Mistral 3 (Mistral Small 3.1 / Devstral Small 2 architecture: a Pixtral vision tower,
a patch merger, a Mistral language model) with Mistral Small 3.1's processor configuration (its
preprocessor_config.json and processor_config.json values: longest edge 1540, 14-pixel patches merged 2×2, CLIP's
mean and std) and its chat template's handling of system, user (text and image blocks) and assistant turns
(tests/data/mistral3_template.jinja: Mistral Small 3.1's, its tool parts and long default system prompt left out). The tokenizer is the demo model's byte-level BPE with Mistral's control tokens; the
weights are mlx-vlm's own initialisation from a fixed seed.

``build_qwen2_5_vl(path)``: a Qwen2.5-VL (its window-attention vision tower, M-RoPE language model) with
Qwen2.5-VL's preprocessor configuration (14-pixel patches merged 2×2, min and max pixels, CLIP's mean and std)
and its chat template word for word (tests/data/qwen2_5_vl_template.jinja, its chat_template.json).
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
           "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]
TEMPLATE = Path(__file__).parent / "data" / "mistral3_template.jinja"


def _write(out: Path, name: str, obj) -> None:
    (out / name).write_text(json.dumps(obj, indent=1))


def _tokenizer(out: Path, seed: int, special: list[str], template: Path, **config) -> dict[str, int]:
    """The demo model's byte-level BPE (1,024 ids, trained on the generated corpus) with a family's control tokens,
    and its tokenizer_config.json (the family's template, ``config`` on top); the control tokens' ids."""
    from tinytitan.demo_model.corpus import _Gen
    from tinytitan.demo_model.tokenizer import _train_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(1024, _Gen(seed, 200).corpus(60_000), special=special, added=[])
    tok.save(str(out / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in special}
    _write(out, "tokenizer_config.json", {
        **config, "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template.read_text(),
        "added_tokens_decoder": {str(ids[t]): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                               "normalized": False, "single_word": False} for t in special}})
    return ids


def _save_weights(model, out: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())),
                        metadata={"format": "mlx"})


def build_mistral3(out: Path) -> Path:
    import mlx.core as mx
    from mlx_vlm.models.mistral3 import Model, ModelConfig
    from mlx_vlm.models.mistral3.config import TextConfig
    from mlx_vlm.models.pixtral import VisionConfig

    ids = _tokenizer(out, 7, SPECIAL, TEMPLATE, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                     pad_token="<pad>", add_bos_token=False)

    def write(name, obj):
        _write(out, name, obj)

    write("processor_config.json", {"image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]",
                                    "image_token": "[IMG]", "patch_size": 14, "processor_class": "PixtralProcessor",
                                    "spatial_merge_size": 2})
    write("preprocessor_config.json", {
        "crop_size": None, "data_format": "channels_first", "do_center_crop": None, "do_convert_rgb": True,
        "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_processor_type": "PixtralImageProcessor", "image_std": [0.26862954, 0.26130258, 0.27577711],
        "patch_size": 14, "processor_class": "PixtralProcessor", "resample": 3,
        "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 1540}})
    config = {
        "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
        "image_token_index": ids["[IMG]"], "multimodal_projector_bias": False, "projector_hidden_act": "gelu",
        "spatial_merge_size": 2, "vision_feature_layer": -1, "eos_token_id": ids["</s>"],
        "text_config": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5,
                        "rope_theta": 1000000000.0, "max_position_embeddings": 32768, "vocab_size": 1024,
                        "sliding_window": None, "tie_word_embeddings": False},
        "vision_config": {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "head_dim": 16, "patch_size": 14, "image_size": 1540,
                          "num_channels": 3, "rope_theta": 10000.0}}
    write("config.json", config)
    model_config = ModelConfig.from_dict(config)
    model_config.text_config = TextConfig.from_dict(config["text_config"])
    model_config.vision_config = VisionConfig.from_dict(config["vision_config"])
    mx.random.seed(3)
    _save_weights(Model(model_config), out)
    return out


QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                "<|video_pad|>"]
QWEN_TEMPLATE = Path(__file__).parent / "data" / "qwen2_5_vl_template.jinja"


def build_qwen2_5_vl(out: Path) -> Path:
    import mlx.core as mx
    from mlx_vlm.models.qwen2_5_vl import Model, ModelConfig
    from mlx_vlm.models.qwen2_5_vl.config import TextConfig, VisionConfig

    ids = _tokenizer(out, 11, QWEN_SPECIAL, QWEN_TEMPLATE, bos_token=None, eos_token="<|im_end|>",
                     pad_token="<|endoftext|>", unk_token=None)

    def write(name, obj):
        _write(out, name, obj)

    write("preprocessor_config.json", {
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"})
    config = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "vocab_size": 1024, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "tie_word_embeddings": True, "eos_token_id": ids["<|im_end|>"],
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
        "vision_config": {"model_type": "qwen2_5_vl", "depth": 2, "hidden_size": 32, "intermediate_size": 64,
                          "out_hidden_size": 64, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2,
                          "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [1],
                          "in_chans": 3, "tokens_per_second": 2}}
    write("config.json", config)
    model_config = ModelConfig.from_dict(dict(config))
    model_config.text_config = TextConfig.from_dict(model_config.text_config)
    model_config.vision_config = VisionConfig.from_dict(config["vision_config"])
    mx.random.seed(5)
    _save_weights(Model(model_config), out)
    return out


def build_qwen3_vl(out: Path, moe: bool = False) -> Path:
    """A Qwen3-VL (vision features also added into early decoder layers: deepstack; ``moe``: its mixture-of-experts
    language model, as Qwen3-VL-30B-A3B) with Qwen3-VL's preprocessor configuration (16-pixel patches merged 2×2)
    and Qwen2.5-VL's template (the same image placeholder)."""
    import mlx.core as mx

    if moe:
        from mlx_vlm.models.qwen3_vl_moe import Model, ModelConfig
        from mlx_vlm.models.qwen3_vl_moe.config import TextConfig, VisionConfig
    else:
        from mlx_vlm.models.qwen3_vl import Model, ModelConfig
        from mlx_vlm.models.qwen3_vl.config import TextConfig, VisionConfig

    ids = _tokenizer(out, 13, QWEN_SPECIAL, QWEN_TEMPLATE, bos_token=None, eos_token="<|im_end|>",
                     pad_token="<|endoftext|>", unk_token=None)
    _write(out, "preprocessor_config.json", {
        "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": "Qwen3VLProcessor"})
    text = {"model_type": "qwen3_vl_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6,
            "vocab_size": 1024, "max_position_embeddings": 32768, "rope_theta": 5000000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True},
            "tie_word_embeddings": True}
    if moe:
        text.update(model_type="qwen3_vl_moe_text", num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                    mlp_only_layers=[], moe_intermediate_size=32, norm_topk_prob=True,
                    tie_word_embeddings=False)  # as Qwen3-VL-30B-A3B
    config = {"architectures": ["Qwen3VLForConditionalGeneration"],
              "model_type": "qwen3_vl_moe" if moe else "qwen3_vl",
              "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
              "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
              "eos_token_id": ids["<|im_end|>"], "tie_word_embeddings": text["tie_word_embeddings"],
              "text_config": text,
              "vision_config": {"model_type": "qwen3_vl_moe" if moe else "qwen3_vl", "depth": 2, "hidden_size": 32,
                                "intermediate_size": 64,
                                "out_hidden_size": 64, "num_heads": 2, "patch_size": 16, "spatial_merge_size": 2,
                                "temporal_patch_size": 2, "num_position_embeddings": 64, "in_channels": 3,
                                "deepstack_visual_indexes": [0]}}
    _write(out, "config.json", config)
    model_config = ModelConfig.from_dict(dict(config))
    model_config.text_config = TextConfig.from_dict(text)
    model_config.vision_config = VisionConfig.from_dict(config["vision_config"])
    mx.random.seed(9)
    _save_weights(Model(model_config), out)
    return out


def build_qwen3_vl_moe(out: Path) -> Path:
    return build_qwen3_vl(out, moe=True)
