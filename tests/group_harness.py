"""A group of two tinytitan processes (or ``ranks``) on one machine (MLX's ring backend on loopback), for the
distributed tests: the ranks started as ``mlx.launch -n 2 --backend ring`` starts them (``MLX_RANK``, and an
``MLX_HOSTFILE`` listing one loopback address per rank), but by the test itself: mlx.launch ends every rank
when one exits, and a test must see rank 0 outlive rank 1. Also each protocol's request and the text its
answer carries (checked strictly against the official SDK models), and the models the tests build."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

import strict
from sse import parse_sse

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tinytitan-demo"
START_S = 120  # loading on two shared cores, with others busy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def qwen2_dir(out: Path, **config) -> tuple[Path, dict]:
    """``out`` made a qwen2 model directory but for its weights: the demo model's tokenizer and template files,
    its config as a qwen2's with ``config``'s changes. → (the demo model's directory, the config written)."""
    import shutil

    from tinytitan.demo_model import ensure_demo_model

    demo = Path(ensure_demo_model())
    out.mkdir(parents=True, exist_ok=True)
    for f in demo.iterdir():
        if f.suffix == ".json" and f.name != "config.json":
            shutil.copy(f, out / f.name)
    written = json.loads((demo / "config.json").read_text())
    written.pop("tinytitan_demo", None)
    written.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], **config)
    (out / "config.json").write_text(json.dumps(written, indent=1))
    return demo, written


def pipeline_model(out: Path) -> Path:
    """A model whose mlx-lm class offers pipeline parallelism (qwen2's ``model.model.pipeline``): the demo
    model's tokenizer, template and weights, as a qwen2 (the demo's qwen3 lacks ``pipeline``): its attention's
    q/k norms dropped, seeded q/k/v biases added, and the weight index ``sharded_load`` splits layers by."""
    import mlx.core as mx

    demo, _ = qwen2_dir(out)
    weights = {k: v for k, v in mx.load(str(demo / "model.safetensors")).items()
               if not k.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight"))}
    key = mx.random.key(21)
    for k in sorted(weights):
        if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            key, sub = mx.random.split(key)
            weights[k.replace(".weight", ".bias")] = 0.02 * mx.random.normal((weights[k].shape[0],), key=sub)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: "model.safetensors" for k in sorted(weights)}}))
    return out


def wide_model(out: Path) -> Path:
    """A qwen2 of four layers whose heads, KV heads and MLP width divide among 2, 3 and 4 ranks (the demo model's
    do not among 3 or 4): either sharding serves it on groups of those sizes. The demo's tokenizer and template;
    seeded weights drawn as the demo's are (embeddings std 0.02, projections 1/sqrt(fan_in), norms ones)."""
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen2

    _, config = qwen2_dir(out, hidden_size=192, head_dim=16, num_attention_heads=12, num_key_value_heads=12,
                          intermediate_size=384, num_hidden_layers=4, max_window_layers=4)
    weights = {}
    for i, (k, v) in enumerate(sorted(tree_flatten(qwen2.Model(qwen2.ModelArgs.from_dict(config)).parameters()))):
        if k.endswith("norm.weight"):
            weights[k] = mx.ones(v.shape)
            continue
        std = v.shape[1] ** -0.5 if v.ndim == 2 and "embed" not in k else 0.02
        uniform = np.random.RandomState(100 + i).random_sample(v.shape) * 2.0 - 1.0
        weights[k] = mx.array((uniform * std * 3.0 ** 0.5).astype("float32"))
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: "model.safetensors" for k in sorted(weights)}}))
    return out


class Group:
    def __init__(self, tmp: Path, *serve: str, rank_args: dict[int, list[str]] | None = None, ranks: int = 2):
        ring = [[f"127.0.0.1:{free_port()}"] for _ in range(ranks)]
        hostfile = tmp / "hosts.json"
        hostfile.write_text(json.dumps(ring))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.logs = [tmp / f"rank{r}.log" for r in range(ranks)]
        env = dict(os.environ, MLX_HOSTFILE=str(hostfile), PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", "tinytitan", "serve", "--port", str(self.port), "--max-batch", "4",
             "--group-timeout", "4",
             "--responses-store", "memory", *serve, *(rank_args or {}).get(r, [])],
            env=dict(env, MLX_RANK=str(r)), stdout=self.logs[r].open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
            for r in range(ranks)]

    def wait(self) -> dict:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            for r, p in enumerate(self.procs):
                if p.poll() is not None:
                    raise AssertionError(f"rank {r} exited: {self.logs[r].read_text()[-3000:]}")
            try:
                return httpx.get(self.base + "/health", timeout=2).json()
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError("the group did not come up: " + self.logs[0].read_text()[-3000:])

    def __enter__(self) -> "Group":
        """The group, once serving; stopped on the way out, whatever happened (SIGKILL: a stopped rank too)."""
        try:
            self.wait()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


