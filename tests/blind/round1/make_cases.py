"""Generates the case files from templates/ by exact, checked replacements (each must match once)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {}


def case(fname, template, expected, where, sentence, reps=()):
    CASES[fname] = (template, expected, where, sentence, reps)


def render(fname):
    template, expected, where, sentence, reps = CASES[fname]
    s = open(os.path.join(HERE, "templates", template)).read()
    head_end = s.index('"""', 3) + 3
    s = f'"""EXPECTED: {expected}\nWHERE: {where}\n{sentence}\n"""' + s[head_end:]
    for old, new in reps:
        n = s.count(old)
        if n != 1:
            raise SystemExit(f"{fname}: replacement matches {n} times: {old[:60]!r}")
        s = s.replace(old, new)
    open(os.path.join(HERE, fname), "w").write(s)


exec(open(os.path.join(HERE, "case_list.py")).read())

if __name__ == "__main__":
    names = [n for n in CASES if not sys.argv[1:] or any(a in n for a in sys.argv[1:])]
    for n in names:
        render(n)
        print("wrote", n)
