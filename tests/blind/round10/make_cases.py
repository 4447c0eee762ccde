"""Builds round 10's cases: each file is a correct base port (base/*.py, proven to match torch in float64) with at most
one exact edit (the bug). LINES is computed from where the edit lands. Run: python make_cases.py"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
from cases10 import CASES  # noqa: E402


def build():
    meta = {}
    for num, name, base, kind, where, rel, sent, edits, cap in CASES:
        src = open(os.path.join(HERE, "base", base + ".py")).read()
        lines = src.split("\n")
        assert lines[0] == '"""EXPECTED: correct' and lines[5] == '"""', base
        body = "\n".join(lines[6:])
        span = None
        for old, new in edits:
            assert body.count(old) == 1, (num, old, body.count(old))
            i = body.index(old)
            body = body[:i] + new + body[i + len(old):]
        head = [f'"""EXPECTED: {kind}', f"WHERE: {where}", "LINES: none", f"RELATION: {rel}", sent, '"""']
        text = "\n".join(head) + "\n" + body
        if edits:
            import difflib
            cl = ("\n".join(head) + "\n" + "\n".join(lines[6:])).split("\n")
            bl = text.split("\n")
            ch = [(j1, j2) for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, cl, bl, autojunk=False).get_opcodes() if op != "equal"]
            lo, hi = min(j1 for j1, _ in ch) + 1, max(j2 for _, j2 in ch)
            head[2] = f"LINES: {lo}-{hi}"
            text = "\n".join(head) + "\n" + body
        fn = f"{num}_{name}.py"
        open(os.path.join(HERE, fn), "w").write(text)
        meta[fn] = dict(base=base, expected=kind, where=where, relation=rel, capture=cap,
                        lines=[int(x) for x in head[2].split(": ")[1].split("-")] if edits else None)
    json.dump(meta, open(os.path.join(HERE, "cases_meta.json"), "w"), indent=1)
    return meta


if __name__ == "__main__":
    m = build()
    for fn, d in m.items():
        if d["lines"]:
            a, b = d["lines"]
            L = open(os.path.join(HERE, fn)).read().split("\n")
            print(f"{fn:42s} {a}-{b}: " + " | ".join(L[k - 1].strip() for k in range(a, b + 1)))
