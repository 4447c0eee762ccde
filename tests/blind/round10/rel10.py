"""Relation check for round 10 (adapted from round 9's rel9.py): the buggy port's value at its bug line against the correct sibling port's value at the
same line (the sibling is proven equal to torch to ~1e-11 in float64, loss / grads / 3 steps), both in float64 with
torch's weights copied in, on the case's batch. A `_CAP.append(expr)` is inserted after the bug line of both.
Run: timeout 150 python rel10.py NN ...   -> REL.json (merged)"""
import json, os, sys, types
import numpy as np

sys.argv, _args = sys.argv[:1], sys.argv[1:]
import prove10 as P  # noqa: E402  (patches HF to float64, swaps jax dpa)
import jax.numpy as jnp  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
META = json.load(open(os.path.join(HERE, "cases_meta.json")))


def load_with_capture(text, line_no, expr, path):
    L = text.split("\n")
    ind = len(L[line_no - 1]) - len(L[line_no - 1].lstrip())
    L.insert(line_no, " " * ind + f"_CAP.append({expr})")
    src = "\n".join(L)
    for a, b in P.F64_SUBS:
        src = src.replace(a, b)
    mod = types.ModuleType("relcase")
    mod.__dict__["_CAP"] = []
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def captured(mod):
    tm = P.to64_torch(mod.torch_model)
    jm = P.to64_jax(mod.jax_model)
    pairs, tall = P.build_pairs(tm, jm, getattr(mod, "mapping", {}) or {})
    P.copy_weights(pairs, tall)
    mod._CAP.clear()
    loss = mod.jax_loss(jm, P.batch_j(mod.batch))
    if getattr(mod, "_LOSS_CAPTURE", False):  # a loss-relation case (22): the captured value is the loss itself
        return np.asarray(loss).reshape(1)
    return np.asarray(mod._CAP[0])


def check(rel, port, ref):
    kind = rel.split()[0]
    if kind == "factor":
        c = float(rel.split()[1])
        fit = float(np.sum(port * ref) / np.sum(ref * ref))
        res = float(np.max(np.abs(port - fit * ref)) / np.max(np.abs(ref)))
        return res < 1e-9 and abs(fit - c) <= 1e-8 * max(1.0, abs(c)), dict(fitted_factor=fit, stated=c, rel_residual_after_fitted_factor=res)
    if kind == "shift":
        ax = int(rel.split()[-1])
        n = port.shape[ax]
        a = np.take(port, range(1, n), axis=ax)
        b = np.take(ref, range(0, n - 1), axis=ax)
        res = float(np.max(np.abs(a - b)))
        first = float(np.max(np.abs(np.take(port, [0], axis=ax))))
        return res < 1e-9 and first == 0.0, dict(port_t_equals_ref_t_minus_1_maxdiff=res, port_t0_max_abs=first, unshifted_maxdiff=float(np.max(np.abs(port - ref))))
    if kind == "permutation":
        ax = int(rel.split()[-1])
        return None, {}
    if kind == "mask":
        if port.dtype == bool:
            diff = port != ref
            idx = np.argwhere(diff)
            return bool(diff.any()), dict(n_flipped=int(diff.sum()), of=int(diff.size),
                                          positions=sorted({tuple(int(v) for v in r[-2:]) for r in idx})[:20])
        mn = np.finfo(np.float64).min
        pm, rm = port == mn, ref == mn
        both_open = ~pm & ~rm
        agree = float(np.max(np.abs(port[both_open] - ref[both_open]))) if both_open.any() else 0.0
        return bool((pm != rm).any()) and agree < 1e-9, dict(masked_port=int(pm.sum()), masked_torch=int(rm.sum()),
                                                             polarity_reversed=bool(np.all(pm ^ rm)), open_both=int(both_open.sum()), agree_where_both_open=agree)
    return None, {}


