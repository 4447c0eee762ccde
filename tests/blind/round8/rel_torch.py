"""Direct torch-side check of three relations (no sibling proxy): forward hooks on the torch model in float64."""
import json, os, sys
import numpy as np, torch
sys.argv = sys.argv[:1]
import rel8 as R  # noqa: E402
P = R.P
out = {}


def port_and_torch(fn, hook_path, run_torch):
    m = R.META[fn]
    text = open(fn).read()
    mod = R.load_with_capture(text, m["lines"][0], m["capture"], fn)
    port = R.captured(mod)
    tm = P.to64_torch(mod.torch_model)
    got = {}
    h = P.resolve(tm, hook_path).register_forward_hook(lambda mm, i, o: [got.setdefault("o", o.detach().numpy()), None][1])
    with torch.no_grad():
        run_torch(tm, P.batch_t(mod.batch))
    h.remove()
    return mod, port, got["o"]


# 12: port pos[:, t] == torch position_embeddings output at position t + 1
mod, port, t = port_and_torch("12_bert_position_ids_offset.py", "bert.embeddings.position_embeddings",
                              lambda tm, b: tm(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"]))
tw = P.to64_torch(mod.torch_model).bert.embeddings.position_embeddings.weight.detach().numpy()
d12 = float(np.max(np.abs(port[0] - tw[1:8])))
d12b = float(np.max(np.abs(port[0, :-1] - t.reshape(-1, t.shape[-1])[1:7])))
out["12_bert_position_ids_offset.py"] = dict(port_pos_t_vs_torch_pos_table_t_plus_1=d12, port_t_vs_torch_hook_t_plus_1=d12b)
# 18: port x == sqrt(32) * torch embed_in output
mod, port, t = port_and_torch("18_neox_embed_scaled.py", "gpt_neox.embed_in",
                              lambda tm, b: tm(input_ids=b["input_ids"], attention_mask=b["attention_mask"]))
fit = float(np.sum(port * t) / np.sum(t * t))
out["18_neox_embed_scaled.py"] = dict(fitted_factor=fit, residual=float(np.max(np.abs(port - 32 ** 0.5 * t))))
# 04: port rot(q) == -HF rotate_half(q) with q from torch's q_proj (layer 0)
from transformers.models.mistral.modeling_mistral import rotate_half
mod, port, t = port_and_torch("04_mistral_rotary_sign.py", "model.layers.0.self_attn.q_proj",
                              lambda tm, b: tm(input_ids=b["input_ids"], attention_mask=b["attention_mask"]))
B, T = mod.batch["input_ids"].shape
q = torch.tensor(t).reshape(B, T, 4, 8).transpose(1, 2)
ref = rotate_half(q).numpy()
out["04_mistral_rotary_sign.py"] = dict(max_abs_port_plus_hf_rotate_half=float(np.max(np.abs(port + ref))), scale=float(np.max(np.abs(ref))))
print(json.dumps(out, indent=1))
json.dump(out, open("REL_torch.json", "w"), indent=1)
