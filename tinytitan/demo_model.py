"""The built-in demo model: a tiny Qwen3-architecture model built deterministically on this machine.

Nothing is downloaded. ``build_demo_model(path)`` writes an MLX model directory that ``mlx_lm.load`` reads:

* ``config.json`` / ``generation_config.json``: a ``qwen3`` config (tiny for ``"demo"``, about 48M parameters
  for ``"50m"``).
* ``model.safetensors``: float32 weights drawn from a fixed seed (uniform; embeddings std 0.02, projections
  std 1/sqrt(fan_in); norms are ones). The file is written by hand (sorted names, fixed header), so its bytes
  depend only on the recipe.
* ``tokenizer.json``: a byte-level BPE (Qwen2-style pre-tokenizer) trained with the ``tokenizers`` package on a
  corpus generated from code below (word lists + a seeded ``random.Random``; only ``random()`` is used, whose
  sequence Python guarantees across versions), so the corpus is identical on every machine.
* ``tokenizer_config.json`` (``Qwen2Tokenizer``, eos ``<|im_end|>``, pad ``<|endoftext|>``) with a Qwen3-style chat
  template: system/user/assistant/tool roles, ``tools`` in the system turn, ``<tool_call>`` JSON blocks,
  ``<tool_response>`` blocks, ``<think>`` reasoning, ``enable_thinking``.

The weights are random, so the model speaks gibberish, but every code path (tokenizer, template, KV cache,
sampling, detokenizer, reasoning/tool-call parsing) runs for real.

``ensure_demo_model(variant)`` builds once into the user cache dir (``$XDG_CACHE_HOME`` or ``~/.cache``, then
``tinytitan/demo-model[-50m]-<recipe hash>``) and reuses it afterwards; building is atomic (temp dir + rename).

This module imports only the standard library at import time; building needs ``numpy`` and ``tokenizers``
(not ``mlx`` / ``mlx_lm`` / ``transformers``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import random
import shutil
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional

__all__ = [
    "VARIANTS",
    "SPECIAL_TOKENS",
    "ADDED_TOKENS",
    "CHAT_TEMPLATE",
    "demo_model_id",
    "recipe_version",
    "default_demo_model_dir",
    "build_demo_model",
    "ensure_demo_model",
    "generate_corpus",
]

# Bump when the build changes in a way the constants below do not capture (it is part of the recipe hash).
RECIPE_REVISION = 1
SEED = 20240611
INIT_STD = 0.02

# Special tokens (single ids, skipped by skip_special_tokens) and added non-special tokens (survive decode).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Qwen2 / Qwen3 pre-tokenizer regex (also what transformers' Qwen2Tokenizer rebuilds), so that the
# tokenizer behaves the same whether loaded as Qwen2Tokenizer or PreTrainedTokenizerFast.
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

_COMMON_MODEL = {
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True,
}

VARIANTS: Dict[str, Dict[str, Any]] = {
    "demo": {
        "model_id": "tinytitan-demo",
        "model": dict(
            hidden_size=64,
            num_hidden_layers=2,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            vocab_size=4096,
            **_COMMON_MODEL,
        ),
        # corpus: characters of generated text, number of pseudo-words in the lexicon
        "corpus": {"chars": 400_000, "pseudo_words": 600},
    },
    "50m": {
        "model_id": "tinytitan-demo-50m",
        "model": dict(
            hidden_size=512,
            num_hidden_layers=8,
            intermediate_size=2048,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=64,
            vocab_size=32000,
            **_COMMON_MODEL,
        ),
        "corpus": {"chars": 2_400_000, "pseudo_words": 12_000},
    },
}


def _variant(variant: str) -> Dict[str, Any]:
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ValueError(f"unknown demo model variant {variant!r}; expected one of {sorted(VARIANTS)}") from None


def demo_model_id(variant: str = "demo") -> str:
    """The model id the server reports for the demo model: ``tinytitan-demo`` / ``tinytitan-demo-50m``."""
    return _variant(variant)["model_id"]


# --------------------------------------------------------------------------------------------------------------
# Chat template (Qwen3 structure)
# --------------------------------------------------------------------------------------------------------------

# Content may be a string, None, or a list of parts ({"type": "text", "text": ...} or strings); list parts are
# concatenated, non-text parts are dropped.
CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
{%- if content is string -%}
{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for part in content -%}
{%- if part is string -%}
{{- part -}}
{%- elif part is mapping and part.type == 'text' -%}
{{- part.text -}}
{%- endif -%}
{%- endfor -%}
{%- elif content is not none -%}
{{- content | string -}}
{%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set query = render_content(message.content) %}
        {%- if not(query.startswith('<tool_response>') and query.endswith('</tool_response>')) %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content) %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

# --------------------------------------------------------------------------------------------------------------
# Deterministic corpus
# --------------------------------------------------------------------------------------------------------------

_ENGLISH = """
the of and to a in is it you that he was for on are with as I his they be at one have this from or had by
not word but what some we can out other were all there when up use your how said an each she which do their
time if will way about many then them write would like so these her long make thing see him two has look more
day could go come did number sound no most people my over know water than call first who may down side been now
find any new work part take get place made live where after back little only round man year came show every good
me give our under name very through just form sentence great think say help low line differ turn cause much mean
before move right boy old too same tell does set three want air well also play small end put home read hand port
large spell add even land here must big high such follow act why ask men change went light kind off need house
picture try us again animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye never last let
thought city tree cross farm hard start might story saw far sea draw left late run while press close night real
life few north open seem together next white children begin got walk example ease paper group always music those
both mark often letter until mile river car feet care second book carry took science eat room friend began idea
fish mountain stop once base hear horse cut sure watch color face wood main enough plain girl usual young ready
above ever red list though feel talk bird soon body dog family direct pose leave song measure door product black
short numeral class wind question happen complete ship area half rock order fire south problem piece told knew
pass since top whole king space heard best hour better true during hundred five remember step early hold west
ground interest reach fast verb sing listen six table travel less morning ten simple several vowel toward war lay
against pattern slow center love person money serve appear road map rain rule govern pull cold notice voice unit
power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest correct able
pound done beauty drive stood contain front teach week final gave green oh quick develop ocean warm free minute
strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel full force blue
object decide surface deep moon island foot system busy test record boat common gold possible plane stead dry
wonder laugh thousand ago ran check game shape equate hot miss brought heat snow tire bring yes distant fill east
paint language among grand ball yet wave drop heart am present heavy dance engine position arm wide sail material
size vary settle speak weight general ice matter circle pair include divide syllable felt perhaps pick sudden
count square reason length represent art subject region energy hunt probable bed brother egg ride cell believe
fraction forest sit race window store summer train sleep prove lone leg exercise wall catch mount wish sky board
joy winter sat written wild instrument kept glass grass cow job edge sign visit past soft fun bright gas weather
month million bear finish happy hope flower clothe strange gone jump baby eight village meet root buy raise solve
metal whether push seven paragraph third shall held hair describe cook floor either result burn hill safe cat
century consider type law bit coast copy phrase silent tall sand soil roll temperature finger industry value fight
lie beat excite natural view sense ear else quite broke case middle kill son lake moment scale loud spring observe
child straight consonant nation dictionary milk speed method organ pay age section dress cloud surprise quiet stone
tiny climb cool design poor lot experiment bottom key iron single stick flat twenty skin smile crease hole trade
melody trip office receive row mouth exact symbol die least trouble shout except wrote seed tone join suggest clean
break lady yard rise bad blow oil blood touch grew cent mix team wire cost lost brown wear garden equal sent choose
fell fit flow fair bank collect save control decimal gentle woman captain practice separate difficult doctor please
protect noon whose locate ring character insect caught period indicate radio spoke atom human history effect
electric expect crop modern element hit student corner party supply bone rail imagine provide agree thus capital
chair danger fruit rich thick soldier process operate guess necessary sharp wing create neighbor wash bat rather
crowd corn compare poem string bell depend meat rub tube famous dollar stream fear sight thin triangle planet hurry
chief colony clock mine tie enter major fresh search send yellow gun allow print dead spot desert suit current lift
rose continue block chart hat sell success company subtract event particular deal swim term opposite wife shoe
shoulder spread arrange camp invent cotton born determine quart nine truck noise level chance gather shop stretch
throw shine property column molecule select wrong gray repeat require broad prepare salt nose plural anger claim
continent oxygen sugar death pretty skill women season solution magnet silver thank branch match suffix especially
fig afraid huge sister steel discuss forward similar guide experience score apple bought led pitch coat mass card
band rope slip win dream evening condition feed tool total basic smell valley nor double seat arrive master track
parent shore division sheet substance favor connect post spend chord fat glad original share station dad bread
charge proper bar offer segment slave duck instant market degree populate chick dear enemy reply drink occur
support speech nature range steam motion path liquid log meant quotient teeth shell neck
"""

_TECH = """
file files directory path paths error errors warning message messages request response server client model models
token tokens tokenizer prompt prompts cache caches batch batches stream streaming buffer buffers queue queues thread
threads process processes memory device tensor tensors array arrays weight weights layer layers attention
embedding embeddings config configuration option options argument arguments parameter parameters function
functions method methods class classes object objects instance instances module modules package packages import
export library libraries version versions build builds test tests testing debug release install update upgrade
deploy commit branch merge rebase push pull clone repository project projects source code data database query
queries schema table tables index indexes key keys value values string strings integer float boolean list lists
dict dictionary tuple set sets map maps filter reduce sort search result results output input inputs outputs
event events handler handlers callback callbacks async await promise future task tasks worker workers job jobs
timeout timeouts retry retries limit limits rate size length count total offset start stop begin finish done
status state states session sessions user users admin account accounts login logout password email address
network socket port host hostname url uri http https json yaml toml xml html css javascript python rust golang
java typescript shell bash terminal command commands script scripts line lines column columns row rows text
format formats parse parser parsing serialize deserialize encode decode encoding decoding read write open close
create delete remove insert append extend update replace copy move rename exists check validate verify assert
raise except finally return yield lambda global nonlocal pass break continue while for if elif else try with
def import from as class none true false null undefined self this super init main run call invoke execute
apply compute calculate generate render load save dump fetch send receive connect disconnect listen bind accept
tool tools call calls reasoning thinking assistant system chat completion completions sampling temperature
logits logprobs probability greedy beam decoder encoder transformer vocabulary merge merges prefix suffix
chunk chunks window context length max min mean median sum average ratio percent metric metrics benchmark
latency throughput performance speed memory usage profile profiler trace traces log logs logger logging
""".split()

_PY_KEYWORDS = """False None True and as assert async await break class continue def del elif else except
finally for from global if import in is lambda nonlocal not or pass raise return try while with yield""".split()

_PY_BUILTINS = """print len range list dict set tuple str int float bool isinstance getattr setattr hasattr
enumerate zip sorted reversed min max sum any all open map filter super type object repr format iter next
ValueError TypeError KeyError IndexError RuntimeError Exception NotImplementedError StopIteration""".split()

_NAMES = """Alice Bob Carol Dave Eve Frank Grace Heidi Ivan Judy Mallory Oscar Peggy Trent Victor Walter
London Paris Berlin Tokyo Madrid Rome Oslo Lisbon Vienna Prague Dublin Boston Chicago Denver Seattle Austin
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August
September October November December Python Linux GitHub Apple MLX Qwen Claude Codex OpenAI""".split()

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sk", "sl", "st", "str", "th", "tr"]
_NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "oo", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "rt", "st", "ck", "x"]

_PUNCT_END = [".", ".", ".", ".", "?", "!", ":"]
_EXTS = ["py", "rs", "js", "ts", "json", "md", "txt", "toml", "yaml", "sh", "c", "h", "go"]
_OPS = ["+", "-", "*", "/", "//", "%", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "is not"]
_AUG = ["=", "+=", "-=", "*=", "|=", ":="]


_SUFFIXES = ["s", "s", "ed", "ing", "er", "ers", "ly", "ion", "ions", "able", "ness", "ment", "ful", "less",
             "ity", "al", "ive", "ize", "ized", "ization", "ous", "est", "ist", "ism", "ence", "ance", "ship"]
_PREFIXES = ["un", "re", "pre", "dis", "over", "sub", "inter", "non", "multi", "auto", "co", "de", "mis", "super"]


def _inflect(w: str, suf: str) -> str:
    if w.endswith("e") and suf[0] in "aeiouy":
        w = w[:-1]
    elif w.endswith("y") and len(w) > 2 and w[-2] not in "aeiou" and suf[0] not in "i":
        w = w[:-1] + "i"
    elif suf == "s" and w[-1] in "sxz" or w.endswith(("ch", "sh")) and suf == "s":
        suf = "es"
    return w + suf


class _Gen:
    """Corpus generator. Uses only ``random.Random(seed).random()`` (a sequence Python guarantees is stable).

    Any change here (or to the word lists) changes the tokenizer: bump RECIPE_REVISION so caches rebuild.
    """

    def __init__(self, seed: int, pseudo_words: int):
        self.r = random.Random(seed).random
        english = _ENGLISH.split()
        pseudo = self._pseudo_words(pseudo_words, set(english) | set(_TECH))
        # Zipf-like weights over: english (most frequent), tech words, pseudo-words (the long tail).
        self.words = english + _TECH + pseudo
        cum, acc = [], 0.0
        for rank in range(len(self.words)):
            acc += 1.0 / (rank + 8.0)
            cum.append(acc)
        self.cum, self.total = cum, acc
        self.tech = _TECH + _PY_BUILTINS
        self.pseudo = pseudo or english

    def _pseudo_words(self, n: int, taken: set) -> List[str]:
        out, seen, r = [], set(taken), self.r
        while len(out) < n:
            syl = 1 + int(r() * 2.6)
            w = "".join(self.pick(_ONSETS) + self.pick(_NUCLEI) + self.pick(_CODAS) for _ in range(syl))
            if len(w) >= 3 and w not in seen:
                seen.add(w)
                out.append(w)
        return out

    def below(self, n: int) -> int:
        return int(self.r() * n)

    def pick(self, seq):
        return seq[int(self.r() * len(seq))]

    def chance(self, p: float) -> bool:
        return self.r() < p

    def word(self) -> str:
        w = self.words[bisect.bisect_left(self.cum, self.r() * self.total)]
        x = self.r()
        if x < 0.22 and len(w) > 2:  # inflections/derivations, so the tokenizer learns common subwords
            w = _inflect(w, self.pick(_SUFFIXES))
        if 0.95 < x and len(w) > 3:
            w = self.pick(_PREFIXES) + w
        return w

    def number(self) -> str:
        k = self.below(6)
        if k == 0:
            return str(self.below(10))
        if k == 1:
            return str(self.below(100))
        if k == 2:
            return str(1900 + self.below(130))
        if k == 3:
            return f"{self.below(1000)}.{self.below(100)}"
        if k == 4:
            return str(self.below(100000))
        return "0x" + format(self.below(65536), "x")

    def ident(self, parts: Optional[int] = None, style: str = "snake") -> str:
        n = parts or 1 + self.below(3)
        ws = [self.pick(self.tech) if self.chance(0.5) else self.word() for _ in range(n)]
        ws = [w.lower() for w in ws]
        if style == "camel":
            return ws[0] + "".join(w.capitalize() for w in ws[1:])
        if style == "pascal":
            return "".join(w.capitalize() for w in ws)
        if style == "upper":
            return "_".join(ws).upper()
        return "_".join(ws)

    def sentence(self) -> str:
        n = 4 + self.below(16)
        ws = []
        for i in range(n):
            x = self.r()
            if x < 0.04:
                w = self.number()
            elif x < 0.08:
                w = self.pick(_NAMES)
            elif x < 0.11:
                w = "`" + self.ident() + "`"
            else:
                w = self.word()
            if i and self.chance(0.07):
                w += ","
            ws.append(w)
        ws[0] = ws[0][:1].upper() + ws[0][1:]
        return " ".join(ws) + self.pick(_PUNCT_END)

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(2 + self.below(6)))

    def expr(self) -> str:
        k = self.below(7)
        if k == 0:
            return self.number()
        if k == 1:
            return repr(" ".join(self.word() for _ in range(1 + self.below(4))))
        if k == 2:
            return f"{self.ident()}({', '.join(self.ident() for _ in range(self.below(3)))})"
        if k == 3:
            return f"{self.ident()} {self.pick(_OPS)} {self.ident()}"
        if k == 4:
            return f"{self.ident()}.{self.ident()}({self.ident()})"
        if k == 5:
            return f"[{', '.join(self.expr() if self.chance(0.3) else self.ident() for _ in range(self.below(4)))}]"
        return f"self.{self.ident()}[{self.ident()!r}]"

    def python(self) -> str:
        lines = []
        if self.chance(0.4):
            lines.append(f"import {self.ident(1)}")
            lines.append(f"from {self.ident(1)}.{self.ident(1)} import {self.ident(style='pascal')}, {self.ident()}")
            lines.append("")
        if self.chance(0.35):
            name = self.ident(style="pascal")
            base = self.pick(["object", "Exception", "BaseModel", self.ident(style="pascal")])
            lines.append(f"class {name}({base}):")
            ind = "    "
            lines.append(f'{ind}"""{self.sentence()}"""')
            lines.append("")
        else:
            ind = ""
        for _ in range(1 + self.below(3)):
            args = [self.ident() for _ in range(self.below(4))]
            if ind:
                args = ["self"] + args
            if self.chance(0.3):
                arg = self.ident()
                typ = self.pick(["int", "str", "bool", "float", "list", "dict"])
                args.append(f"{arg}: {typ} = {self.expr()}")
            lines.append(f"{ind}def {self.ident()}({', '.join(args)}):")
            body = ind + "    "
            if self.chance(0.5):
                lines.append(f'{body}"""{self.sentence()}"""')
            for _ in range(1 + self.below(6)):
                k = self.below(8)
                if k == 0:
                    lines.append(f"{body}if {self.expr()}:")
                    stmt = self.pick(["return", "raise", "continue", "pass"])
                    if stmt == "raise":
                        stmt = f"raise {self.pick(_PY_BUILTINS[-7:])}({self.sentence()!r})"
                    lines.append(f"{body}    {stmt}")
                elif k == 1:
                    var = self.ident(1)
                    fn = self.pick(["range", "enumerate", "sorted", "zip"])
                    lines.append(f"{body}for {var} in {fn}({self.ident()}):")
                    obj = self.ident()
                    meth = self.pick(["append", "extend", "update", "add"])
                    lines.append(f"{body}    {obj}.{meth}({self.expr()})")
                elif k == 2:
                    lines.append(f"{body}# {self.sentence()}")
                elif k == 3:
                    lines.append(f"{body}print(f\"{self.word()} {{{self.ident()}}} {self.word()}\")")
                elif k == 4:
                    lines.append(f"{body}try:")
                    lines.append(f"{body}    {self.ident()} = {self.expr()}")
                    lines.append(f"{body}except {self.pick(_PY_BUILTINS[-7:])} as e:")
                    lines.append(f"{body}    logger.{self.pick(['info', 'warning', 'error', 'debug'])}(\"%s\", e)")
                else:
                    lines.append(f"{body}{self.ident()} {self.pick(_AUG)} {self.expr()}")
            lines.append(f"{body}return {self.expr()}")
            lines.append("")
        return "\n".join(lines)

    def json_value(self, depth: int = 0) -> Any:
        k = self.below(7 if depth < 2 else 4)
        if k == 0:
            return self.below(1000)
        if k == 1:
            return self.chance(0.5)
        if k == 2:
            return " ".join(self.word() for _ in range(1 + self.below(5)))
        if k == 3:
            return self.pick([f"/home/{self.word()}/{self.ident()}.{self.pick(_EXTS)}", self.pick(_NAMES), None])
        if k in (4, 5):
            return {self.ident(): self.json_value(depth + 1) for _ in range(1 + self.below(4))}
        return [self.json_value(depth + 1) for _ in range(self.below(4))]

    def json_doc(self) -> str:
        if self.chance(0.5):
            obj = {"name": self.ident(), "arguments": self.json_value(1)}
        else:
            obj = {self.ident(): self.json_value() for _ in range(1 + self.below(5))}
        if self.chance(0.5):
            return json.dumps(obj, ensure_ascii=False)
        return json.dumps(obj, ensure_ascii=False, indent=2)

    def markdown(self) -> str:
        out = [f"{'#' * (1 + self.below(3))} {self.sentence().rstrip('.?!:')}", ""]
        for _ in range(1 + self.below(4)):
            out.append(f"{self.pick(['-', '*', '1.'])} {self.sentence()}")
        if self.chance(0.5):
            out += ["", "```" + self.pick(["python", "bash", "json", ""]), self.shell(), "```"]
        out += ["", f"**{self.word()}** {self.paragraph()}"]
        return "\n".join(out)

    def shell(self) -> str:
        lines = []
        for _ in range(1 + self.below(3)):
            p = "/".join(self.ident(1) for _ in range(1 + self.below(3))) + "." + self.pick(_EXTS)
            lines.append(self.pick([
                "$ git "
                + self.pick(["status", "diff", "log --oneline", "add " + p, "commit -m " + repr(self.sentence())]),
                f"$ python -m {self.ident(1)} --{self.ident(2).replace('_', '-')} {self.number()}",
                f"$ cat {p}", f"$ ls -la {p}", f"$ grep -rn {self.ident()!r} {p}",
                f"{p}:{self.below(500)}: {self.pick(['error', 'warning', 'note'])}: {self.sentence()}",
                f"Traceback (most recent call last):\n  File \"{p}\", line {self.below(900)}, in {self.ident()}\n"
                f"{self.pick(_PY_BUILTINS[-7:])}: {self.sentence()}",
            ]))
        return "\n".join(lines)

    def document(self) -> str:
        k = self.below(10)
        if k < 4:
            return self.paragraph()
        if k < 6:
            return self.python()
        if k < 7:
            return self.json_doc()
        if k < 9:
            return self.markdown()
        return self.shell()

    def corpus(self, chars: int) -> List[str]:
        docs, n = [], 0
        while n < chars:
            d = self.document()
            docs.append(d)
            n += len(d) + 2
        return docs


def generate_corpus(variant: str = "demo") -> List[str]:
    """The training corpus (a list of documents) for a variant; the same on every machine."""
    spec = _variant(variant)["corpus"]
    return _Gen(SEED, spec["pseudo_words"]).corpus(spec["chars"])


# --------------------------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------------------------


def _train_tokenizer(vocab_size: int, corpus: List[str]):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    n_added = len(SPECIAL_TOKENS) + len(ADDED_TOKENS)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_added,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    trained = tok.get_vocab_size()
    if trained != vocab_size - n_added:
        raise RuntimeError(f"demo tokenizer trained to {trained} tokens, expected {vocab_size - n_added}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return tok


def _tokenizer_config(tok) -> Dict[str, Any]:
    decoder = {}
    for t in SPECIAL_TOKENS + ADDED_TOKENS:
        decoder[str(tok.token_to_id(t))] = {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t in SPECIAL_TOKENS,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


# --------------------------------------------------------------------------------------------------------------
# Model config and weights
# --------------------------------------------------------------------------------------------------------------


def _model_config(variant: str, tok) -> Dict[str, Any]:
    m = _variant(variant)["model"]
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "eos_token_id": tok.token_to_id("<|im_end|>"),
        "pad_token_id": tok.token_to_id("<|endoftext|>"),
        "head_dim": m["head_dim"],
        "hidden_act": "silu",
        "hidden_size": m["hidden_size"],
        "initializer_range": INIT_STD,
        "intermediate_size": m["intermediate_size"],
        "max_position_embeddings": m["max_position_embeddings"],
        "max_window_layers": m["num_hidden_layers"],
        "model_type": "qwen3",
        "num_attention_heads": m["num_attention_heads"],
        "num_hidden_layers": m["num_hidden_layers"],
        "num_key_value_heads": m["num_key_value_heads"],
        "rms_norm_eps": m["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": m["rope_theta"],
        "sliding_window": None,
        "tie_word_embeddings": m["tie_word_embeddings"],
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": m["vocab_size"],
        "tinytitan_demo": {"variant": variant, "recipe": recipe_version(variant)},
    }


def _param_shapes(m: Dict[str, Any]) -> Dict[str, tuple]:
    """Parameter names/shapes of mlx_lm.models.qwen3.Model (checked against it in the tests)."""
    h, hd, ff = m["hidden_size"], m["head_dim"], m["intermediate_size"]
    nq, nkv = m["num_attention_heads"], m["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (m["vocab_size"], h), "model.norm.weight": (h,)}
    if not m["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (m["vocab_size"], h)
    for i in range(m["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (nq * hd, h),
                p + "self_attn.k_proj.weight": (nkv * hd, h),
                p + "self_attn.v_proj.weight": (nkv * hd, h),
                p + "self_attn.o_proj.weight": (h, nq * hd),
                p + "self_attn.q_norm.weight": (hd,),
                p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (ff, h),
                p + "mlp.up_proj.weight": (ff, h),
                p + "mlp.down_proj.weight": (h, ff),
            }
        )
    return shapes


def _write_weights(path: Path, m: Dict[str, Any]) -> int:
    """Write model.safetensors (float32, little-endian, sorted names); returns the parameter count."""
    import numpy as np

    header: Dict[str, Any] = {"__metadata__": {"format": "mlx"}}
    arrays, offset, count = [], 0, 0
    for name, shape in sorted(_param_shapes(m).items()):
        if name.endswith("norm.weight"):
            a = np.ones(shape, dtype="<f4")
        else:
            # uniform(-b, b) has std b / sqrt(3). Embeddings: INIT_STD. Projections: 1 / sqrt(fan_in), so every
            # layer changes the residual stream (with tied embeddings and tiny layer weights the model would just
            # repeat its last input token; this way greedy decoding wanders through the vocabulary).
            std = INIT_STD if "embed_tokens" in name or "lm_head" in name else shape[1] ** -0.5
            rng = np.random.RandomState((SEED + zlib.crc32(name.encode())) % 2**32)
            a = ((rng.random_sample(shape) * 2.0 - 1.0) * (std * 3.0**0.5)).astype("<f4")
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        count += a.size
        arrays.append(a)
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    hbytes += b" " * (-len(hbytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for a in arrays:
            f.write(a.tobytes())
    return count


# --------------------------------------------------------------------------------------------------------------
# Build / cache
# --------------------------------------------------------------------------------------------------------------


def recipe_version(variant: str = "demo") -> str:
    """A short hash of everything that determines the built files (bump RECIPE_REVISION for code changes)."""
    recipe = {
        "revision": RECIPE_REVISION,
        "seed": SEED,
        "init": f"uniform; embed std {INIT_STD}; proj std fan_in**-0.5; norms 1; float32",
        "variant": variant,
        "spec": _variant(variant),
        "special": SPECIAL_TOKENS,
        "added": ADDED_TOKENS,
        "regex": PRETOKENIZE_REGEX,
        "template": CHAT_TEMPLATE,
    }
    blob = json.dumps(recipe, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_demo_model(path, variant: str = "demo") -> Path:
    """Write the demo model directory at ``path`` (created if needed; existing files are overwritten)."""
    spec = _variant(variant)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    m = spec["model"]

    tok = _train_tokenizer(m["vocab_size"], generate_corpus(variant))
    tok.save(str(out / "tokenizer.json"), pretty=True)
    _write_json(out / "tokenizer_config.json", _tokenizer_config(tok))
    _write_json(
        out / "special_tokens_map.json",
        {
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
        },
    )
    config = _model_config(variant, tok)
    _write_json(out / "config.json", config)
    _write_json(
        out / "generation_config.json",
        {
            "bos_token_id": None,
            "eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
            "pad_token_id": tok.token_to_id("<|endoftext|>"),
            "do_sample": False,
        },
    )
    _write_weights(out / "model.safetensors", m)
    return out


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tinytitan"


def default_demo_model_dir(variant: str = "demo") -> Path:
    """``$XDG_CACHE_HOME|~/.cache`` / ``tinytitan/demo-model[-<variant>]-<recipe hash>``."""
    _variant(variant)
    name = "demo-model" if variant == "demo" else f"demo-model-{variant}"
    return _cache_root() / f"{name}-{recipe_version(variant)}"


_COMPLETE_MARKER = "model.safetensors"  # written last by build_demo_model


def ensure_demo_model(variant: str = "demo", path=None) -> Path:
    """Return the demo model directory, building it once (atomically) if it is not there yet.

    The build goes to a temporary directory next to the target and is renamed into place, so a reader never
    sees a partial directory; if two processes race, one rename wins and the other's copy is discarded.
    """
    target = Path(path) if path is not None else default_demo_model_dir(variant)
    if _is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        build_demo_model(tmp, variant)
        for _ in range(3):
            try:
                os.replace(tmp, target)  # atomic; succeeds if target is absent or an empty directory
                break
            except OSError:
                if _is_complete(target):
                    break  # another process won the race: use its (identical) build
                # A leftover that is not a finished build: move it aside and retry.
                stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".stale", dir=target.parent))
                try:
                    os.replace(target, stale / "old")
                except OSError:
                    pass
                shutil.rmtree(stale, ignore_errors=True)
        else:
            raise RuntimeError(f"could not install the demo model at {target}")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _is_complete(target: Path) -> bool:
    return (target / "config.json").is_file() and (target / _COMPLETE_MARKER).is_file()
