"""Tokenizer + chat-template fixtures for each model family, built locally (no download).

One small byte-level BPE is trained once on the demo model's deterministic corpus; each family gets a copy
with its own special tokens added, a short chat template written in the structure of the family's real one
(same markers, same role handling, same quirks: Llama's single-call rule, Mistral's 9-character ids and
strict alternation, Gemma's missing system/tool roles, harmony's channels), and a config.json with its
model_type. ``load(family)`` returns mlx-lm's TokenizerWrapper for it (cached per session);
``llama_with_bos(tmp_path)`` the Llama 3 one with Llama 3's own BOS post-processor, and BOS's id.
"""

from __future__ import annotations

import json
import functools
import shutil
from pathlib import Path

from tinytitan import demo_model as dm

# ---------------------------------------------------------------------------------------------------------
# Templates (short, faithful to the real ones' structure)
# ---------------------------------------------------------------------------------------------------------

QWEN3_CODER = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}{%- set tools = [] %}{%- endif %}
{%- if system_message is defined %}
    {{- "<|im_start|>system\n" + system_message }}
{%- elif tools is iterable and tools | length > 0 %}
    {{- "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer to solve tasks." }}
{%- endif %}
{%- if tools is iterable and tools | length > 0 %}
    {{- "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
    {%- for tool in tools %}
        {%- if tool.function is defined %}{%- set tool = tool.function %}{%- endif %}
        {{- "\n<function>\n<name>" ~ tool.name ~ "</name>\n<description>" ~ tool.description ~ "</description>\n<parameters>" }}
        {%- for param_name, param_fields in tool.parameters.properties|items %}
            {{- "\n<parameter>\n<name>" ~ param_name ~ "</name>\n<type>" ~ param_fields.type ~ "</type>\n</parameter>" }}
        {%- endfor %}
        {{- "\n</parameters>\n</function>" }}
    {%- endfor %}
    {{- "\n</tools>" }}
    {{- "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>" }}
{%- endif %}
{%- if system_message is defined or (tools is iterable and tools | length > 0) %}
    {{- "<|im_end|>\n" }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message.role == "assistant" and message.tool_calls is defined and message.tool_calls is iterable and message.tool_calls | length > 0 %}
        {{- "<|im_start|>" + message.role }}
        {%- if message.content is defined and message.content is string and message.content | trim | length > 0 %}
            {{- "\n" + message.content | trim + "\n" }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- "\n<tool_call>\n<function=" + tool_call.name + ">\n" }}
            {%- if tool_call.arguments is defined %}
                {%- for args_name, args_value in tool_call.arguments|items %}
                    {{- "<parameter=" + args_name + ">\n" }}
                    {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
                    {{- args_value }}
                    {{- "\n</parameter>\n" }}
                {%- endfor %}
            {%- endif %}
            {{- "</function>\n</tool_call>" }}
        {%- endfor %}
        {{- "<|im_end|>\n" }}
    {%- elif message.role == "user" or message.role == "system" or message.role == "assistant" %}
        {{- "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>" + "\n" }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- "<|im_start|>user\n" }}
        {%- endif %}
        {{- "<tool_response>\n" + message.content + "\n</tool_response>\n" }}
        {%- if loop.last or loop.nextitem.role != "tool" %}
            {{- "<|im_end|>\n" }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<|im_start|>assistant\n" }}
{%- endif %}
"""

LLAMA3 = r"""{{- bos_token }}
{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}{{- "Environment: ipython\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

MISTRAL = r"""{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if system_message is defined %}
    {{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}
{%- endif %}
{%- set ns = namespace(index=0) %}
{%- for message in loop_messages | rejectattr('role', 'equalto', 'tool') | selectattr('tool_calls', 'undefined') %}
    {%- if (message['role'] == 'user') != (ns.index % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- set ns.index = ns.index + 1 %}
{%- endfor %}
{%- if tools %}
    {{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {{- '[INST]' + message['content'] + '[/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {%- if message['content'] %}
            {{- message['content'] }}
        {%- endif %}
        {%- if message.tool_calls is defined and message.tool_calls %}
            {%- for tool in message.tool_calls %}
                {%- if tool.id is not string or tool.id | length != 9 %}
                    {{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}
                {%- endif %}
                {%- set arguments = tool.function.arguments %}
                {%- if arguments is not string %}{%- set arguments = arguments | tojson %}{%- endif %}
                {{- '[TOOL_CALLS]' + tool.function.name + '[ARGS]' + arguments }}
            {%- endfor %}
        {%- endif %}
        {{- eos_token }}
    {%- elif message['role'] == 'tool' %}
        {{- '[TOOL_RESULTS]' + message['content'] | string + '[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('Only user, assistant and tool roles are supported!') }}
    {%- endif %}
{%- endfor %}
"""

GLM = r"""{{- '[gMASK]<sop>' }}
{%- if tools %}
    {{- '<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' }}
    {%- for tool in tools %}
        {{- tool | tojson + '\n' }}
    {%- endfor %}
    {{- '</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n...\n</tool_call>' }}
{%- endif %}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}{%- set ns.last_user_index = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {{- '<|user|>\n' + m.content }}
        {{- '/nothink' if (enable_thinking is defined and not enable_thinking and not m.content.endswith('/nothink')) else '' }}
    {%- elif m.role == 'assistant' %}
        {{- '<|assistant|>' }}
        {%- set reasoning_content = m.reasoning_content if m.reasoning_content is string else '' %}
        {%- if loop.index0 > ns.last_user_index and reasoning_content %}
            {{- '\n<think>' + reasoning_content.strip() + '</think>' }}
        {%- else %}
            {{- '\n<think></think>' }}
        {%- endif %}
        {%- if m.content and m.content.strip() %}
            {{- '\n' + m.content.strip() }}
        {%- endif %}
        {%- if m.tool_calls %}
            {%- for tc in m.tool_calls %}
                {%- if tc.function %}{%- set tc = tc.function %}{%- endif %}
                {{- '\n<tool_call>' + tc.name }}
                {%- for k, v in tc.arguments.items() %}
                    {{- '\n<arg_key>' + k + '</arg_key>\n<arg_value>' }}
                    {{- v if v is string else v | tojson }}
                    {{- '</arg_value>' }}
                {%- endfor %}
                {{- '\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
    {%- elif m.role == 'tool' %}
        {%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}
            {{- '<|observation|>' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + m.content + '\n</tool_response>' }}
    {%- elif m.role == 'system' %}
        {{- '<|system|>\n' + m.content }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|assistant|>' }}
    {{- '\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' }}
{%- endif %}
"""

GEMMA = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\n' }}
{%- endif -%}
"""

HARMONY = r"""{{- "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\nReasoning: " }}
{{- reasoning_effort if reasoning_effort is defined else "medium" }}
{{- "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message." }}
{%- if tools %}
    {{- "\nCalls to these tools must go to the commentary channel: 'functions'." }}
{%- endif %}
{{- "<|end|>" }}
{%- if messages[0].role in ["system", "developer"] or tools %}
    {{- "<|start|>developer<|message|>" }}
    {%- if messages[0].role in ["system", "developer"] %}
        {{- "# Instructions\n\n" + messages[0].content + "\n\n" }}
    {%- endif %}
    {%- if tools %}
        {{- "# Tools\n\n## functions\n\nnamespace functions {\n\n" }}
        {%- for tool in tools %}
            {%- set tool = tool.function if tool.function is defined else tool %}
            {{- "// " + tool.description + "\ntype " + tool.name + " = (_: " + tool.parameters | tojson + ") => any;\n\n" }}
        {%- endfor %}
        {{- "} // namespace functions" }}
    {%- endif %}
    {{- "<|end|>" }}
{%- endif %}
{%- set last_tool_call = namespace(name=none) %}
{%- for message in messages %}
    {%- if loop.first and message.role in ["system", "developer"] %}
    {%- elif message.role == "assistant" %}
        {%- if "tool_calls" in message %}
            {#- We assume max 1 tool call per message: the name of a tool result is the last call's #}
            {%- set tc = message.tool_calls[0] %}
            {%- set tc = tc.function if tc.function is defined else tc %}
            {%- if message.content and message.thinking %}
                {{- raise_exception("Cannot pass both content and thinking in an assistant message with tool calls!") }}
            {%- elif message.content %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.content + "<|end|>" }}
            {%- elif message.thinking %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}
            {%- endif %}
            {{- "<|start|>assistant to=functions." + tc.name + "<|channel|>commentary json<|message|>" }}
            {{- tc.arguments | tojson }}
            {{- "<|call|>" }}
            {%- set last_tool_call.name = tc.name %}
        {%- else %}
            {{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>" }}
            {%- set last_tool_call.name = none %}
        {%- endif %}
    {%- elif message.role == "tool" %}
        {%- if last_tool_call.name is none %}
            {{- raise_exception("Message has tool role, but there was no previous assistant message with a tool call!") }}
        {%- endif %}
        {{- "<|start|>functions." + last_tool_call.name + " to=assistant<|channel|>commentary<|message|>" }}
        {{- message.content | tojson + "<|end|>" }}
    {%- elif message.role == "user" %}
        {{- "<|start|>user<|message|>" + message.content + "<|end|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<|start|>assistant" }}
{%- endif %}
"""

# ---------------------------------------------------------------------------------------------------------
# Family table: special tokens, template, eos/bos, model_type
# ---------------------------------------------------------------------------------------------------------

TEMPLATES = Path(__file__).resolve().parent / "data" / "templates"  # real chat templates (see its README)


def real_template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


DEEPSEEK_TOKENS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                   "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                   "<｜tool▁sep｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"]
MINIMAX_TOKENS = ["]~!b[", "]~b]", "[e~[", "<minimax:tool_call>", "</minimax:tool_call>"]
KIMI_TOKENS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
               "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
               "<|tool_call_argument_begin|>", "<|tool_call_end|>"]

SPECS = {
    "qwen": dict(special=dm.SPECIAL_TOKENS, added=dm.ADDED_TOKENS, template=dm.CHAT_TEMPLATE,
                 eos="<|im_end|>", bos=None, pad="<|endoftext|>", model_type="qwen3"),
    "qwen3_coder": dict(special=dm.SPECIAL_TOKENS, added=dm.ADDED_TOKENS, template=QWEN3_CODER,
                        eos="<|im_end|>", bos=None, pad="<|endoftext|>", model_type="qwen3_moe"),
    "llama3": dict(special=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                            "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"], added=[], template=LLAMA3,
                   eos="<|eot_id|>", bos="<|begin_of_text|>", pad=None, model_type="llama"),
    "mistral": dict(special=["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                             "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]",
                             "[/SYSTEM_PROMPT]", "[THINK]", "[/THINK]", "[ARGS]", "[CALL_ID]"], added=[],
                    template=MISTRAL, eos="</s>", bos="<s>", pad=None, model_type="mistral"),
    "glm": dict(special=["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                         "<|observation|>"],
                added=["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                       "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>"],
                template=GLM, eos="<|endoftext|>", bos=None, pad="<|endoftext|>", model_type="glm4_moe"),
    "gemma": dict(special=["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>"], added=[],
                  template=GEMMA, eos="<end_of_turn>", bos="<bos>", pad="<pad>", model_type="gemma3_text"),
    "gpt_oss": dict(special=["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>",
                             "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"], added=[],
                    template=HARMONY, eos="<|return|>", bos="<|startoftext|>", pad="<|endoftext|>",
                    model_type="gpt_oss"),
    # real templates (llama.cpp's models/templates/), the family's own markup tokens
    "deepseek_v3": dict(special=DEEPSEEK_TOKENS, added=["<think>", "</think>"],
                        template=real_template("deepseek-ai-DeepSeek-V3.1.jinja"), eos="<｜end▁of▁sentence｜>",
                        bos="<｜begin▁of▁sentence｜>", pad="<｜end▁of▁sentence｜>", model_type="deepseek_v3"),
    "kimi_k2": dict(special=KIMI_TOKENS, added=[], template=real_template("moonshotai-Kimi-K2.jinja"),
                    eos="<|im_end|>", bos="[BOS]", pad="[EOS]", model_type="kimi_k2"),
    "minimax_m2": dict(special=MINIMAX_TOKENS, added=["<think>", "</think>"],
                       template=real_template("unsloth-MiniMax-M2.jinja"), eos="[e~[", bos="]~!b[", pad="[e~[",
                       model_type="minimax_m2"),
    # DeepSeek V3-0324 / R1-0528 (and R1-0528's distills): the older call format, named by the template alone (its
    # model_type is V3.1's)
    "deepseek_r1": dict(special=DEEPSEEK_TOKENS + ["<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"],
                        added=["<think>", "</think>"], template=real_template("deepseek-ai-DeepSeek-V3-0324.jinja"),
                        eos="<｜end▁of▁sentence｜>", bos="<｜begin▁of▁sentence｜>", pad="<｜end▁of▁sentence｜>",
                        model_type="deepseek_v3"),
    "deepseek_v32": dict(special=DEEPSEEK_TOKENS, added=["<think>", "</think>"],
                         template=real_template("DeepSeek-V3.2.jinja"), eos="<｜end▁of▁sentence｜>",
                         bos="<｜begin▁of▁sentence｜>", pad="<｜end▁of▁sentence｜>", model_type="deepseek_v32"),
}
# variants of a family with another of its real templates (not in SPECS: detection and the shared tests run on
# the ones above)
VARIANTS = {
    "kimi_k2_thinking": dict(SPECS["kimi_k2"], added=["<think>", "</think>"],
                             template=real_template("moonshotai-Kimi-K2-Thinking.jinja")),
}


@functools.lru_cache(maxsize=1)
def _base_tokenizer_json() -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(dm.PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    corpus = dm._Gen(dm.SEED, 300).corpus(150_000)
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    return tok.to_str()


def build(family: str, root: Path) -> Path:
    from tokenizers import AddedToken, Tokenizer

    spec = SPECS.get(family) or VARIANTS[family]
    out = root / family
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_str(_base_tokenizer_json())
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec["special"]])
    if spec["added"]:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec["added"]])
    tok.save(str(out / "tokenizer.json"))
    decoder = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": t in spec["special"]}
        for t in spec["special"] + spec["added"]
    }
    config = {
        "added_tokens_decoder": decoder,
        "bos_token": spec["bos"],
        "eos_token": spec["eos"],
        "pad_token": spec["pad"],
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": spec["template"],
        "model_max_length": 32768,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    (out / "config.json").write_text(json.dumps({"model_type": spec["model_type"], "vocab_size": tok.get_vocab_size(),
                                                 "max_position_embeddings": 32768, "eos_token_id": tok.token_to_id(spec["eos"]),
                                                 "bos_token_id": tok.token_to_id(spec["bos"]) if spec["bos"] else None}))
    return out


_CACHE: dict = {}


def load(family: str, root: Path):
    """mlx-lm's TokenizerWrapper and config.json for a family's fixture (built once per session)."""
    from mlx_lm.utils import load_tokenizer

    if family not in _CACHE:
        path = build(family, root)
        _CACHE[family] = load_tokenizer(path), json.loads((path / "config.json").read_text())
    return _CACHE[family]


# ---------------------------------------------------------------------------------------------------------
# Running raw outputs through the engine's own path
# ---------------------------------------------------------------------------------------------------------

def backend(family: str, root: Path, outputs=("",)):
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    tok, cfg = load(family, root)
    b = ScriptedBackend([ScriptEntry(o) for o in outputs], tok, model_id=f"fixture-{family}")
    b.config = cfg
    return b


def generate(b, req) -> list:
    """Every TokenEvent of one scripted generation (prompt rendered, output tokenized and detokenized one
    token at a time, parsed by the family's parser), as the engine runs it."""
    from tinytitan.engine.decode.token_events import DecodeLoop

    prepared = b.prepare(req)
    events: list = []
    loop = DecodeLoop(b.parser(prepared), req.stop, events.append)
    b.decode(prepared, loop, lambda: False)
    return events


WEATHER_TOOL = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}}


def parsed(family: str, pieces, tools: dict | None = None, start_in_reasoning: bool = False) -> list:
    """The events of ``family``'s output parser fed ``pieces`` (a model's text as the detokenizer hands it over),
    then finished: the parser alone, without a tokenizer."""
    from tinytitan.engine.families import FAMILIES

    p = FAMILIES[family].parser(start_in_reasoning, {}, WEATHER_TOOL if tools is None else tools)
    out: list = []
    for piece in pieces:
        out += p.feed(piece)[0]
    return out + p.finish()


def text_of(events) -> str:
    from tinytitan import events as ev

    return "".join(e.text for e in events if isinstance(e, ev.TextDelta))


def calls_of(events) -> list[str]:
    from tinytitan import events as ev

    return [e.name for e in events if isinstance(e, ev.ToolCallStarted)]


def arguments_of(events) -> list[str]:
    from tinytitan import events as ev

    return [e.arguments for e in events if isinstance(e, ev.ToolCallDone)]


def summary(events) -> list[tuple]:
    """Events in a comparable form: call ids dropped, consecutive deltas of one kind joined."""
    from tinytitan import events as ev

    out: list[tuple] = []
    for e in events:
        if isinstance(e, ev.ReasoningDelta):
            item = ("reasoning", e.text)
        elif isinstance(e, ev.TextDelta):
            item = ("text", e.text)
        elif isinstance(e, ev.ToolCallStarted):
            item = ("call", e.index, e.name)
        elif isinstance(e, ev.ToolCallArgsDelta):
            item = ("args", e.index, e.text)
        elif isinstance(e, ev.ToolCallDone):
            item = ("done", e.index, e.arguments)
        elif isinstance(e, ev.Finished):
            item = ("finish", e.reason)
        else:
            continue
        if out and item[0] in ("reasoning", "text", "args") and out[-1][0] == item[0] and out[-1][1:-1] == item[1:-1]:
            out[-1] = out[-1][:-1] + (out[-1][-1] + item[-1],)
        else:
            out.append(item)
    return out


def llama_with_bos(tmp_path):
    """The Llama 3 fixture's tokenizer, its post-processor adding BOS as Llama 3's own tokenizer.json does."""
    from mlx_lm.utils import load_tokenizer

    src = build("llama3", tmp_path / "fixtures")
    out = tmp_path / "llama3-bos"
    shutil.copytree(src, out)
    spec = json.loads((out / "tokenizer.json").read_text())
    bos = "<|begin_of_text|>"
    bos_id = next(t["id"] for t in spec["added_tokens"] if t["content"] == bos)
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return load_tokenizer(out), bos_id
