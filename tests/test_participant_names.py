"""Chat's ``name`` (a participant's) through what joins turns: the leading system turns joined into one, and the
turns a strict template merges. (That a template gets it: test_family_kimi.py.)"""

from __future__ import annotations


def test_turns_a_strict_template_merges_keep_a_name_only_both_had():
    """A template that makes roles alternate gets two user turns in a row as one: a participant's name (Chat's
    ``name``) stays where both turns were that participant's, and goes where they were two people's."""
    from tinytitan.engine.families import FAMILIES
    from tinytitan.engine.families.roles import map_roles

    strict = "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"

    def merged(first: str, second: str) -> dict:
        msgs, _ = map_roles([{"role": "user", "content": "a", "name": first},
                             {"role": "user", "content": "b", "name": second}], None, strict, FAMILIES["generic"].roles)
        (turn,) = msgs
        return turn

    assert merged("alice", "alice")["name"] == "alice"
    assert "name" not in merged("alice", "bob") and merged("alice", "bob")["content"] == "a\n\nb"


def test_leading_system_turns_joined_keep_a_name_all_of_them_share():
    from tinytitan.chat_request import Message
    from tinytitan.protocols.common import place_system

    def lead(*names, texts=()):
        turns = [Message("system", f"rule {i}", name=n) for i, n in enumerate(names)] + [Message("user", "q")]
        return place_system(list(texts), turns)[0]

    assert lead("referee", "referee").name == "referee" and lead("referee", "referee").content == "rule 0\n\nrule 1"
    assert lead("referee", "coach").name is None and lead("referee", None).name is None
    assert lead("referee", texts=["instructions"]).name is None  # joined with text that has no name
