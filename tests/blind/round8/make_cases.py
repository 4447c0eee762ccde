"""Builds round 8's cases: each file is a correct base port (base/*.py, proven to match torch in float64) with at most
one exact edit (the bug). LINES is computed from where the edit lands. Run: python make_cases.py"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

HF_M = "HF MistralForCausalLM (sliding window 4, 1 kv head, 12 tokens, right padding) ported by hand"
HF_B = "HF BertForMaskedLM (sentence pairs, right padding, tied decoder) ported by hand"
HF_N = "HF GPTNeoXForCausalLM (parallel residual, partial rotary, fused per-head qkv) ported by hand"
HF_X = "HF MixtralForCausalLM (4 experts, top-2, fused 3-D experts) ported by hand"
HF_G = "HF Gemma2ForCausalLM (attention and final soft-capping, sliding/full layers, sandwich norms, tied head) ported by hand"
LSTM = "A time-major nn.LSTM sequence regressor ported with a hand-written NNX LSTM cell keeping torch's two biases"
GN = "A CNN with nn.GroupNorm (4 groups, then 2 groups of 8 channels) and SGD with momentum and weight decay, ported with stock nnx layers"
W2V = "HF Wav2Vec2FeatureEncoder (group-norm conv stack, 3 convs) under a mean-pooled linear classifier trained with label smoothing 0.1, ported with stock nnx layers"
CNX = "A two-stage ConvNeXt (patchify stem, channels-first LayerNorms, 7x7 depthwise blocks with layer scale, AdamW) ported with nnx layers"
T5E = "HF T5EncoderModel (relative position buckets 8 / max distance 16, no attention scaling, right padding) under a token-tagging head, ported by hand"
CLP = "HF CLIPVisionModel (16x16 images, 4x4 patches, class token, quick_gelu, pre/post LayerNorm, pooled class token) under a linear classifier, ported by hand"
WSP = "HF WhisperEncoder (two GELU convs, the second stride 2, frozen sinusoidal positions, pre-LN layers) under a mean-pooled classifier, ported by hand with the position table frozen through the optimizer filter"
MBN = "MobileNetV2 inverted-residual blocks (expand 1x1, depthwise 3x3, project 1x1, ReLU6, inference BatchNorm) ported with stock nnx layers"

CASES = [
    # num, name, base, kind, where, relation, sentence, [(old, new)], capture (anchor, expr) for the relation check
    ("01", "mistral_correct", "mistral", "correct", "none", "none", HF_M + "; torch Adam(weight_decay, eps=1e-6) as add_decayed_weights then adam; the port matches.", [], None),
    ("02", "mistral_attention_scale_d", "mistral", "attention_scale_d", "model.layers.0.self_attn", "factor 0.35355339",
     HF_M + ": the port divides the attention scores by head_dim (8) where Mistral multiplies by head_dim ** -0.5.",
     [("att = jnp.matmul(q, k.swapaxes(-1, -2)) * self.hd ** -0.5", "att = jnp.matmul(q, k.swapaxes(-1, -2)) / self.hd")], "att"),
    ("03", "mistral_causal_diagonal", "mistral", "causal_mask_diagonal", "model", "mask",
     HF_M + ": the port's causal band keeps keys strictly before the query (ki < qi), masking the diagonal that HF's causal mask keeps.",
     [("band = (ki <= qi) & (qi - ki < self.c.sliding_window)", "band = (ki < qi) & (qi - ki < self.c.sliding_window)")], "band"),
    ("04", "mistral_rotary_sign", "mistral", "rotary_sign_flipped", "model.layers.0.self_attn", "factor -1",
     HF_M + ": the port's rotate_half returns (x2, -x1) where HF's returns (-x2, x1), so every rotation turns the other way.",
     [("rot = lambda y: jnp.concatenate((-y[..., half:], y[..., :half]), axis=-1)", "rot = lambda y: jnp.concatenate((y[..., half:], -y[..., :half]), axis=-1)")], "rot(q)"),
    ("05", "mistral_sliding_window_off_by_one", "mistral", "sliding_window_off_by_one", "model", "mask",
     HF_M + ": the port's band keeps keys with qi - ki <= 4 (5 keys) where HF's sliding-window mask keeps qi - ki < 4 (4 keys, the query's own included).",
     [("band = (ki <= qi) & (qi - ki < self.c.sliding_window)", "band = (ki <= qi) & (qi - ki <= self.c.sliding_window)")], "band"),
    ("06", "mistral_heads_merge_order", "mistral", "heads_merge_order", "model.layers.0.self_attn", "permutation axis 2",
     HF_M + ": before o_proj the port merges the heads as (head_dim, heads) where HF concatenates head after head (heads, head_dim).",
     [("y = jnp.matmul(att, v).swapaxes(1, 2).reshape(B, T, self.nh * self.hd)", "y = jnp.matmul(att, v).transpose(0, 2, 3, 1).reshape(B, T, self.nh * self.hd)")], "y"),
    ("07", "mistral_loss_not_shifted", "mistral", "labels_not_shifted", "loss", "none",
     HF_M + ": the port's causal-LM loss scores logits[:, :-1] against input_ids[:, :-1] (the current token) instead of the next token input_ids[:, 1:].",
     [('ce = optax.softmax_cross_entropy_with_integer_labels(out[:, :-1], batch["input_ids"][:, 1:])', 'ce = optax.softmax_cross_entropy_with_integer_labels(out[:, :-1], batch["input_ids"][:, :-1])')], None),
    ("08", "mistral_adam_eps_root", "mistral", "adam_eps_inside_sqrt", "optimizer", "none",
     HF_M + ": torch Adam(eps=1e-6) adds eps outside the square root; the port's optax.adam puts it inside (eps_root) with eps=0.",
     [("optax.adam(3e-3, eps=1e-6))", "optax.adam(3e-3, eps=0.0, eps_root=1e-6))")], None),
    ("09", "mistral_rmsnorm_stop_gradient", "mistral", "stop_gradient", "model.layers.0.input_layernorm", "none",
     HF_M + ": the port's RMSNorm wraps the mean of squares in jax.lax.stop_gradient (forward unchanged) where HF backpropagates through it.",
     [("x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 ** 2, axis=-1, keepdims=True) + self.eps)", "x32 = x32 * jax.lax.rsqrt(jax.lax.stop_gradient(jnp.mean(x32 ** 2, axis=-1, keepdims=True)) + self.eps)")], None),
    ("10", "bert_correct", "bert", "correct", "none", "none", HF_B + ": word + position + token-type embeddings, post-LN eps 1e-12, exact GELU; SGD with momentum; the port matches.", [], None),
    ("11", "bert_mask_polarity", "bert", "mask_polarity", "bert.encoder.layer.0.attention.self", "mask",
     HF_B + ": the port keeps the scores where attention_mask == 0 (padding) and masks the real tokens, HF's polarity reversed.",
     [("s = jnp.where(key_mask[:, None, None, :], s, jnp.finfo(s.dtype).min)", "s = jnp.where(key_mask[:, None, None, :] == 0, s, jnp.finfo(s.dtype).min)")], "s"),
    ("12", "bert_position_ids_offset", "bert", "position_ids_offset", "bert.embeddings", "shift axis 1",
     HF_B + ": the port looks up position embeddings at 1..T (a RoBERTa-style padding offset) where BERT's position_ids are 0..T-1.",
     [("pos = self.position_embeddings(jnp.arange(ids.shape[1]))[None]", "pos = self.position_embeddings(jnp.arange(1, ids.shape[1] + 1))[None]")], "pos"),
    ("13", "bert_attention_not_scaled", "bert", "attention_not_scaled", "bert.encoder.layer.0.attention.self", "factor 2.82842712",
     HF_B + ": the port leaves the attention scores unscaled where BERT divides them by sqrt(head_dim) = sqrt(8).",
     [('s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(DH).astype(x.dtype)', 's = jnp.einsum("bqhd,bkhd->bhqk", q, k)')], "s"),
    ("14", "bert_gelu_tanh", "bert", "activation_swapped", "bert.encoder.layer.0.intermediate", "none",
     HF_B + ": the port's intermediate activation is the tanh approximation of GELU where BERT's hidden_act 'gelu' is the exact erf GELU.",
     [("        return jax.nn.gelu(self.dense(x), approximate=False)\n\n\nclass Layer", "        return jax.nn.gelu(self.dense(x), approximate=True)\n\n\nclass Layer")], None),
    ("15", "bert_ignore_index_not_masked", "bert", "ignore_index_not_masked", "loss", "none",
     HF_B + ": the port's masked-LM loss sums the cross-entropy of every position (the -100 labels replaced by token 0) instead of only the labelled ones, then divides by their count.",
     [("    return (nll * valid).sum() / valid.sum()", "    return nll.sum() / valid.sum()")], None),
    ("16", "convnext_adamw_as_l2", "convnext", "weight_decay_coupled", "optimizer", "none",
     CNX + ": torch AdamW decays the weights apart from the Adam step; the port adds the decay to the gradient before Adam (L2: optax add_decayed_weights then adam).",
     [("jax_optimizer = optax.adamw(3e-3, weight_decay=0.05)", "jax_optimizer = optax.chain(optax.add_decayed_weights(0.05), optax.adam(3e-3))")], None),
    ("17", "bert_token_type_stop_gradient", "bert", "stop_gradient", "bert.embeddings", "none",
     HF_B + ": the port adds the token-type embeddings through jax.lax.stop_gradient (forward unchanged), so token_type_embeddings gets no gradient where torch trains it.",
     [("x = x + self.token_type_embeddings(token_type_ids)", "x = x + jax.lax.stop_gradient(self.token_type_embeddings(token_type_ids))")], None),
    ("18", "neox_embed_scaled", "neox", "hidden_scaled", "gpt_neox", "factor 5.65685425",
     HF_N + ": the port multiplies the token embeddings by sqrt(hidden_size) (a Gemma/T5 habit) where GPT-NeoX uses them unscaled.",
     [("x = self.embed_in(ids)", "x = self.embed_in(ids) * D ** 0.5")], "x"),
    ("19", "neox_sequential_residual", "neox", "parallel_residual_sequential", "gpt_neox.layers.0", "none",
     HF_N + ": the port runs the MLP on the attention block's output (sequential residual) where use_parallel_residual=True feeds both branches the layer input.",
     [("        return x + self.attention(self.input_layernorm(x), cos, sin, allowed) + self.mlp(self.post_attention_layernorm(x))",
       "        h = x + self.attention(self.input_layernorm(x), cos, sin, allowed)\n        return h + self.mlp(self.post_attention_layernorm(h))")], None),
    ("20", "mixtral_topk_not_renormalised", "mixtral", "topk_not_renormalised", "model.layers.0.mlp.gate", "none",
     HF_X + ": the port divides the top-2 router probabilities by the sum over all experts (1) where Mixtral renormalises them by their own sum.",
     [("top = top / jnp.sum(top, axis=-1, keepdims=True)", "top = top / jnp.sum(probs, axis=-1, keepdims=True)")], None),
    ("21", "mixtral_sgd_nesterov", "mixtral", "momentum_nesterov", "optimizer", "none",
     HF_X + ": torch SGD(momentum=0.9) is plain heavy-ball momentum; the port's optax.sgd uses Nesterov momentum.",
     [("jax_optimizer = optax.sgd(0.1, momentum=0.9)", "jax_optimizer = optax.sgd(0.1, momentum=0.9, nesterov=True)")], None),
    ("22", "mixtral_router_stop_gradient", "mixtral", "stop_gradient", "model.layers.0.mlp.gate", "none",
     HF_X + ": the port's router takes its softmax of jax.lax.stop_gradient(logits) (forward unchanged), so the router weights get no gradient where torch trains them.",
     [("probs = jax.nn.softmax(UP(logits), axis=-1)", "probs = jax.nn.softmax(UP(jax.lax.stop_gradient(logits)), axis=-1)")], None),
    ("23", "gemma2_correct", "gemma2", "correct", "none", "none", HF_G + "; the port matches (plain SGD).", [], None),
    ("24", "gemma2_attn_softcap_dropped", "gemma2", "softcap_dropped", "model.layers.0.self_attn", "none",
     HF_G + ": the port's attention scores skip the tanh soft-capping (cap 20) that Gemma2 applies before the mask and softmax.",
     [("s = jnp.tanh(jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * self.scaling / self.cap) * self.cap", "s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * self.scaling")], None),
    ("25", "gemma2_norm_offset_dropped", "gemma2", "norm_offset_dropped", "model.layers.0.input_layernorm", "none",
     HF_G + ": the port's RMSNorm multiplies by weight where Gemma2 multiplies by (1 + weight).",
     [("return (y * (1.0 + upcast(self.scale[...]))).astype(x.dtype)", "return (y * upcast(self.scale[...])).astype(x.dtype)")], None),
    ("26", "gemma2_sliding_window_off_by_one", "gemma2", "sliding_window_off_by_one", "model.layers.0.self_attn", "mask",
     HF_G + ": the sliding layer's band keeps keys with j >= i - 6 (7 keys) where HF keeps j > i - 6 (6 keys).",
     [("ok = ok & (j > i - self.window)", "ok = ok & (j >= i - self.window)")], "ok"),
    ("27", "lstm_correct", "lstm", "correct", "none", "none", LSTM + "; Adam; the port matches.", [], None),
    ("28", "lstm_carry_stop_gradient", "lstm", "stop_gradient", "lstm", "none",
     LSTM + ": the port passes the carry through jax.lax.stop_gradient at every step (truncated backprop, forward unchanged) where torch backpropagates through time.",
     [("carry, y = self.lstm(carry, x[t])", "carry, y = self.lstm(jax.tree.map(jax.lax.stop_gradient, carry), x[t])")], None),
    ("29", "gncnn_groupnorm_groups", "gncnn", "groupnorm_groups_wrong", "gn2", "none",
     GN + ": the port reads torch's GroupNorm(2, 16) as groups of 2 channels (group_size=2, 8 groups) where torch has 2 groups of 8.",
     [("self.gn2 = nnx.GroupNorm(16, num_groups=2,", "self.gn2 = nnx.GroupNorm(16, num_groups=None, group_size=2,")], None),
    ("30", "gncnn_weight_decay_after_momentum", "gncnn", "weight_decay_outside_momentum", "optimizer", "none",
     GN + ": torch SGD adds weight_decay * w to the gradient before the momentum buffer; the port adds it after the momentum trace.",
     [("jax_optimizer = optax.chain(optax.add_decayed_weights(5e-3), optax.sgd(0.05, momentum=0.9))", "jax_optimizer = optax.chain(optax.trace(decay=0.9), optax.add_decayed_weights(5e-3), optax.scale(-0.05))")], None),
    ("31", "wav2vec2_correct", "wav2vec2", "correct", "none", "none", W2V + "; AdamW; the port matches.", [], None),
    ("32", "wav2vec2_label_smoothing", "wav2vec2", "label_smoothing_off", "loss", "none",
     W2V + ": the port spreads the smoothing mass over the K - 1 wrong classes (LS / (K - 1) off target) where torch's label_smoothing gives LS / K to every class.",
     [("target = onehot * (1.0 - LS) + LS / NCLS", "target = onehot * (1.0 - LS) + LS / (NCLS - 1) * (1.0 - onehot)")], None),
    ("33", "wav2vec2_groupnorm_groups", "wav2vec2", "groupnorm_groups_wrong", "feature_extractor.conv_layers.0.layer_norm", "none",
     W2V + ": the port's first-layer GroupNorm has 1 group (one statistic over all channels) where HF's has one group per channel.",
     [("self.layer_norm = nnx.GroupNorm(c_out, num_groups=c_out, epsilon=1e-5, rngs=rngs)", "self.layer_norm = nnx.GroupNorm(c_out, num_groups=1, epsilon=1e-5, rngs=rngs)")], None),
    ("34", "convnext_correct", "convnext", "correct", "none", "none", CNX + "; the port matches.", [], None),
    ("35", "convnext_layer_scale_dropped", "convnext", "layer_scale_dropped", "block0", "none",
     CNX + ": the port's block adds the MLP branch to the shortcut without multiplying by the layer-scale gamma.",
     [("        return shortcut + self.gamma[...] * h", "        return shortcut + h")], None),
    ("36", "convnext_downsample_norm_order", "convnext", "norm_order_swapped", "down_norm", "none",
     CNX + ": the port applies the downsampling LayerNorm after the 2x2 strided conv where ConvNeXt normalises before it.",
     [("x = self.block1(self.down(self.down_norm(x)))\n        return self.head(self.head_norm(x.mean(axis=(1, 2))))", "x = self.block1(self.down_norm(self.down(x)))\n        return self.head(self.head_norm(x.mean(axis=(1, 2))))")], None),
    ("37", "mobilenet_correct", "mobilenet", "correct", "none", "none", MBN + "; SGD with momentum; the port matches.", [], None),
    ("38", "mobilenet_residual_dropped", "mobilenet", "residual_dropped", "block0", "none",
     MBN + ": the port's inverted-residual block returns the projection alone, dropping the identity shortcut that a stride-1 block with equal channels adds.",
     [("out = x + self.bn3(self.project(h))", "out = self.bn3(self.project(h))")], None),
    ("39", "mobilenet_relu6_as_relu", "mobilenet", "activation_swapped", "block0", "none",
     MBN + ": after the depthwise conv the port applies ReLU where MobileNetV2 applies ReLU6 (clipped at 6).",
     [("h = jax.nn.relu6(self.bn2(self.depthwise(h)))", "h = jax.nn.relu(self.bn2(self.depthwise(h)))")], None),
    ("40", "t5_correct", "t5", "correct", "none", "none", T5E + "; SGD with momentum; the port matches.", [], None),
    ("41", "t5_attention_scaled", "t5", "attention_scaled", "t5.encoder.block.0.layer.0.SelfAttention", "factor 0.35355339",
     T5E + ": the port multiplies the attention scores by d_kv ** -0.5 where T5 leaves them unscaled.",
     [('s = jnp.einsum("bqhd,bkhd->bhqk", q, k)', 's = jnp.einsum("bqhd,bkhd->bhqk", q, k) * DKV ** -0.5')], "s"),
    ("42", "t5_relative_bucket_off_by_one", "t5", "relative_bucket_off_by_one", "t5.encoder.block.0.layer.0.SelfAttention", "none",
     T5E + ": the port sends relative position 0 to the 'key after query' half of the buckets (rel >= 0) where T5 uses rel > 0, so the diagonal reads bucket 4 instead of bucket 0.",
     [("buckets = (rel > 0).astype(np.int32) * num_buckets", "buckets = (rel >= 0).astype(np.int32) * num_buckets")], None),
    ("43", "clip_correct", "clip", "correct", "none", "none", CLP + "; SGD with momentum; the port matches.", [], None),
    ("44", "clip_quick_gelu_as_gelu", "clip", "activation_swapped", "clip.encoder.layers.0.mlp", "none",
     CLP + ": the port's MLP uses the exact GELU where CLIP's hidden_act is quick_gelu, x * sigmoid(1.702 x).",
     [("h = h * jax.nn.sigmoid(1.702 * h)", "h = jax.nn.gelu(h, approximate=False)")], None),
    ("45", "clip_mean_pool", "clip", "pooling_mismatch", "clip", "none",
     CLP + ": the port pools the mean over all tokens where CLIP's pooler_output is the class token (position 0) through post_layernorm.",
     [("pooled = x[:, 0]", "pooled = x.mean(axis=1)")], None),
    ("46", "whisper_correct", "whisper", "correct", "none", "none", WSP + "; SGD with momentum; the port matches.", [], None),
    ("47", "whisper_conv_padding_same", "whisper", "conv_padding_side", "encoder.conv2", "none",
     WSP + ": the port's stride-2 conv2 uses padding='SAME', which pads 0 on the left and 1 on the right, where torch pads 1 on each side.",
     [("self.conv2 = nnx.Conv(D, D, (3,), strides=(2,), padding=((1, 1),), rngs=rngs)", "self.conv2 = nnx.Conv(D, D, (3,), strides=(2,), padding=\"SAME\", rngs=rngs)")], None),
    ("48", "whisper_norm_after_residual", "whisper", "norm_after_residual", "encoder.layers.0", "none",
     WSP + ": the port's feed-forward block applies final_layer_norm after the residual sum (post-LN) where Whisper normalises the block's input (pre-LN).",
     [("x = x + self.fc2(jax.nn.gelu(self.fc1(self.final_layer_norm(x)), approximate=False))", "x = self.final_layer_norm(x + self.fc2(jax.nn.gelu(self.fc1(x), approximate=False)))")], None),
    ("49", "t5_loss_per_sequence_mean", "t5", "loss_mean_wrong_axis", "loss", "none",
     T5E + ": the port averages the token losses within each sequence and then over the batch, where torch averages over all real tokens at once (the sequences have 10 and 7 tokens).",
     [('w = batch["attention_mask"].astype(nll.dtype)\n    return (nll * w).sum() / w.sum()', 'w = batch["attention_mask"].astype(nll.dtype)\n    return ((nll * w).sum(axis=1) / w.sum(axis=1)).mean()')], None),
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
