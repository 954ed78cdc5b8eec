"""The deterministic training corpus for the demo tokenizer: word lists + a seeded ``random.Random``."""

from __future__ import annotations

import bisect
import json
import random
from typing import Any, List, Optional

from .recipe import SEED, _variant
from .words import (
    AUG,
    CODAS,
    ENGLISH,
    EXTS,
    NAMES,
    NUCLEI,
    ONSETS,
    OPS,
    PREFIXES,
    PUNCT_END,
    PY_BUILTINS,
    SUFFIXES,
    TECH,
)


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
        english = ENGLISH.split()
        pseudo = self._pseudo_words(pseudo_words, set(english) | set(TECH))
        # Zipf-like weights over: english (most frequent), tech words, pseudo-words (the long tail).
        self.words = english + TECH + pseudo
        cum, acc = [], 0.0
        for rank in range(len(self.words)):
            acc += 1.0 / (rank + 8.0)
            cum.append(acc)
        self.cum, self.total = cum, acc
        self.tech = TECH + PY_BUILTINS
        self.pseudo = pseudo or english

    def _pseudo_words(self, n: int, taken: set) -> List[str]:
        out, seen, r = [], set(taken), self.r
        while len(out) < n:
            syl = 1 + int(r() * 2.6)
            w = "".join(self.pick(ONSETS) + self.pick(NUCLEI) + self.pick(CODAS) for _ in range(syl))
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
            w = _inflect(w, self.pick(SUFFIXES))
        if 0.95 < x and len(w) > 3:
            w = self.pick(PREFIXES) + w
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
                w = self.pick(NAMES)
            elif x < 0.11:
                w = "`" + self.ident() + "`"
            else:
                w = self.word()
            if i and self.chance(0.07):
                w += ","
            ws.append(w)
        ws[0] = ws[0][:1].upper() + ws[0][1:]
        return " ".join(ws) + self.pick(PUNCT_END)

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
            return f"{self.ident()} {self.pick(OPS)} {self.ident()}"
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
                        stmt = f"raise {self.pick(PY_BUILTINS[-7:])}({self.sentence()!r})"
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
                    lines.append(f"{body}except {self.pick(PY_BUILTINS[-7:])} as e:")
                    lines.append(f"{body}    logger.{self.pick(['info', 'warning', 'error', 'debug'])}(\"%s\", e)")
                else:
                    lines.append(f"{body}{self.ident()} {self.pick(AUG)} {self.expr()}")
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
            return self.pick([f"/home/{self.word()}/{self.ident()}.{self.pick(EXTS)}", self.pick(NAMES), None])
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
            p = "/".join(self.ident(1) for _ in range(1 + self.below(3))) + "." + self.pick(EXTS)
            lines.append(self.pick([
                "$ git "
                + self.pick(["status", "diff", "log --oneline", "add " + p, "commit -m " + repr(self.sentence())]),
                f"$ python -m {self.ident(1)} --{self.ident(2).replace('_', '-')} {self.number()}",
                f"$ cat {p}", f"$ ls -la {p}", f"$ grep -rn {self.ident()!r} {p}",
                f"{p}:{self.below(500)}: {self.pick(['error', 'warning', 'note'])}: {self.sentence()}",
                f"Traceback (most recent call last):\n  File \"{p}\", line {self.below(900)}, in {self.ident()}\n"
                f"{self.pick(PY_BUILTINS[-7:])}: {self.sentence()}",
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
