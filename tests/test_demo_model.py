"""Tests for tinytitan.demo_model: deterministic build, mlx-lm loading, tokenizer, chat template, generation."""

import hashlib
import json
import socket
import threading

import pytest

from tinytitan import demo_model as dm

SPECIALS = dm.SPECIAL_TOKENS + dm.ADDED_TOKENS


def _hashes(path):
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.iterdir())
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return dm.build_demo_model(tmp_path_factory.mktemp("demo") / "model")


@pytest.fixture(scope="module")
def loaded(built):
    import mlx_lm

    # Loading must not touch the network.
    real_connect = socket.socket.connect

    def no_network(self, *args, **kwargs):
        raise AssertionError(f"network access while loading the demo model: {args}")

    socket.socket.connect = no_network
    try:
        model, tokenizer = mlx_lm.load(str(built))
    finally:
        socket.socket.connect = real_connect
    return model, tokenizer


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "OLD REASONING"},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Lyon?"}]},
    {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning_content": "I should call the tool twice.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"},
    {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rain, 14C"}]},
]


def test_build_is_deterministic(tmp_path):
    a = dm.build_demo_model(tmp_path / "a")
    b = dm.build_demo_model(tmp_path / "b", variant="demo")
    assert a == tmp_path / "a"
    ha, hb = _hashes(a), _hashes(b)
    assert set(ha) >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    }
    assert ha == hb


def test_config(built):
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["model_type"] == "qwen3"
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (64, 2, 4)
    assert (cfg["num_key_value_heads"], cfg["head_dim"], cfg["intermediate_size"]) == (2, 16, 128)
    assert cfg["vocab_size"] == 4096 and cfg["tie_word_embeddings"] is True
    assert cfg["max_position_embeddings"] == 32768 and cfg["rope_theta"] == 1e6
    assert cfg["bos_token_id"] is None


def test_weight_names_match_mlx_lm_qwen3():
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    for variant in dm.VARIANTS:
        m = dm.VARIANTS[variant]["model"]
        args = qwen3.ModelArgs(model_type="qwen3", **m)
        expected = {k: tuple(v.shape) for k, v in tree_flatten(qwen3.Model(args).parameters())}
        assert dm._param_shapes(m) == expected
        mx.clear_cache()
    n50 = sum(int.__mul__(*s) if len(s) == 2 else s[0] for s in dm._param_shapes(dm.VARIANTS["50m"]["model"]).values())
    assert 45e6 < n50 < 55e6


def test_model_ids_and_cache_dir(tmp_path, monkeypatch):
    assert dm.demo_model_id() == "tinytitan-demo"
    assert dm.demo_model_id("50m") == "tinytitan-demo-50m"
    with pytest.raises(ValueError):
        dm.demo_model_id("nope")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    d = dm.default_demo_model_dir()
    assert d.parent == tmp_path / "tinytitan"
    assert d.name == f"demo-model-{dm.recipe_version('demo')}"
    assert dm.default_demo_model_dir("50m").name.startswith("demo-model-50m-")
    assert dm.recipe_version("demo") != dm.recipe_version("50m")


