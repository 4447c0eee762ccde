"""Round 6 writer B prover (cases 21-31): own loader, float64 truth (loss / grads / K=3 steps), then a bfloat16 pass.

Adapted from round 5's prove.py. Float64: HF's float32 islands (RMSNorm statistics, Gemma's (1 + w) norm, rotary
tables, Gemma2's eager softmax, Mixtral's router softmax) are patched to run in the input dtype; bfloat16: HF unpatched.
Run: timeout 150 /work/main/.venv/bin/python prove_b.py 21 22 ...   -> writes /work/blind-cases/round6/KEY_B.json (merged)
"""
import copy
import glob
import importlib.util
import json
import os
import re
import sys
import time
import warnings

warnings.filterwarnings("ignore")
import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
from flax import nnx

HERE = "/work/blind-cases/round10"
K = 3
_ORIG = []  # (owner, attr, original)


def _set(owner, attr, new):
    _ORIG.append((owner, attr, getattr(owner, attr)))
    setattr(owner, attr, new)


def _patch_hf_float64():
    def rms_forward(self, hidden_states):
        var = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(var + self.variance_epsilon))

    def gemma_rms_forward(self, x):
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return out * (1.0 + self.weight)

    def rot_forward(self, x, position_ids):
        theta = self.config.rope_parameters["rope_theta"]
        dim = 2 * self.inv_freq.shape[0]
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[..., None].to(torch.float64) * inv[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)

    from transformers.models.llama import modeling_llama as ml
    from transformers.models.qwen2 import modeling_qwen2 as mq
    from transformers.models.mistral import modeling_mistral as mm
    from transformers.models.mixtral import modeling_mixtral as mx
    from transformers.models.gemma import modeling_gemma as mg
    from transformers.models.gemma2 import modeling_gemma2 as mg2
    for m, pre in ((ml, "Llama"), (mq, "Qwen2"), (mm, "Mistral"), (mx, "Mixtral")):
        _set(getattr(m, pre + "RMSNorm"), "forward", rms_forward)
        _set(getattr(m, pre + "RotaryEmbedding"), "forward", rot_forward)
    from transformers.models.qwen3 import modeling_qwen3 as mq3
    _set(mq3.Qwen3RMSNorm, "forward", rms_forward)
    _set(mq3.Qwen3RotaryEmbedding, "forward", rot_forward)
    from transformers.models.phi import modeling_phi as mphi
    _set(mphi.PhiRotaryEmbedding, "forward", rot_forward)
    from transformers.models.gpt_neox import modeling_gpt_neox as mn
    _set(mn.GPTNeoXRotaryEmbedding, "forward", rot_forward)
    from transformers.models.t5 import modeling_t5 as mt5
    _set(mt5.T5LayerNorm, "forward", rms_forward)
    for m, pre in ((mg, "Gemma"), (mg2, "Gemma2")):
        _set(getattr(m, pre + "RMSNorm"), "forward", gemma_rms_forward)
        _set(getattr(m, pre + "RotaryEmbedding"), "forward", rot_forward)

    orig_eager = mg2.eager_attention_forward

    def eager64(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kw):
        if scaling is None:
            scaling = module.head_dim ** -0.5
        ks = mg2.repeat_kv(key, module.num_key_value_groups)
        vs = mg2.repeat_kv(value, module.num_key_value_groups)
        w = torch.matmul(query, ks.transpose(2, 3)) * scaling
        if softcap is not None:
            w = torch.tanh(w / softcap) * softcap
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.softmax(w, dim=-1)
        return torch.matmul(w, vs).transpose(1, 2).contiguous(), w

    _set(mg2, "eager_attention_forward", eager64)

    def router64(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        logits = torch.nn.functional.linear(hidden_states, self.weight)
        probs = torch.softmax(logits, dim=-1)
        top, idx = torch.topk(probs, self.top_k, dim=-1)
        top = top / top.sum(dim=-1, keepdim=True)
        return logits, top, idx

    _set(mx.MixtralTopKRouter, "forward", router64)


def _unpatch():
    for owner, attr, orig in reversed(_ORIG):
        setattr(owner, attr, orig)
    _ORIG.clear()


_patch_hf_float64()

_ORIG_DPA = jax.nn.dot_product_attention


def _dpa64(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False, **kw):
    assert not kw or all(v is None for v in kw.values()), kw
    n, kh = query.shape[2], key.shape[2]
    if kh != n:  # grouped-query: query head h reads kv head h // (n // kh), as jax's own reshape does
        key, value = jnp.repeat(key, n // kh, axis=2), jnp.repeat(value, n // kh, axis=2)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    logits = jnp.einsum("BTNH,BSNH->BNTS", query, key) * jnp.asarray(scale, query.dtype)
    if bias is not None:
        logits = logits + bias
    ok = jnp.ones(logits.shape, dtype=bool)
    if mask is not None:
        ok = ok & mask
    if is_causal:
        t, s_ = logits.shape[-2:]
        ok = ok & jnp.tril(jnp.ones((t, s_), dtype=bool))
    logits = jnp.where(ok, logits, jnp.asarray(-0.7 * float(jnp.finfo(jnp.float32).max), logits.dtype))
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("BNTS,BSNH->BTNH", probs, value)


jax.nn.dot_product_attention = _dpa64


def _docline(mod, key):
    for line in (mod.__doc__ or "").strip().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"{mod.__name__}: no {key}")


F64_SUBS = [("jnp.float32", "jnp.float64"), (".float()", ".double()"), ("torch.float32", "torch.float64")]


def load_case(path, f64=True):
    import types
    src = open(path).read()
    if f64:
        for a, b in F64_SUBS:
            src = src.replace(a, b)
    name = os.path.splitext(os.path.basename(path))[0]
    mod = types.ModuleType("case_" + name)
    mod.__file__ = path
    exec(compile(src, path, "exec"), mod.__dict__)
    return name, mod


# ---------------------------------------------------------------- my own loader
def resolve(root, path):
    obj = root
    for part in path.split(".") if path else []:
        if obj is None:
            return None
        if part.isdigit():
            try:
                obj = obj[int(part)]
            except Exception:
                return None
        else:
            obj = getattr(obj, part, None)
    return obj


def map_name(name, mapping):
    for tp, jp in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
        if name == tp or name.startswith(tp + "."):
            return jp + name[len(tp):]
    return name


def t2n(t):
    return t.detach().cpu().numpy().copy()


class Pair:
    """One NNX leaf <- f(torch tensors). gf maps torch grads to the leaf's grad."""

    def __init__(self, tnames, var_owner, attr, f, gf=None, kind="param"):
        self.tnames, self.owner, self.attr, self.f = tnames, var_owner, attr, f
        self.gf = gf or f
        self.kind = kind

    @property
    def var(self):
        return getattr(self.owner, self.attr)


DROPPED = []


def build_pairs(tm, jm, mapping):
    tparams = dict(tm.named_parameters(remove_duplicate=False))
    tbufs = dict(tm.named_buffers())
    seen_ids = {}
    pairs = []
    for mname, mod in tm.named_modules():
        direct = dict(mod.named_parameters(recurse=False))
        dbufs = {k: v for k, v in mod.named_buffers(recurse=False) if k in ("running_mean", "running_var")}
        if not direct and not dbufs:
            continue
        pre = (mname + ".") if mname else ""
        tgt = resolve(jm, map_name(mname, mapping))
        # tied parameters: a module whose every param was already copied and that has no port counterpart
        if tgt is None:
            if all(id(p) in seen_ids for p in direct.values()):
                continue
            raise KeyError(f"no NNX module for torch {mname!r} ({type(mod).__name__})")
        cls = type(mod).__name__
        P = lambda n: pre + n  # noqa: E731
        if isinstance(mod, torch.nn.Linear):
            if id(mod.weight) in seen_ids and getattr(tgt, "kernel", None) is None:
                pass  # tied decoder: its weight is the embedding, already copied; the port holds only the bias
            else:
                pairs.append(Pair([P("weight")], tgt, "kernel", lambda w: w.T))
            if mod.bias is not None and getattr(tgt, "bias", None) is None:
                DROPPED.append(P("bias"))  # the port has no bias here: the loader drops torch's (a bug case)
            elif mod.bias is not None:
                pairs.append(Pair([P("bias")], tgt, "bias", lambda b: b))
        elif cls == "Conv1D":  # HF GPT-2: weight is [in, out]
            pairs.append(Pair([P("weight")], tgt, "kernel", lambda w: w))
            pairs.append(Pair([P("bias")], tgt, "bias", lambda b: b))
        elif isinstance(mod, torch.nn.Conv1d):  # [out, in, k] -> [k, in, out]
            pairs.append(Pair([P("weight")], tgt, "kernel", lambda w: w.transpose(2, 1, 0)))
            if mod.bias is not None:
                pairs.append(Pair([P("bias")], tgt, "bias", lambda b: b))
        elif isinstance(mod, torch.nn.Conv2d):
            pairs.append(Pair([P("weight")], tgt, "kernel", lambda w: w.transpose(2, 3, 1, 0)))
            if mod.bias is not None:
                pairs.append(Pair([P("bias")], tgt, "bias", lambda b: b))
        elif isinstance(mod, torch.nn.Embedding):
            pairs.append(Pair([P("weight")], tgt, "embedding", lambda w: w))
        elif isinstance(mod, (torch.nn.LayerNorm, torch.nn.GroupNorm)) or "RMSNorm" in cls:
            pairs.append(Pair([P("weight")], tgt, "scale", lambda w: w))
            if getattr(mod, "bias", None) is not None:
                pairs.append(Pair([P("bias")], tgt, "bias", lambda b: b))
        elif isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            pairs.append(Pair([P("weight")], tgt, "scale", lambda w: w))
            pairs.append(Pair([P("bias")], tgt, "bias", lambda b: b))
            pairs.append(Pair([P("running_mean")], tgt, "mean", lambda w: w, kind="stat"))
            pairs.append(Pair([P("running_var")], tgt, "var", lambda w: w, kind="stat"))
        elif isinstance(mod, torch.nn.GRU):
          for li in range(mod.num_layers):
            if mod.num_layers > 1:
                try:
                    cell = tgt[li]  # nnx.List of per-layer cells: gru.0, gru.1 (round 3's multi-layer LSTM layout)
                except Exception:
                    cell = tgt.layers[li]
                cell = getattr(cell, "cell", cell)
            else:
                cell = getattr(tgt, "cell", tgt)
            l = f"_l{li}"
            pairs.append(Pair([P("weight_ih" + l)], cell.dense_i, "kernel", lambda w: w.T))
            pairs.append(Pair([P("weight_hh" + l)], cell.dense_h, "kernel", lambda w: w.T))
            if getattr(cell.dense_h, "bias", None) is not None:
                pairs.append(Pair([P("bias_ih" + l)], cell.dense_i, "bias", lambda b: b))
                pairs.append(Pair([P("bias_hh" + l)], cell.dense_h, "bias", lambda b: b))
            else:  # stock nnx.GRUCell: the porter folds bias_hh into the input bias
                pairs.append(Pair([P("bias_ih" + l), P("bias_hh" + l)], cell.dense_i, "bias",
                                  lambda a, b: a + b, gf=lambda a, b: a))
        elif isinstance(mod, torch.nn.LSTM):
            cell = getattr(tgt, "cell", tgt)
            H = mod.hidden_size
            for gi, g in enumerate(["i", "f", "g", "o"]):
                sl = slice(gi * H, (gi + 1) * H)
                ii = getattr(cell, "i" + g if g != "f" else "if_")
                hh = getattr(cell, "h" + g)
                pairs.append(Pair([P("weight_ih_l0")], ii, "kernel", lambda w, sl=sl: w[sl].T))
                pairs.append(Pair([P("weight_hh_l0")], hh, "kernel", lambda w, sl=sl: w[sl].T))
                if getattr(ii, "bias", None) is not None:  # both biases kept
                    pairs.append(Pair([P("bias_ih_l0")], ii, "bias", lambda b, sl=sl: b[sl]))
                    pairs.append(Pair([P("bias_hh_l0")], hh, "bias", lambda b, sl=sl: b[sl]))
                else:  # stock nnx.LSTMCell: one bias per gate = b_ih + b_hh
                    pairs.append(Pair([P("bias_ih_l0"), P("bias_hh_l0")], hh, "bias",
                                      lambda a, b, sl=sl: a[sl] + b[sl], gf=lambda a, b, sl=sl: a[sl]))
        elif isinstance(mod, torch.nn.MultiheadAttention):
            D, Hn = mod.embed_dim, mod.num_heads
            Dh = D // Hn
            for i, nm in enumerate(["query", "key", "value"]):
                sl = slice(i * D, (i + 1) * D)
                pairs.append(Pair([P("in_proj_weight")], getattr(tgt, nm), "kernel",
                                  lambda w, sl=sl: w[sl].T.reshape(D, Hn, Dh)))
                pairs.append(Pair([P("in_proj_bias")], getattr(tgt, nm), "bias",
                                  lambda b, sl=sl: b[sl].reshape(Hn, Dh)))
            pairs.append(Pair([P("out_proj.weight")], tgt.out, "kernel", lambda w: w.T.reshape(Hn, Dh, D)))
            pairs.append(Pair([P("out_proj.bias")], tgt.out, "bias", lambda b: b))
        else:  # a module with its own nn.Parameter (cls token, position embeddings, ...)
            for n in direct:
                attr = n if getattr(tgt, n, None) is not None else ("scale" if n == "weight" else n)
                pairs.append(Pair([P(n)], tgt, attr, lambda w: w))
        for n, p in direct.items():
            seen_ids[id(p)] = P(n)
    # check coverage: every trainable torch parameter is in some pair (by identity)
    covered = {id(tparams[n]) for pr in pairs for n in pr.tnames if n in tparams}
    missing = [n for n, p in tparams.items() if id(p) not in covered and n not in DROPPED]
    if missing:
        raise KeyError(f"torch params not mapped: {missing}")
    tall = {**tparams, **tbufs}
    return pairs, tall


def copy_weights(pairs, tall):
    for pr in pairs:
        val = pr.f(*[t2n(tall[n]) for n in pr.tnames])
        var = pr.var
        assert tuple(var.value.shape) == tuple(val.shape), (pr.tnames, var.value.shape, val.shape)
        var.value = jnp.asarray(val, dtype=var.value.dtype)


# ---------------------------------------------------------------- float64 copies
def to64_torch(tm):
    tm = copy.deepcopy(tm)
    return tm.double()


def to64_jax(jm):
    jm = copy.deepcopy(jm) if False else nnx.clone(jm)
    st = nnx.state(jm)
    st = jax.tree.map(lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x, st)
    nnx.update(jm, st)
    # modules that pin a compute dtype (nnx.Embed defaults dtype=float32) would round back to float32
    for _, node in nnx.iter_graph(jm):
        if isinstance(node, nnx.Module) and getattr(node, "dtype", None) == jnp.float32:
            object.__setattr__(node, "dtype", jnp.float64)
    return jm


def batch_t(b):
    return {k: (torch.tensor(v, dtype=torch.float64) if np.issubdtype(v.dtype, np.floating) else torch.tensor(v))
            for k, v in b.items()}


def batch_j(b):
    return {k: (jnp.asarray(v, dtype=jnp.float64) if np.issubdtype(v.dtype, np.floating) else jnp.asarray(v))
            for k, v in b.items()}


def maxdiff(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    d = np.abs(a - b)
    if np.isnan(d).any():
        return float("inf")
    return float(d.max()) if d.size else 0.0


def as_tx(opt):
    if isinstance(opt, optax.GradientTransformation) or not isinstance(opt, tuple):
        return opt, nnx.Param
    return opt


def prove(path):
    name, mod = load_case(path)
    expected, where = _docline(mod, "EXPECTED"), _docline(mod, "WHERE")
    mapping = getattr(mod, "mapping", {}) or {}
    tm = to64_torch(mod.torch_model)
    jm = to64_jax(mod.jax_model)
    pairs, tall = build_pairs(tm, jm, mapping)
    if getattr(mod, "transfer", True):
        copy_weights(pairs, tall)
    bt, bj = batch_t(mod.batch), batch_j(mod.batch)
    events = []  # (label, diff) in the order a checker would see them

    def compare_leaves(tag, use_grad=False, gj=None):
        for pr in pairs:
            if use_grad and pr.kind != "param":
                continue
            if use_grad and not tall[pr.tnames[0]].requires_grad:
                continue  # frozen in torch (the port freezes it through its optimizer filter)
            if use_grad:
                tg = [tall[n].grad for n in pr.tnames]
                if tg[0] is None:
                    tv = np.zeros(pr.var.value.shape)
                else:
                    tv = pr.gf(*[t2n(g) if g is not None else np.zeros(tuple(tall[n].shape))
                                 for g, n in zip(tg, pr.tnames)])
                jv = resolve_grad(gj, pr)
            else:
                tv = pr.f(*[t2n(tall[n]) for n in pr.tnames])
                jv = np.asarray(pr.var.value)
            events.append((f"{tag} {pr.tnames[0]}", maxdiff(tv, jv)))

    # --- loss and gradients at the start
    jstate_ids = {}
    tm.zero_grad()
    tl = mod.torch_loss(tm, bt)
    tl.backward()
    if getattr(mod, "torch_step", None) is not None and getattr(mod, "torch_optimizer", None) is None:
        pass
    # jax loss and grads: grads w.r.t. all nnx.Param
    jm_for_grad = nnx.clone(jm)
    jl, gj = nnx.jit(lambda m, b: nnx.value_and_grad(mod.jax_loss)(m, b))(jm_for_grad, bj)
    events.append(("loss", maxdiff(float(tl), float(jl))))
    grad_model = jm  # leaf owners refer to jm; map grads through paths

    global _PATHS
    _PATHS = leaf_paths(jm)
    compare_leaves("grad", use_grad=True, gj=gj)
    # --- K steps on fresh copies
    tm2 = to64_torch(mod.torch_model)
    jm2 = to64_jax(mod.jax_model)
    pairs2, tall2 = build_pairs(tm2, jm2, mapping)
    if getattr(mod, "transfer", True):
        copy_weights(pairs2, tall2)
    if os.environ.get("DBG"): print("after copy", float(mod.torch_loss(tm2, bt)), float(mod.jax_loss(jm2, bj)))
    nonlocal_pairs = pairs2
    if getattr(mod, "torch_step", None) is not None:
        tstep = lambda: mod.torch_step(tm2, bt)  # noqa: E731
        jstep = lambda: mod.jax_step(jm2, bj)  # noqa: E731
    else:
        topt_f = getattr(mod, "torch_optimizer", None) or (lambda p: torch.optim.SGD(p, lr=0.1))
        jtx = getattr(mod, "jax_optimizer", None) or optax.sgd(0.1)
        topt = topt_f(tm2.parameters())
        tx, wrt = as_tx(jtx)
        jopt = nnx.Optimizer(jm2, tx, wrt=wrt)

        def tstep():
            topt.zero_grad()
            loss = mod.torch_loss(tm2, bt)
            loss.backward()
            topt.step()
            return loss

        @nnx.jit
        def _jstep(m, o, b):
            loss, g = nnx.value_and_grad(mod.jax_loss, argnums=nnx.DiffState(0, wrt))(m, b)
            o.update(m, g)
            return loss

        def jstep():
            return _jstep(jm2, jopt, bj)

    if os.environ.get("DBG"): print("before loop", float(mod.torch_loss(tm2, bt)), float(mod.jax_loss(jm2, bj)))
    for k in range(1, K + 1):
        lt = tstep()
        lj = jstep()
        events.append((f"step {k} loss", maxdiff(float(lt), float(lj))))
        if os.environ.get("DBG"): print(k, float(lt), float(lj))
        for pr in nonlocal_pairs:
            tv = pr.f(*[t2n(tall2[n]) for n in pr.tnames])
            events.append((f"step {k} {pr.tnames[0]}", maxdiff(tv, np.asarray(pr.var.value))))
    if os.environ.get("DUMP"): [print(lab, d) for lab, d in events if d > float(os.environ["DUMP"])]
    first = next(((lab, d) for lab, d in events if d > 1e-8), None)
    mx = max(d for _, d in events)
    return name, dict(expected=expected, where=where,
                      first_differs=(first[0] if first else None),
                      max_abs_diff=(first[1] if (first and expected != "correct") else mx),
                      max_abs_diff_all=mx)


_PATHS = {}


def leaf_paths(jm):
    """id(Variable) -> path tuple in nnx.state(jm)."""
    out = {}
    for path, var in nnx.iter_graph(jm):
        if isinstance(var, nnx.Variable):
            out[id(var)] = path
    return out


def resolve_grad(gj, pr):
    path = _PATHS[id(pr.var)]
    node = gj
    for p in path:
        node = node[p]
    return np.asarray(node.value if hasattr(node, "value") else node)




def _lines(mod):
    a, b = _docline(mod, "LINES").split("-")
    return [int(a), int(b)]



def main():
    args = sys.argv[1:]
    files = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.py")))
    extra = [a for a in args if a.endswith(".py")]
    args = [a for a in args if not a.endswith(".py")]
    if args:
        files = [f for f in files if any(os.path.basename(f).startswith(a) for a in args)]
    if extra:
        files = extra
    keyp = os.path.join(HERE, "proof.json")
    for f in files:
        t1 = time.time()
        try:
            DROPPED.clear()
            name, rec = prove(f)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            print(f"FAIL {os.path.basename(f)}: {type(e).__name__}: {e}", flush=True)
            continue
        if rec["expected"] == "correct":
            ok = rec["max_abs_diff_all"] < 1e-10
        else:
            ok = rec["first_differs"] is not None and rec["max_abs_diff"] > 1e-6
        rec["proven"] = bool(ok)
        rec["seconds"] = round(time.time() - t1, 1)
        if DROPPED:
            rec["note"] = f"dropped: {DROPPED}"
        print(f"{'OK  ' if ok else 'BAD '} {os.path.basename(f):44s} first={rec['first_differs']} "
              f"diff={rec['max_abs_diff']:.3g} all={rec['max_abs_diff_all']:.3g} ({rec['seconds']}s)", flush=True)
        if "base/" in f:
            continue
        key = json.load(open(keyp)) if os.path.exists(keyp) else {}
        key[os.path.basename(f)] = rec
        tmp = keyp + f".tmp{os.getpid()}"
        json.dump(dict(sorted(key.items())), open(tmp, "w"), indent=1)
        os.replace(tmp, keyp)


if __name__ == "__main__":
    main()
