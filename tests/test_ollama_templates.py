"""Ollama's Go templates, translated to Jinja and rendered as a chat template renders (transformers' sandbox,
``trim_blocks`` and ``lstrip_blocks``), compared with what Ollama itself writes.

The templates are Ollama's own library templates (``template/*.gotmpl`` in ollama/ollama): the older
``.System``/``.Prompt``/``.Response`` form they had until August 2024, and the ``.Messages`` form since. The
expected texts are Ollama's ``template/testdata`` renderings of the same three conversations (Ollama's test
trims the trailing space that ``[/INST] {{ .Response }}`` leaves; the space is kept here, as Ollama sends it).
"""

from __future__ import annotations

import re

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tinytitan.models.go_template import Untranslatable, translate

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Hello, how are you?"}
ANSWER = {"role": "assistant", "content": "I'm doing great. How can I help you today?"}
AGAIN = {"role": "user", "content": "I'd like to show off how chat templating works!"}
CONVERSATIONS = {"user": [USER], "user-assistant-user": [USER, ANSWER, AGAIN],
                 "system-user-assistant-user": [SYSTEM, USER, ANSWER, AGAIN]}

LEGACY = {
    "llama2-chat": "[INST] <<SYS>>\n{{- if .System }}\n{{ .System }}\n{{ end }}<</SYS>>\n\n"
                   "{{ .Prompt }} [/INST] {{ .Response }}</s><s>",
    "mistral-instruct": "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] {{ .Response }}</s>",
    "phi-3": "{{ if .System }}<|system|>\n{{ .System }}<|end|>\n{{ end }}{{ if .Prompt }}<|user|>\n{{ .Prompt }}"
             "<|end|>\n{{ end }}<|assistant|>\n{{ .Response }}<|end|>\n",
    "chatml": "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ if .Prompt }}<|im_start|>"
              "user\n{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ .Response }}<|im_end|>\n",
    "gemma-instruct": "<start_of_turn>user\n{{ if .System }}{{ .System }}\n{{ end }}{{ .Prompt }}<end_of_turn>\n"
                      "<start_of_turn>model\n{{ .Response }}<end_of_turn>\n",
}

EXPECTED = {
    ("llama2-chat", "user"): "[INST] <<SYS>><</SYS>>\n\nHello, how are you? [/INST] ",
    ("llama2-chat", "user-assistant-user"):
        "[INST] <<SYS>><</SYS>>\n\nHello, how are you? [/INST] I'm doing great. How can I help you today?</s><s>"
        "[INST] <<SYS>><</SYS>>\n\nI'd like to show off how chat templating works! [/INST] ",
    ("llama2-chat", "system-user-assistant-user"):
        "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello, how are you? [/INST] I'm doing great. "
        "How can I help you today?</s><s>[INST] <<SYS>><</SYS>>\n\nI'd like to show off how chat templating works! "
        "[/INST] ",
    ("mistral-instruct", "user"): "[INST] Hello, how are you?[/INST] ",
    ("mistral-instruct", "user-assistant-user"):
        "[INST] Hello, how are you?[/INST] I'm doing great. How can I help you today?</s>[INST] I'd like to show "
        "off how chat templating works![/INST] ",
    ("mistral-instruct", "system-user-assistant-user"):
        "[INST] You are a helpful assistant.\n\nHello, how are you?[/INST] I'm doing great. How can I help you "
        "today?</s>[INST] I'd like to show off how chat templating works![/INST] ",
    ("phi-3", "user"): "<|user|>\nHello, how are you?<|end|>\n<|assistant|>\n",
    ("phi-3", "user-assistant-user"):
        "<|user|>\nHello, how are you?<|end|>\n<|assistant|>\nI'm doing great. How can I help you today?<|end|>\n"
        "<|user|>\nI'd like to show off how chat templating works!<|end|>\n<|assistant|>\n",
    ("phi-3", "system-user-assistant-user"):
        "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello, how are you?<|end|>\n<|assistant|>\n"
        "I'm doing great. How can I help you today?<|end|>\n<|user|>\nI'd like to show off how chat templating "
        "works!<|end|>\n<|assistant|>\n",
    ("chatml", "system-user-assistant-user"):
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello, how are you?"
        "<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user"
        "\nI'd like to show off how chat templating works!<|im_end|>\n<|im_start|>assistant\n",
    ("gemma-instruct", "system-user-assistant-user"):
        "<start_of_turn>user\nYou are a helpful assistant.\nHello, how are you?<end_of_turn>\n<start_of_turn>model"
        "\nI'm doing great. How can I help you today?<end_of_turn>\n<start_of_turn>user\nI'd like to show off how "
        "chat templating works!<end_of_turn>\n<start_of_turn>model\n",
}

# the same templates in the .Messages form Ollama's library has carried since (template/*.gotmpl today)
MESSAGES = {
    "phi-3": "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}<|end|>\n{{ end }}<|assistant|>\n",
    "chatml": "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
              "<|im_start|>assistant\n",
}


def render(template: str, messages: list[dict]) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


@pytest.mark.parametrize("name, conversation", sorted(EXPECTED))
def test_an_older_template_renders_history_as_ollama_does(name, conversation):
    assert render(translate(LEGACY[name]), CONVERSATIONS[conversation]) == EXPECTED[name, conversation]


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_both_forms_of_a_library_template_render_alike(name):
    for conversation in CONVERSATIONS.values():
        assert render(translate(MESSAGES[name]), conversation) == render(translate(LEGACY[name]), conversation)


def test_turns_are_cut_as_ollama_cuts_them():
    """Consecutive messages of one role are one (joined by a blank line); a tool message is left out; a
    system message mid-conversation closes the turn before it; the last turn stops at ``{{ .Response }}``,
    inside the blocks it sits in (their ``else`` cut too); a template without ``.Response`` gets one."""
    tmpl = translate("{{ if .System }}S:{{ .System }}\n{{ end }}U:{{ .Prompt }}\n"
                     "{{ if .Prompt }}A:{{ .Response }}|{{ else }}none{{ end }}END\n")
    convo = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
             {"role": "assistant", "content": "x"}, {"role": "tool", "content": "ignored"},
             {"role": "system", "content": "late"}, {"role": "system", "content": "later"},
             {"role": "user", "content": "c"}]
    assert render(tmpl, convo) == "U:a\n\nb\nA:x|END\nS:late\n\nlater\nU:c\nA:"
    assert render(translate("Q: {{ .Prompt }}\n"), [USER, ANSWER, AGAIN]) == \
        "Q: Hello, how are you?\nI'm doing great. How can I help you today?Q: I'd like to show off how chat " \
        "templating works!\n"


@pytest.mark.parametrize("source, named", [
    ("{{ .Prompt }}{{ range .Messages }}{{ end }}", ".Prompt is not translated (a field the chat template has no "
                                                    "value for beside .Messages)"),
    ("{{ if .Think }}think{{ end }}{{ .Prompt }}", ".Think is not translated"),
    ("{{ .Prompt | printf }}", "the pipe"),
])
def test_what_cannot_be_carried_over_is_refused_by_name(source, named):
    with pytest.raises(Untranslatable, match=re.escape(named)):
        translate(source)


def test_the_translation_is_valid_jinja_for_every_template_here():
    for source in [*LEGACY.values(), *MESSAGES.values()]:
        try:
            render(translate(source), [])
        except jinja2.TemplateError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{source!r}: {exc}")
