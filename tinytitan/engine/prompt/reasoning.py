"""Reasoning levels: any dialect's word onto the ladder a chat template actually renders.

Rules:
- Every vocabulary maps onto one scale: off (0) < minimal (1) < low (2) < medium (3) < high (4) < xhigh (5).
  ``True`` means "on" at the server's default level; ``False`` means off.
- A template that reads ``enable_thinking`` is binary: off (``none`` and ``minimal``), or on.
- A template that reads ``reasoning_effort`` renders a ladder (gpt-oss: low / medium / high): the nearest
  rung is taken. A level the template cannot render is substituted and logged, never refused.
- A template that reads neither cannot be steered: the level is logged and nothing reaches the template.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("tinytitan.reasoning")

SCALE = {
    "none": 0, "off": 0, "disabled": 0, "disable": 0, "false": 0, "no": 0, "0": 0,
    "minimal": 1, "min": 1, "lowest": 1,
    "low": 2, "light": 2,
    "medium": 3, "med": 3, "auto": 3, "adaptive": 3, "default": 3, "on": 3, "enabled": 3, "true": 3, "yes": 3,
    "high": 4,
    "xhigh": 5, "x-high": 5, "extra-high": 5, "extra_high": 5, "very-high": 5, "max": 5, "maximum": 5,
    "ultra": 5, "highest": 5,
}
NAMES = ["off", "minimal", "low", "medium", "high", "xhigh"]
EFFORT_LADDER = ("low", "medium", "high")


def level_key(value: str) -> str:
    """A reasoning level as SCALE spells it ("Extra High" → "extra-high")."""
    return str(value).strip().lower().replace(" ", "-")


def level_of(value: str | bool | None, default: int | None) -> int | None:
    """A request's reasoning control as a number on the scale (None: server default, unset)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return (default if default else SCALE["medium"]) if value else 0
    key = level_key(value)
    if key in SCALE:
        return SCALE[key]
    log.warning("unknown reasoning level %r: using medium", value)
    return SCALE["medium"]


@dataclass(frozen=True)
class TemplateReasoning:
    """What a chat template can be told about reasoning."""

    binary: bool  # reads enable_thinking
    ladder: tuple[str, ...]  # the reasoning_effort values it renders (empty: none)

    @classmethod
    def of(cls, template_source: str | None) -> "TemplateReasoning":
        src = template_source or ""
        return cls(binary="enable_thinking" in src, ladder=EFFORT_LADDER if "reasoning_effort" in src else ())

    def kwargs(self, level: int | None) -> dict:
        """The template variables for a level (None: leave the template's own default)."""
        if level is None:
            return {}
        out: dict = {}
        if self.binary:
            out["enable_thinking"] = level > SCALE["minimal"]
        if self.ladder:
            rung = min(self.ladder, key=lambda r: (abs(SCALE[r] - max(level, 1)), -SCALE[r]))
            if SCALE[rung] != level:
                log.info("reasoning level %s rendered as '%s' (the nearest this template knows)", NAMES[level], rung)
            out["reasoning_effort"] = rung
        if not out:
            log.info("reasoning level %s requested, but this template has no reasoning switch", NAMES[level])
        elif self.binary and not self.ladder and level != SCALE["medium"]:
            log.info("reasoning level %s rendered as thinking %s (this template is on/off)", NAMES[level],
                     "on" if level > SCALE["minimal"] else "off")
        return out
