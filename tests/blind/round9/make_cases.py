"""Builds round 9's cases: each file is a correct base port (base/*.py, proven to match torch in float64) with at most
one exact edit (the bug). LINES is computed from where the edit lands. Run: python make_cases.py"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

HF_Q = "HF Qwen3ForCausalLM (q/k RMSNorm on the head dim, 4 query / 2 kv heads, right padding) ported by hand"
HF_P = "HF PhiForCausalLM (partial rotary on 4 of 8 head dims, parallel attention + MLP off one LayerNorm, gelu_new) ported by hand"
HF_R = "HF RobertaForSequenceClassification (padding_idx 1 position ids, right padding, <s> classification head, label smoothing 0.1) ported by hand"
HF_V = "HF ViTForImageClassification (16x16 images, 4x4 patches, class token, pre-LN block) ported by hand"
TCN = "A temporal causal CNN (left-padded causal input conv, two depthwise-separable dilated blocks with inference BatchNorm, per-step linear head, centered RMSprop) ported with nnx layers"

MIX = "An MLP-Mixer (4x4 patch stem on 16x16 images, 16 tokens of width 16, two blocks of token- and channel-mixing MLPs, mean pool) ported with nnx layers"
RES = "A ResNet stem plus one BasicBlock (3x3 stride-2 conv, inference BatchNorm, 1x1 stride-2 downsample shortcut), SGD with Nesterov momentum, ported with nnx layers"

CASES = [
    # num, name, base, kind, where, relation, sentence, [(old, new)], capture expr for the relation check
    ("01", "qwen3_correct", "qwen3", "correct", "none", "none", HF_Q + "; torch AdamW as optax.adamw; the port matches.", [], None),
    ("02", "qwen3_qk_norm_after_rotary", "qwen3", "qk_norm_after_rotary", "model.layers.0.self_attn", "none",
     HF_Q + ": the port applies q_norm / k_norm to the rotated queries and keys where Qwen3 normalises them before rotary.",
     [("        q, k = self.q_norm(q), self.k_norm(k)\n        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin\n",
       "        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin\n        q, k = self.q_norm(q), self.k_norm(k)\n")], None),
    ("03", "qwen3_attention_scale_d", "qwen3", "attention_scale_d", "model.layers.0.self_attn", "factor 0.35355339",
     HF_Q + ": the port divides the attention scores by head_dim (8) where Qwen3 multiplies them by head_dim ** -0.5.",
     [('scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * self.hd ** -0.5', 'scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / self.hd')], "scores"),
    ("04", "qwen3_causal_diagonal", "qwen3", "causal_mask_diagonal", "model", "mask",
     HF_Q + ": the port's causal mask is tril(k=-1), masking each query's own key that HF's causal mask keeps.",
     [("causal = jnp.tril(jnp.ones((T, T), dtype=bool))", "causal = jnp.tril(jnp.ones((T, T), dtype=bool), k=-1)")], "causal"),
    ("05", "qwen3_loss_padding_not_masked", "qwen3", "padding_not_masked", "loss", "none",
     HF_Q + ": the port's causal-LM loss averages the cross-entropy over every position, padded targets included, where torch ignores them (-100).",
     [("    return jnp.sum(nll * valid) / jnp.sum(valid)", "    return jnp.mean(nll)")], None),
    ("06", "qwen3_adamw_nesterov", "qwen3", "adam_nesterov", "optimizer", "none",
     HF_Q + ": torch AdamW uses plain Adam momentum; the port's optax.adamw is built with nesterov=True (NAdam-style).",
     [("jax_optimizer = optax.adamw(3e-3, eps=1e-4, weight_decay=0.05)", "jax_optimizer = optax.adamw(3e-3, eps=1e-4, weight_decay=0.05, nesterov=True)")], None),
    ("07", "qwen3_k_norm_stop_gradient", "qwen3", "stop_gradient", "model.layers.0.self_attn", "none",
     HF_Q + ": the port passes the normalised keys through jax.lax.stop_gradient (forward unchanged), so k_proj and k_norm get no gradient where torch trains them.",
     [("        q, k = self.q_norm(q), self.k_norm(k)", "        q, k = self.q_norm(q), jax.lax.stop_gradient(self.k_norm(k))")], None),
    ("08", "phi_correct", "phi", "correct", "none", "none", HF_P + "; SGD with momentum; the port matches.", [], None),
    ("09", "phi_partial_rotary_full_dim", "phi", "partial_rotary_full_dim", "model.layers.0.self_attn", "none",
     HF_P + ": the port rotates all 8 head dims (ROT = head_dim, frequencies over 8 dims) where Phi's partial_rotary_factor 0.5 rotates only the first 4.",
     [("NH, HD, ROT = 4, 8, 4  # rotary on the first 4 of the 8 head dims", "NH, HD, ROT = 4, 8, 8  # rotary on the head dims")], None),
    ("10", "phi_parallel_as_sequential", "phi", "parallel_residual_sequential", "model.layers.0", "none",
     HF_P + ": the port adds the attention output to the residual first and feeds the MLP a fresh LayerNorm of that sum, where Phi runs attention and MLP in parallel on one LayerNorm of the input.",
     [("        return self.self_attn(h, cos, sin, bias) + self.mlp(h) + x", "        x = x + self.self_attn(h, cos, sin, bias)\n        return x + self.mlp(self.input_layernorm(x))")], None),
    ("11", "phi_gelu_new_as_exact", "phi", "activation_swapped", "model.layers.0.mlp", "none",
     HF_P + ": the port's MLP uses the exact erf GELU where Phi's hidden_act gelu_new is the tanh approximation.",
     [("return self.fc2(jax.nn.gelu(self.fc1(x), approximate=True))", "return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))")], None),
    ("12", "phi_causal_diagonal", "phi", "causal_mask_diagonal", "model", "mask",
     HF_P + ": the port's causal mask allows keys strictly before the query (ki < qi), masking the diagonal HF keeps.",
     [("allowed = (ki <= qi)[None, None] & (attention_mask[:, None, None, :] == 1)", "allowed = (ki < qi)[None, None] & (attention_mask[:, None, None, :] == 1)")], "allowed"),
    ("13", "phi_heads_merge_order", "phi", "heads_merge_order", "model.layers.0.self_attn", "permutation axis 2",
     HF_P + ": before the dense projection the port merges the heads as (head_dim, heads) where HF concatenates head after head (heads, head_dim).",
     [("o = jnp.matmul(w, v).transpose(0, 2, 1, 3).reshape(B, T, NH * HD)", "o = jnp.matmul(w, v).transpose(0, 2, 3, 1).reshape(B, T, NH * HD)")], "o"),
    ("14", "roberta_correct", "roberta", "correct", "none", "none", HF_R + "; Adam(betas=(0.9, 0.98)); the port matches.", [], None),
    ("15", "roberta_position_ids_offset", "roberta", "position_ids_offset", "roberta.embeddings", "offset -1",
     HF_R + ": the port's position ids are cumsum(mask) * mask without the + padding_idx, so every position id is one less than RoBERTa's (real tokens from 1, padding at 0).",
     [("position_ids = jnp.cumsum(not_pad, axis=1) * not_pad + PAD", "position_ids = jnp.cumsum(not_pad, axis=1) * not_pad")], "position_ids"),
    ("16", "roberta_mask_polarity", "roberta", "mask_polarity", "roberta.encoder.layer.0.attention.self", "mask",
     HF_R + ": the port keeps the scores of padding keys and masks the real ones, HF's attention-mask polarity reversed.",
     [("s = jnp.where(key_mask[:, None, None, :], s, jnp.finfo(s.dtype).min)", "s = jnp.where(~key_mask[:, None, None, :], s, jnp.finfo(s.dtype).min)")], "s"),
    ("17", "roberta_attention_not_scaled", "roberta", "attention_not_scaled", "roberta.encoder.layer.0.attention.self", "factor 2.82842712",
     HF_R + ": the port leaves the attention scores unscaled where RoBERTa divides them by sqrt(head_dim) = sqrt(8).",
     [('s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(DH).astype(x.dtype)', 's = jnp.einsum("bqhd,bkhd->bhqk", q, k)')], "s"),
    ("18", "roberta_label_smoothing_dropped", "roberta", "label_smoothing_dropped", "loss", "none",
     HF_R + ": the port's cross-entropy uses hard one-hot targets where torch's loss has label_smoothing=0.1.",
     [("target = optax.smooth_labels(jax.nn.one_hot(batch[\"labels\"], NCLS, dtype=logits.dtype), LS)", "target = jax.nn.one_hot(batch[\"labels\"], NCLS, dtype=logits.dtype)")], None),
    ("19", "roberta_adam_beta2_default", "roberta", "adam_beta2_default", "optimizer", "none",
     HF_R + ": torch Adam has betas=(0.9, 0.98); the port's optax.adam keeps the default b2=0.999.",
     [("jax_optimizer = optax.adam(1e-2, b1=0.9, b2=0.98, eps=1e-3)", "jax_optimizer = optax.adam(1e-2, eps=1e-3)")], None),
    ("20", "roberta_classifier_stop_gradient", "roberta", "stop_gradient", "classifier", "none",
     HF_R + ": the port's classification head takes the <s> features through jax.lax.stop_gradient (forward unchanged), so the encoder gets no gradient where torch fine-tunes it.",
     [("        x = h[:, 0, :]", "        x = jax.lax.stop_gradient(h[:, 0, :])")], None),
    ("21", "vit_correct", "vit", "correct", "none", "none", HF_V + "; torch AdamW (default weight_decay 0.01); the port matches.", [], None),
    ("22", "vit_cls_token_appended", "vit", "cls_token_position", "vit.embeddings", "permutation axis 1",
     HF_V + ": the port appends the class token after the patches where ViT prepends it (and the classifier still reads token 0).",
     [("tokens = jnp.concatenate([cls, patches], axis=1)", "tokens = jnp.concatenate([patches, cls], axis=1)")], "tokens"),
    ("23", "vit_norm_after_residual", "vit", "norm_after_residual", "vit.layers.0", "none",
     HF_V + ": the port's MLP sub-block applies layernorm_after to the residual sum (post-LN) where ViT normalises the MLP's input (pre-LN).",
     [("        x = x + self.mlp(self.layernorm_after(x))", "        x = self.layernorm_after(x + self.mlp(x))")], None),
    ("24", "vit_attention_scale_d", "vit", "attention_scale_d", "vit.layers.0.attention", "factor 0.35355339",
     HF_V + ": the port divides the attention logits by head_dim (8) where ViT scales by head_dim ** -0.5.",
     [('logits = jnp.einsum("bnhd,bmhd->bhnm", q, k) * HD ** -0.5', 'logits = jnp.einsum("bnhd,bmhd->bhnm", q, k) / HD')], "logits"),
    ("25", "vit_loss_sum", "vit", "loss_sum_not_mean", "loss", "factor 2",
     HF_V + ": the port sums the per-image cross-entropy over the batch of 2 where torch's cross_entropy averages it.",
     [("return optax.softmax_cross_entropy_with_integer_labels(logits, batch[\"labels\"]).mean()", "return optax.softmax_cross_entropy_with_integer_labels(logits, batch[\"labels\"]).sum()")], None),
    ("26", "vit_cls_token_stop_gradient", "vit", "stop_gradient", "vit.embeddings", "none",
     HF_V + ": the port reads the class token through jax.lax.stop_gradient (forward unchanged), so cls_token gets no gradient where torch trains it.",
     [("cls = jnp.broadcast_to(self.cls_token[...], (patches.shape[0], 1, D))", "cls = jnp.broadcast_to(jax.lax.stop_gradient(self.cls_token[...]), (patches.shape[0], 1, D))")], None),
    ("27", "vit_adamw_default_decay", "vit", "weight_decay_default", "optimizer", "none",
     HF_V + ": torch AdamW's default weight_decay is 0.01; the port calls optax.adamw with its default 1e-4.",
     [("jax_optimizer = optax.adamw(5e-3, weight_decay=0.01)", "jax_optimizer = optax.adamw(5e-3)")], None),
    ("28", "tcn_correct", "tcn", "correct", "none", "none", TCN + "; the port matches.", [], None),
    ("29", "tcn_causal_pad_wrong_side", "tcn", "causal_padding_side", "inp", "shift axis 1",
     TCN + ": the port's kernel-2 input conv pads one step on the right where torch pads on the left, so each output sees the next step (the conv leaks the future).",
     [("self.conv = nnx.Conv(CIN, C, (2,), padding=((1, 0),), rngs=rngs)", "self.conv = nnx.Conv(CIN, C, (2,), padding=((0, 1),), rngs=rngs)")], "self.conv(x)"),
    ("30", "tcn_dilation_dropped", "tcn", "dilation_dropped", "block1.depthwise", "none",
     TCN + ": the port builds each block's depthwise conv without the block's dilation (block1 should dilate by 2; padding still 4 steps on the left).",
     [("self.depthwise = CausalConv(C, C, 3, rngs, dilation=dilation, groups=C)", "self.depthwise = CausalConv(C, C, 3, rngs, groups=C)")], None),
    ("31", "tcn_batchnorm_batch_stats", "tcn", "batchnorm_mode", "block0.norm", "none",
     TCN + ": the port's BatchNorm normalises with the batch statistics (use_running_average=False) where the torch model is in eval mode and uses the running statistics.",
     [("self.norm = nnx.BatchNorm(C, use_running_average=True, momentum=0.9, epsilon=1e-5, rngs=rngs)", "self.norm = nnx.BatchNorm(C, use_running_average=False, momentum=0.9, epsilon=1e-5, rngs=rngs)")], None),
    ("32", "tcn_stem_stop_gradient", "tcn", "stop_gradient", "inp", "none",
     TCN + ": the port passes the input conv's output through jax.lax.stop_gradient (forward unchanged), so the stem gets no gradient where torch trains it.",
     [("        h = self.inp(x)", "        h = jax.lax.stop_gradient(self.inp(x))")], None),
    ("33", "tcn_mse_sum_over_features", "tcn", "loss_reduction_wrong", "loss", "factor 3",
     TCN + ": the port sums the squared error over the 3 output features before averaging over batch and time, where torch's mse_loss averages over every element.",
     [("return jnp.mean((model(batch[\"x\"]) - batch[\"y\"]) ** 2)", "return jnp.mean(jnp.sum((model(batch[\"x\"]) - batch[\"y\"]) ** 2, axis=-1))")], None),
    ("34", "tcn_rmsprop_eps_in_sqrt", "tcn", "rmsprop_eps_placement", "optimizer", "none",
     TCN + ": torch RMSprop adds eps outside the square root; the port's optax.rmsprop keeps its default eps_in_sqrt=True.",
     [("jax_optimizer = optax.rmsprop(1e-2, decay=0.9, eps=1e-3, centered=True, eps_in_sqrt=False)", "jax_optimizer = optax.rmsprop(1e-2, decay=0.9, eps=1e-3, centered=True)")], None),
    ("35", "mixer_correct", "mixer", "correct", "none", "none", MIX + "; SGD with momentum and weight decay; the port matches.", [], None),
    ("36", "mixer_token_mixing_wrong_axis", "mixer", "token_mixing_wrong_axis", "blocks.0", "none",
     MIX + ": the port applies the token-mixing MLP to the normalised tokens as they are (mixing along the channel axis, which has the same size 16) where Mixer transposes so it mixes along the token axis.",
     [("x = x + jnp.swapaxes(self.token_mlp(jnp.swapaxes(self.norm1(x), 1, 2)), 1, 2)", "x = x + self.token_mlp(self.norm1(x))")], None),
    ("37", "mixer_residual_dropped", "mixer", "residual_dropped", "blocks.0", "none",
     MIX + ": the port's channel-mixing sub-block returns the MLP output alone, dropping its skip connection.",
     [("x = x + self.channel_mlp(self.norm2(x))", "x = self.channel_mlp(self.norm2(x))")], None),
    ("38", "resnet_correct", "resnet", "correct", "none", "none", RES + "; the port matches.", [], None),
    ("39", "resnet_stride_padding_same", "resnet", "conv_padding_side", "layer1.conv1", "none",
     RES + ": the port's stride-2 3x3 conv uses padding='SAME' (0 before, 1 after on an 8x8 input) where torch pads 1 on each side.",
     [("strides=(stride, stride), padding=((1, 1), (1, 1)), use_bias=False", "strides=(stride, stride), padding=\"SAME\", use_bias=False")], None),
    ("40", "resnet_relu_before_add", "resnet", "activation_before_residual", "layer1", "none",
     RES + ": the port applies the block's final ReLU before adding the shortcut where torch applies it to the sum.",
     [("        return nnx.relu(out + shortcut)", "        return nnx.relu(out) + shortcut")], None),
    ("41", "resnet_nesterov_dropped", "resnet", "momentum_not_nesterov", "optimizer", "none",
     RES + ": torch SGD has nesterov=True; the port's optax.sgd uses plain heavy-ball momentum.",
     [("jax_optimizer = optax.sgd(0.1, momentum=0.9, nesterov=True)", "jax_optimizer = optax.sgd(0.1, momentum=0.9)")], None),
]


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