# -- each protocol's request, and the text its answer carries ----------------------------------------------------
def body(protocol: str, text: str, stream: bool, max_tokens: int = 24, model: str = MODEL,
         **extra) -> tuple[str, dict]:
    chat = {"model": model, "messages": [{"role": "user", "content": text}], "temperature": 0, "stream": stream}
    if protocol == "chat":
        return "/v1/chat/completions", dict(chat, max_tokens=max_tokens, **extra)
    if protocol == "completions":
        return "/v1/completions", {"model": model, "prompt": text, "temperature": 0, "max_tokens": max_tokens,
                                   "stream": stream}
    if protocol == "messages":
        return "/v1/messages", dict(chat, max_tokens=max_tokens)
    if protocol == "responses":
        return "/v1/responses", {"model": model, "input": text, "temperature": 0, "max_output_tokens": max_tokens,
                                 "stream": stream}
    if protocol == "ollama":
        return "/api/chat", {"model": model, "messages": chat["messages"], "stream": stream,
                             "options": {"temperature": 0, "num_predict": max_tokens}}
    raise KeyError(protocol)


def text_of(protocol: str, stream: bool, raw: bytes) -> str:
    """The answer's text, each body and event checked strictly against the official SDK models (Ollama's by
    shape: its replies are NDJSON)."""
    if protocol == "ollama":
        lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
        assert lines[-1]["done"] is True
        return "".join(line["message"]["content"] for line in lines)
    if not stream:
        data = json.loads(raw)
        strict.body(data)
        if protocol == "chat":
            return data["choices"][0]["message"]["content"]
        if protocol == "completions":
            return data["choices"][0]["text"]
        if protocol == "messages":
            return "".join(b.get("text", "") for b in data["content"])
        return "".join(c["text"] for item in data["output"] if item["type"] == "message" for c in item["content"])
    events = strict.sse_events(protocol, parse_sse(raw.decode()))
    out = []
    for _, data in events:
        if not isinstance(data, dict):
            continue
        if protocol == "chat" and data.get("choices"):
            out.append(data["choices"][0]["delta"].get("content") or "")
        elif protocol == "completions" and data.get("choices"):
            out.append(data["choices"][0]["text"])
        elif protocol == "messages" and data.get("type") == "content_block_delta":
            out.append(data["delta"].get("text", ""))
        elif protocol == "responses" and data.get("type") == "response.output_text.delta":
            out.append(data["delta"])
    return "".join(out)


async def ask(base: str, protocol: str, text: str, stream: bool = False, **kw) -> str:
    path, payload = body(protocol, text, stream, **kw)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(base + path, json=payload)
    assert r.status_code == 200, r.text
    return text_of(protocol, stream, r.content)


async def ask_together(base: str, prompts: list[str], **kw) -> list[str]:
    """The chat answers to ``prompts`` sent at once (so the server may batch them), in their order."""
    got: list = [None] * len(prompts)
    async with trio.open_nursery() as n:
        for i, p in enumerate(prompts):
            async def go(i=i, p=p):
                got[i] = await ask(base, "chat", p, **kw)
            n.start_soon(go)
    return got


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "count"],
          "properties": {"name": {"type": "string", "maxLength": 10}, "count": {"type": "integer"}}}


def permuted_copy(out: Path) -> Path:
    """The demo model with its tokenizer's ordinary token ids swapped in pairs (the special tokens kept): the
    same weights and text, but a grammar compiled on it allows other ids."""
    import shutil

    from tinytitan.demo_model import ensure_demo_model

    shutil.copytree(ensure_demo_model(), out)
    spec = json.loads((out / "tokenizer.json").read_text())
    special = {t["id"] for t in spec["added_tokens"]}
    vocab = spec["model"]["vocab"]
    ids = sorted(i for i in vocab.values() if i not in special)
    swap = {a: b for x, y in zip(ids[::2], ids[1::2]) for a, b in ((x, y), (y, x))}
    spec["model"]["vocab"] = {t: swap.get(i, i) for t, i in vocab.items()}
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out
