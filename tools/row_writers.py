"""Which modules of ``tinytitan/engine`` write which fields of a decoder row (``rows.Row``): an assignment, an
augmented assignment or a mutating call (append, extend, ...) on a row's attribute. The decode step's rule is
one owner per piece of state: the rows' own module and the scheduler's fold; this shows where that holds.

    python tools/row_writers.py [REPO]
"""
import ast
import collections
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
src = (root / "tinytitan/engine/decode/rows.py").read_text()
cls = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == "Row")
init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
fields = set()
for n in ast.walk(init):
    ts = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
    for t in ts:
        for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
            if isinstance(e, ast.Attribute) and ast.unparse(e.value) == "self":
                fields.add(e.attr)
MUT = {"append", "extend", "clear", "pop", "insert"}
ROWISH = re.compile(r"^(row|r|self\.row|rows\[.*\]|self\.rows\[.*\]|.*\.rows\[.*\])$")
out = collections.defaultdict(set)
for path in sorted((root / "tinytitan/engine").rglob("*.py")):
    mod = str(path.relative_to(root / "tinytitan/engine"))
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            ts = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in ts:
                targets += t.elts if isinstance(t, ast.Tuple) else [t]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUT:
            targets.append(node.func.value)
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr in fields:
                recv = ast.unparse(t.value)
                if mod == "rows.py" and recv == "self":
                    out[mod].add(t.attr)
                elif recv != "self" and ROWISH.match(recv):
                    out[mod].add(t.attr)
print(f"Row fields: {len(fields)}")
outside = set()
for mod, fs in sorted(out.items()):
    if mod != "rows.py":
        outside |= fs
    print(f"{mod:28s} {len(fs):2d}  {' '.join(sorted(fs))}")
print(f"written outside rows.py: {len(outside)}: {' '.join(sorted(outside))}")
