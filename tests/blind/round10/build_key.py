"""Merges cases_meta.json (make_cases), proof.json (prove10), REL.json (rel10) into KEY.json (round 9's format)."""
import json
from collections import Counter

meta = json.load(open("cases_meta.json")); proof = json.load(open("proof.json"))
rel = json.load(open("REL.json")); relt = {}
f32 = {"01_opt_correct.py": 9.54e-07, "09_distilbert_correct.py": 2.68e-07, "18_gru_correct.py": 1.19e-07,
       "25_unet_correct.py": 1.19e-06}  # f32check10.py: max |diff| over loss, grads, 3 steps (float32)
assert set(meta) == set(proof), set(meta) ^ set(proof)
key = {}
for fn in sorted(meta):
    m, p = meta[fn], proof[fn]
    assert m["expected"] == p["expected"] and m["where"] == p["where"], fn
    src = open(fn).read().split("\n")
    assert src[0] == f'"""EXPECTED: {m["expected"]}' and src[1] == f"WHERE: {m['where']}" and src[3] == f"RELATION: {m['relation']}", fn
    simple = m["relation"] != "none"
    r = dict(expected=m["expected"], where=m["where"], lines=m["lines"], relation=m["relation"],
             relation_checked=bool(simple and (rel.get(fn, {}).get("holds") or relt.get(fn, {}).get("holds"))),
             first_differs=p["first_differs"], max_abs_diff=p["max_abs_diff"], max_abs_diff_all=p["max_abs_diff_all"],
             proven=p["proven"], seconds=p["seconds"], base=m["base"])
    if fn in rel:
        r["relation_check"] = {k: v for k, v in rel[fn].items() if k != "relation"}
    if fn in relt:
        r["relation_check_vs_torch_hook"] = relt[fn]
    if fn in f32:
        r["float32_max_abs_diff_all"] = f32[fn]
    if m["lines"]:
        a, b = m["lines"]
        r["bug_source"] = " | ".join(src[k - 1].strip() for k in range(a, b + 1))
    key[fn] = r
json.dump(key, open("KEY.json", "w"), indent=1)
n_bug = sum(v["expected"] != "correct" for v in key.values())
print(len(key), "cases;", n_bug, "buggy;", len(key) - n_bug, "correct; proven", sum(v["proven"] for v in key.values()),
      "; relations checked", sum(v["relation_checked"] for v in key.values()))
print(Counter(v["where"] for v in key.values() if v["where"] in ("loss", "optimizer")))
print([k for k, v in key.items() if v["expected"] == "stop_gradient"])
print("proof seconds", round(sum(v["seconds"] for v in key.values()), 1))
