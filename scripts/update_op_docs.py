#!/usr/bin/env python3
"""Keeps the option tables of cases/README.md equal to the op definitions.

Every op's table in cases/README.md sits between `<!-- options: NAME -->` and
`<!-- end options -->`; `ckpt-harness list --markdown` prints each one from the op's
definition row (harness/model/ops/<family>.c), so the docs cannot disagree with the code.

    scripts/update_op_docs.py PROG           rewrites the tables in cases/README.md
    scripts/update_op_docs.py --check PROG   exits 1 naming every table that differs, is
                                             missing, or names no op (make check runs this)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DOC = os.path.join(ROOT, "cases", "README.md")
BLOCK = re.compile(r"<!-- options: ([a-z_0-9]+) -->\n.*?<!-- end options -->\n", re.S)


def generated(prog):
    out = subprocess.run([prog, "list", "--markdown"], check=True, capture_output=True,
                         text=True).stdout
    blocks = {m.group(1): m.group(0) for m in BLOCK.finditer(out)}
    if not blocks:
        sys.exit(f"{prog} list --markdown printed no option tables")
    return blocks


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    if len(args) != 1:
        sys.exit(__doc__.strip())
    want = generated(args[0])
    text = open(DOC, encoding="utf-8").read()
    problems = []
    seen = set()

    def replace(m):
        name = m.group(1)
        seen.add(name)
        if name not in want:
            problems.append(f"cases/README.md: an option table for `{name}`, which is no op")
            return m.group(0)
        if m.group(0) != want[name]:
            problems.append(f"cases/README.md: the option table of `{name}` differs from its "
                            "definition (run scripts/update_op_docs.py PROG)")
        return want[name]

    new = BLOCK.sub(replace, text)
    for name in sorted(set(want) - seen):
        problems.append(f"cases/README.md: no option table for `{name}` (add "
                        f"`<!-- options: {name} -->` ... `<!-- end options -->` to its section)")
    if check:
        for p in problems:
            print(p)
        if problems:
            return 1
        print(f"op docs: {len(want)} option tables in cases/README.md match the definitions")
        return 0
    if new != text:
        open(DOC, "w", encoding="utf-8").write(new)
    missing = [p for p in problems if "no option table" in p or "which is no op" in p]
    for p in missing:
        print(p)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
