"""Ollama's Go templates, translated to Jinja and rendered as a chat template renders (transformers' sandbox,
``trim_blocks`` and ``lstrip_blocks``), compared with what Ollama itself writes.

The templates are Ollama's own library templates (``template/*.gotmpl`` in ollama/ollama): the older
``.System``/``.Prompt``/``.Response`` form they had until August 2024, and the ``.Messages`` form since
(``$system`` reassigned in a range, ``printf``, ``continue``). The
expected texts are Ollama's ``template/testdata`` renderings of the same three conversations (Ollama's test
trims the trailing space that ``[/INST] {{ .Response }}`` leaves; the space is kept here, as Ollama sends it).
"""

from __future__ import annotations

import re
from pathlib import Path

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

# Ollama's library templates as they are today: $variables set in a range, printf, continue
TODAY = {
    "llama2-chat": '{{- $system := "" }}[INST] {{ range .Messages }}\n{{- if eq .Role "system" }}\n'
                   '{{- if not $system }}{{ $system = .Content }}\n{{- else }}{{ $system = printf "%s\\n\\n%s" '
                   '$system .Content }}\n{{- end }}\n{{- else if eq .Role "user" }}<<SYS>>\n{{- if $system }}\n'
                   '{{ $system }}\n{{ $system = "" }}\n{{- end }}<</SYS>>\n\n{{ .Content }} [/INST]\n'
                   '{{- else if eq .Role "assistant" }} {{ .Content }}</s><s>[INST] {{ end }}\n{{- end }}',
    "mistral-instruct": '[INST] {{ range $index, $_ := .Messages }}\n{{- if eq .Role "system" }}{{ .Content }}\n\n'
                        '{{ else if eq .Role "user" }}{{ .Content }}[/INST]\n{{- else if eq .Role "assistant" }} '
                        '{{ .Content }}</s>[INST] {{ end }}\n{{- end }}',
    "gemma-instruct": '{{- $system := "" }}\n{{- range .Messages }}\n{{- if eq .Role "system" }}\n'
                      '{{- if not $system }}{{ $system = .Content }}\n{{- else }}{{ $system = printf "%s\\n\\n%s" '
                      '$system .Content }}\n{{- end }}\n{{- continue }}\n{{- else if eq .Role "user" }}'
                      '<start_of_turn>user\n{{- if $system }}\n{{ $system }}\n{{- $system = "" }}\n{{- end }}\n'
                      '{{- else if eq .Role "assistant" }}<start_of_turn>model\n{{- end }}\n{{ .Content }}'
                      '<end_of_turn>\n{{ end }}<start_of_turn>model\n',
    "vicuna": '{{- $system := "" }}\n{{- range .Messages }}\n{{- if eq .Role "system" }}\n{{- if not $system }}'
              '{{ $system = .Content }}\n{{- else }}{{ $system = printf "%s\\n\\n%s" $system .Content }}\n'
              '{{- end }}\n{{- else if eq .Role "user" }}\n{{- if $system }}{{ $system }}\n\n{{ $system = "" }}\n'
              '{{- end }}USER: {{ .Content }}\n{{ else if eq .Role "assistant" }}ASSISTANT: {{ .Content }}</s>\n'
              '{{ end }}\n{{- end }}ASSISTANT:',
    "falcon-instruct": '{{- range .Messages }}\n{{- if eq .Role "system" }}System: {{ .Content }}\n{{ continue }}\n'
                       '{{- else if eq .Role "user" }}User:\n{{- else if eq .Role "assistant" }}Falcon:\n{{- end }}\n'
                       '{{ .Content }}\n{{ end }}Falcon:\n',
}
TODAY_EXPECTED = {
    **{(n, c): EXPECTED[n, c].rstrip(" ") for n in ("llama2-chat", "mistral-instruct") for c in CONVERSATIONS},
    ("gemma-instruct", "system-user-assistant-user"): EXPECTED["gemma-instruct", "system-user-assistant-user"],
    ("vicuna", "user"): "USER: Hello, how are you?\nASSISTANT:",
    ("vicuna", "system-user-assistant-user"):
        "You are a helpful assistant.\n\nUSER: Hello, how are you?\nASSISTANT: I'm doing great. How can I help "
        "you today?</s>\nUSER: I'd like to show off how chat templating works!\nASSISTANT:",
    ("falcon-instruct", "system-user-assistant-user"):
        "System: You are a helpful assistant.\nUser:\nHello, how are you?\nFalcon:\nI'm doing great. How can I "
        "help you today?\nUser:\nI'd like to show off how chat templating works!\nFalcon:\n",
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


@pytest.mark.parametrize("name, conversation", sorted(TODAY_EXPECTED))
def test_todays_library_templates_render_as_ollama_does(name, conversation):
    assert render(translate(TODAY[name]), CONVERSATIONS[conversation]) == TODAY_EXPECTED[name, conversation]


def test_consecutive_messages_of_a_role_are_one_in_the_messages_form_too():
    two = [SYSTEM, {"role": "system", "content": "Be brief."}, USER, {"role": "user", "content": "Well?"}]
    assert render(translate(TODAY["vicuna"]), two) == \
        "You are a helpful assistant.\n\nBe brief.\n\nUSER: Hello, how are you?\n\nWell?\nASSISTANT:"
    tools = [USER, {"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
    assert render(translate(MESSAGES["chatml"]), tools).count("<|im_start|>tool\n") == 2  # tool results apart


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
    for source in [*LEGACY.values(), *MESSAGES.values(), *TODAY.values()]:
        try:
            render(translate(source), [])
        except jinja2.TemplateError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{source!r}: {exc}")


# -- Ollama's whole library, as fetched into tests/data/ollama (see its README) -------------------------------
LIBRARY = Path(__file__).resolve().parent / "data" / "ollama"
# the templates whose rendering Ollama's own test trims one trailing space from (template_test.go)
TRIMMED = {"chatqa", "llama2-chat", "mistral-instruct", "openchat", "vicuna"}
# (form, its expected outputs): today's .Messages form and the older .System/.Prompt/.Response form share
# Ollama's current testdata (unchanged since the older form's day); the mid-2024 dual form has its own day's
FORMS = {"messages": "testdata", "legacy": "testdata", "dual": "testdata-dual"}
REFUSED = {("messages", "command-r"): ".Properties is not translated"}  # a tool's properties, walked in Go


def _library():
    return [(form, path.stem) for form in FORMS for path in sorted((LIBRARY / form).glob("*.gotmpl"))]


def test_the_whole_library_is_here():
    """Every template of Ollama's library today (20), and the 18 it had in each older form."""
    counts = {form: len(list((LIBRARY / form).glob("*.gotmpl"))) for form in FORMS}
    assert counts == {"messages": 20, "legacy": 18, "dual": 18}, counts
    for form, data in FORMS.items():
        for path in (LIBRARY / form).glob("*.gotmpl"):
            assert {p.name for p in (LIBRARY / data / path.name).iterdir()} == set(CONVERSATIONS), path


@pytest.mark.parametrize("form, name", _library())
def test_every_library_template_renders_ollamas_test_conversations(form, name):
    source = (LIBRARY / form / f"{name}.gotmpl").read_text()
    if (form, name) in REFUSED:
        with pytest.raises(Untranslatable, match=re.escape(REFUSED[form, name])):
            translate(source)
        return
    template = translate(source)
    for conversation, messages in CONVERSATIONS.items():
        out = render(template, messages)
        if name in TRIMMED and out.endswith(" "):
            out = out[:-1]
        assert out == (LIBRARY / FORMS[form] / f"{name}.gotmpl" / conversation).read_text(), (conversation, out)


def test_the_dual_form_renders_its_messages_branch_with_the_system_messages_apart():
    """``{{ if .Messages }}A{{ else }}B{{ end }}``: A, where .Messages leaves the system messages out (they are
    .System), as Ollama rendered it then; B (a .Prompt form) is never reached, so it is never refused."""
    dual = '{{- if .Messages }}{{ .System }}|{{ range .Messages }}{{ .Role }}:{{ .Content }};{{ end }}{{ else }}' \
           '{{ .Prompt }}{{ end }}'
    assert render(translate(dual), CONVERSATIONS["system-user-assistant-user"]) == \
        "You are a helpful assistant.|user:Hello, how are you?;assistant:I'm doing great. How can I help you " \
        "today?;user:I'd like to show off how chat templating works!;"
    # not the dual form: an else-if chain, or text after the block, reads .Prompt beside .Messages
    for source in ('{{ if .Messages }}a{{ else if .Prompt }}{{ .Prompt }}{{ end }}',
                   '{{ if .Messages }}a{{ else }}{{ .Prompt }}{{ end }}{{ .Prompt }}'):
        with pytest.raises(Untranslatable, match="beside .Messages"):
            translate(source)
