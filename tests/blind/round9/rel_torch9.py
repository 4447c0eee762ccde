"""Direct torch-side relation checks (no sibling proxy), float64: 15 (position ids vs HF's own), 29 (input conv via a
forward hook), 25 / 33 (loss ratio port / torch with torch's weights copied in)."""
import json, os, sys
import numpy as np, torch
sys.argv = sys.argv[:1]
import rel9 as R  # noqa: E402
P = R.P
out = {}


def load(fn):
    m = R.META[fn]
    return m, R.load_cap(open(fn).read(), m, fn)


# 15: port position_ids == HF RoBERTa create_position_ids_from_input_ids - 1
fn = "15_roberta_position_ids_offset.py"
m, mod = load(fn)
port = R.captured(mod)
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings
hf = RobertaEmbeddings.create_position_ids_from_input_ids(torch.tensor(mod.batch["input_ids"]), padding_idx=1).numpy()
out[fn] = dict(hf_position_ids=hf.tolist(), port_position_ids=port.tolist(), maxdiff_port_vs_hf_minus_1=float(np.max(np.abs(port - (hf - 1)))))
# 29: port inp output at t == torch inp output at t+1
fn = "29_tcn_causal_pad_wrong_side.py"
m, mod = load(fn)
port = R.captured(mod)
tm = P.to64_torch(mod.torch_model)
got = {}
h = tm.inp.register_forward_hook(lambda mm, i, o: [got.setdefault("o", o.detach().numpy()), None][1])
with torch.no_grad():
    tm(P.batch_t(mod.batch)["x"])
h.remove()
t = got["o"].transpose(0, 2, 1)  # [B, C, T] -> [B, T, C]
out[fn] = dict(port_t_vs_torch_t_plus_1=float(np.max(np.abs(port[:, :-1] - t[:, 1:]))), unshifted=float(np.max(np.abs(port - t))))
# 25 / 33: loss ratio
for fn, c in (("25_vit_loss_sum.py", 2.0), ("33_tcn_mse_sum_over_features.py", 3.0)):
    name, mod = P.load_case(os.path.abspath(fn))
    tm, jm = P.to64_torch(mod.torch_model), P.to64_jax(mod.jax_model)
    pairs, tall = P.build_pairs(tm, jm, {})
    P.copy_weights(pairs, tall)
    tl = float(mod.torch_loss(tm, P.batch_t(mod.batch)))
    jl = float(mod.jax_loss(jm, P.batch_j(mod.batch)))
    out[fn] = dict(torch_loss=tl, port_loss=jl, ratio=jl / tl, stated=c, holds=abs(jl / tl - c) < 1e-12)
print(json.dumps(out, indent=1))
json.dump(out, open("REL_torch.json", "w"), indent=1)