def test_ensure_builds_once_and_races(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    results, errors = [], []

    def worker():
        try:
            results.append(dm.ensure_demo_model())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    target = dm.default_demo_model_dir()
    assert results == [target] * 3
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    assert dm.ensure_demo_model() == target
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp
    # no temporary directories left behind
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_ensure_replaces_incomplete_dir(tmp_path):
    target = tmp_path / "m"
    target.mkdir()
    (target / "junk.txt").write_text("partial")
    assert dm.ensure_demo_model(path=target) == target
    assert (target / "model.safetensors").is_file() and not (target / "junk.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_tokenizer_special_tokens(loaded):
    _, tok = loaded
    assert len(tok) == 4096
    ids = {t: tok.encode(t, add_special_tokens=False) for t in SPECIALS}
    assert all(len(v) == 1 for v in ids.values()), ids
    assert len({v[0] for v in ids.values()}) == len(SPECIALS)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    assert ids["<|im_end|>"][0] in tok.eos_token_ids
    assert tok.has_thinking and tok.think_start == "<think>" and tok.think_end == "</think>"
    assert tok.has_tool_calling and tok.tool_call_start == "<tool_call>" and tok.tool_call_end == "</tool_call>"

    text = (
        '<|im_start|>assistant\n<think>\nhmm</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|><|endoftext|>"
    )
    enc = tok.encode(text, add_special_tokens=False)
    for t in SPECIALS:
        assert ids[t][0] in enc
    assert tok.decode(enc) == text
    # special tokens are skipped, added (non-special) markers survive
    kept = tok.decode(enc, skip_special_tokens=True)
    assert "<|im_start|>" not in kept and "<|im_end|>" not in kept
    assert "<think>" in kept and "</tool_call>" in kept


def test_tokenizer_roundtrip_and_matches_tokenizer_json(loaded, built):
    from tokenizers import Tokenizer

    _, tok = loaded
    raw = Tokenizer.from_file(str(built / "tokenizer.json"))
    for s in [
        "Hello, world! def foo(x):\n    return x + 1  # 42\n\n",
        "unicode: héllo wörld 你好 🙂 \t tabs\r\nend",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        " leading space and trailing  ",
    ]:
        enc = tok.encode(s, add_special_tokens=False)
        assert enc == raw.encode(s, add_special_tokens=False).ids
        assert tok.decode(enc) == s
        # mlx-lm's streaming detokenizer agrees
        detok = tok.detokenizer
        for t in enc:
            detok.add_token(t)
        detok.finalize()
        assert detok.text == s.lstrip(" ") or detok.text == s


def test_chat_template(loaded):
    _, tok = loaded
    out = tok.apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, enable_thinking=False, tokenize=False
    )
    expected = (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(TOOLS[0], ensure_ascii=False)
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWeather in Paris and Lyon?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nI should call the tool twice.\n</think>\n\nLet me check.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny, 21C\n</tool_response>\n"
        "<tool_response>\nrain, 14C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert out == expected
    assert "OLD REASONING" not in out

    # default through the wrapper: thinking on, bare generation prompt
    out2 = tok.apply_chat_template(MESSAGES[:2], add_generation_prompt=True, tokenize=False)
    assert out2 == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    )
    out3 = tok.apply_chat_template(MESSAGES[1:2], add_generation_prompt=False, tokenize=False)
    assert out3 == "<|im_start|>user\nHi there<|im_end|>\n"

    ids = tok.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, enable_thinking=False)
    assert tok.decode(ids) == expected


def test_tool_parser_parses_template_output(loaded):
    _, tok = loaded
    call = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    assert tok.tool_parser(call) == {"name": "get_weather", "arguments": {"city": "Paris"}}


def test_generate_deterministic(loaded):
    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    model, tok = loaded
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Write a haiku about caches."}],
        add_generation_prompt=True,
        enable_thinking=False,
    )

    def run():
        resps = list(mlx_lm.stream_generate(model, tok, prompt, max_tokens=5, sampler=make_sampler(temp=0.0)))
        return [r.token for r in resps], "".join(r.text for r in resps), resps[-1].finish_reason

    a, b = run(), run()
    assert a == b
    assert len(a[0]) == 5 and a[2] == "length"


def test_50m_tokenizer_reaches_vocab_size():
    m = dm.VARIANTS["50m"]["model"]
    assert (m["hidden_size"], m["num_hidden_layers"], m["vocab_size"]) == (512, 8, 32000)
    tok = dm._train_tokenizer(m["vocab_size"], dm.generate_corpus("50m"))
    assert tok.get_vocab_size() == 32000
    assert all(tok.token_to_id(t) is not None for t in SPECIALS)