def capture_line(text, m):
    """29's bug line is in __init__; its value is captured before InputConv.__call__'s return instead."""
    if m["capture"] == "jnp.stack(outs, axis=1)":  # 19's bug line is inside step(); capture the stacked outputs in __call__
        L = text.split("\n")
        i = next(k for k in range(len(L)) if L[k].strip() == "return jnp.stack(outs, axis=1)")
        return i, 8  # insert before the return line (index i = line i+1), 8 spaces
    return None


def load_cap(text, m, path):
    if m["capture"] == "__loss__":
        src = text
        for a_, b_ in P.F64_SUBS:
            src = src.replace(a_, b_)
        mod = types.ModuleType("relcase")
        mod.__dict__["_CAP"] = []
        mod.__dict__["_LOSS_CAPTURE"] = True
        exec(compile(src, path, "exec"), mod.__dict__)
        return mod
    cl = capture_line(text, m)
    if cl is None:
        return load_with_capture(text, m["lines"][0], m["capture"], path)
    i, ind = cl
    L = text.split("\n")
    L.insert(i, " " * ind + f"_CAP.append({m['capture']})")
    src = "\n".join(L)
    for a_, b_ in P.F64_SUBS:
        src = src.replace(a_, b_)
    mod = types.ModuleType("relcase")
    mod.__dict__["_CAP"] = []
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def main():
    out = os.path.join(HERE, "REL.json")
    for fn, m in sorted(META.items()):
        if not m["capture"] or (_args and not any(fn.startswith(a) for a in _args)):
            continue
        a = m["lines"][0]
        bug = open(os.path.join(HERE, fn)).read()
        base = open(os.path.join(HERE, "base", m["base"] + ".py")).read().split("\n")
        head = bug.split("\n")[:6]
        corr = "\n".join(head + base[6:])
        assert corr.split("\n")[a - 1] != bug.split("\n")[a - 1]
        mb, mc = load_cap(bug, m, fn), load_cap(corr, m, fn)
        port, ref = captured(mb), captured(mc)
        rel = m["relation"]
        if rel == "permutation axis 2":
            nh, hd = mb.NH, getattr(mb, 'HD', None) or mb.DH
            perm = np.array([h * hd + d for d in range(hd) for h in range(nh)])
            res = float(np.max(np.abs(port - ref[..., perm])))
            ok, info = res < 1e-9, dict(axis=2, perm=perm.tolist(), maxdiff_after_perm=res, maxdiff_raw=float(np.max(np.abs(port - ref))))
        elif rel == "permutation axis 3":
            c = port.shape[3] // 2
            perm = list(range(c, 2 * c)) + list(range(c))  # port channels [up, skip] == torch's [skip, up] swapped halves
            res = float(np.max(np.abs(port - ref[..., perm])))
            ok, info = res < 1e-9, dict(axis=3, perm=perm, maxdiff_after_perm=res, maxdiff_raw=float(np.max(np.abs(port - ref))))
        elif rel == "permutation axis 1":
            n = port.shape[1]
            perm = [(i + 1) % n for i in range(n)]  # port token i == torch token i+1; port's last == torch's first (cls)
            res = float(np.max(np.abs(port - ref[:, perm])))
            ok, info = res < 1e-9, dict(axis=1, perm=perm, maxdiff_after_perm=res, maxdiff_raw=float(np.max(np.abs(port - ref))))
        elif rel.startswith("offset"):
            c = float(rel.split()[1])
            res = float(np.max(np.abs(port - (ref + c))))
            ok, info = res == 0.0, dict(maxdiff_port_vs_ref_plus_c=res, port_row0=port[0].tolist(), ref_row0=ref[0].tolist(), port_row1=port[1].tolist(), ref_row1=ref[1].tolist())
        else:
            ok, info = check(rel, port, ref)
        info.update(shape=list(port.shape), captured=m["capture"], line=a)
        print(fn, rel, "HOLDS" if ok else "FAILS", {k: v for k, v in info.items() if k != "perm"}, flush=True)
        d = json.load(open(out)) if os.path.exists(out) else {}
        d[fn] = dict(relation=rel, holds=bool(ok), **info)
        json.dump(d, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
