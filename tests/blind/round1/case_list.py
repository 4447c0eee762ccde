# ---------------------------------------------------------------- MLP
case("01_mlp_correct.py", "mlp.py", "correct", "module",
     "An MLP regressor (per-sample standardised input with unbiased std, LayerNorm eps 1e-5, exact GELU) on stock nnx layers; torch Adam(weight_decay) ported as add_decayed_weights + adam.")
case("02_mlp_gelu_tanh.py", "mlp.py", "gelu_tanh", "module",
     "torch's F.gelu is exact (erf) but the port calls jax.nn.gelu with its default approximate=True (tanh formula).",
     [("h = jax.nn.gelu(self.norm(self.fc1(x)), approximate=False)", "h = jax.nn.gelu(self.norm(self.fc1(x)))"),
      ("h = jax.nn.gelu(self.fc2(h), approximate=False)", "h = jax.nn.gelu(self.fc2(h))")])
case("03_mlp_std_correction.py", "mlp.py", "std_correction", "module",
     "The input standardisation uses torch's unbiased x.std() but jnp.std with its default ddof=0 in the port.",
     [("jnp.std(x, -1, keepdims=True, ddof=1)", "jnp.std(x, -1, keepdims=True)")])
case("04_mlp_adam_coupled_to_adamw.py", "mlp.py", "adam_weight_decay", "optimizer",
     "torch Adam(weight_decay=0.1) is coupled L2 but the port uses optax.adamw (decoupled decay).",
     [("jax_optimizer = optax.chain(optax.add_decayed_weights(0.1), optax.adam(1e-2))",
       "jax_optimizer = optax.adamw(1e-2, weight_decay=0.1)")])
case("05_mlp_adamw_to_coupled.py", "mlp.py", "adam_weight_decay", "optimizer",
     "torch AdamW (decoupled decay) is ported as add_decayed_weights + adam, i.e. torch Adam(weight_decay) (coupled L2).",
     [("return torch.optim.Adam(params, lr=1e-2, weight_decay=0.1)", "return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)")])
case("06_mlp_correct_adamw.py", "mlp.py", "correct", "optimizer",
     "The same MLP trained with torch AdamW, ported as optax.adamw with the weight decay given explicitly (optax's default differs).",
     [("return torch.optim.Adam(params, lr=1e-2, weight_decay=0.1)", "return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)"),
      ("jax_optimizer = optax.chain(optax.add_decayed_weights(0.1), optax.adam(1e-2))",
       "jax_optimizer = optax.adamw(1e-2, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1)")])
_FROZEN = [
    ("    torch_model.norm.bias.uniform_(-0.3, 0.3)\n", "    torch_model.norm.bias.uniform_(-0.3, 0.3)\ntorch_model.fc1.requires_grad_(False)  # frozen first layer\n"),
    ("h = jax.nn.gelu(self.norm(self.fc1(x)), approximate=False)", "h = jax.nn.gelu(self.norm(jax.lax.stop_gradient(self.fc1(x))), approximate=False)"),
    ("return torch.optim.Adam(params, lr=1e-2, weight_decay=0.1)", "return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)"),
]
case("07_mlp_correct_frozen.py", "mlp.py", "correct", "optimizer",
     "fc1 is frozen (requires_grad False, AdamW skips it); the port stops its output and keeps fc1 out of the optimizer with an nnx filter.",
     _FROZEN + [("jax_optimizer = optax.chain(optax.add_decayed_weights(0.1), optax.adam(1e-2))",
                 "jax_optimizer = (optax.adamw(1e-2, weight_decay=0.1), nnx.All(nnx.Param, nnx.Not(nnx.PathContains('fc1'))))")])
case("08_mlp_frozen_weight_decay.py", "mlp.py", "frozen_weight_decay", "optimizer",
     "fc1 is frozen in torch (no grad, AdamW skips it); the port stops its gradient but gives optax.adamw every leaf, so the zero-gradient fc1 is still decayed.",
     _FROZEN + [("jax_optimizer = optax.chain(optax.add_decayed_weights(0.1), optax.adam(1e-2))",
                 "jax_optimizer = optax.adamw(1e-2, weight_decay=0.1)")])
_TD = [
    ('''    "y": rng.normal(size=(4, D_OUT)).astype(np.float32),''',
     '''    "action": np.array([0, 3, 1, 3], dtype=np.int64),
    "target": rng.normal(size=(4,)).astype(np.float32),'''),
    ('''    return ((model(batch["x"]) - batch["y"]) ** 2).mean()''',
     '''    q = model(batch["x"]).gather(1, batch["action"][:, None])  # [B, 1]
    return torch.nn.functional.mse_loss(q.squeeze(-1), batch["target"])'''),
]
case("09_mlp_td_broadcast.py", "mlp.py", "td_loss_broadcast", "loss",
     "The Q-value of the taken action is [B, 1] and the TD target [B]: the port subtracts them without squeezing, a [B, B] broadcast.",
     _TD + [('''    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)''',
             '''    q = jnp.take_along_axis(model(batch["x"]), batch["action"][:, None], axis=1)  # [B, 1]
    return jnp.mean((q - batch["target"]) ** 2)''')])
case("10_mlp_correct_td.py", "mlp.py", "correct", "loss",
     "A Q-network regressed on TD targets; the port gathers the taken action's value and squeezes it to [B] before the squared error.",
     _TD + [('''    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)''',
             '''    q = jnp.take_along_axis(model(batch["x"]), batch["action"][:, None], axis=1)[:, 0]  # [B]
    assert q.shape == batch["target"].shape
    return jnp.mean((q - batch["target"]) ** 2)''')])
case("11_mlp_linear_layout.py", "mlp.py", "linear_layout", "module",
     "The hand-written square Dense layer keeps torch's [out, in] convention in its forward (x @ kernel.T) while the kernel holds the Flax [in, out] layout.",
     [("class JaxMLP(nnx.Module):", '''class Dense(nnx.Module):
    def __init__(self, d_in, d_out, rngs):
        bound = 1 / np.sqrt(d_in)
        self.kernel = nnx.Param(jax.random.uniform(rngs.params(), (d_in, d_out), minval=-bound, maxval=bound))
        self.bias = nnx.Param(jnp.zeros((d_out,)))

    def __call__(self, x):
        return x @ self.kernel.T + self.bias  # as torch writes it: y = x W^T + b


class JaxMLP(nnx.Module):'''),
      ("self.fc2 = nnx.Linear(D_H, D_H, rngs=rngs)", "self.fc2 = Dense(D_H, D_H, rngs=rngs)")])
# ---------------------------------------------------------------- CNN
case("12_cnn_correct.py", "cnn.py", "correct", "module",
     "A conv-BatchNorm-ReLU CNN in train mode (NCHW torch, NHWC port) with a torch-convention BatchNorm (momentum, unbiased running var) and a C,H,W flatten before the head; SGD with momentum.")
case("13_cnn_bn_momentum.py", "cnn.py", "batchnorm_momentum", "module",
     "The hand-written BatchNorm applies torch's momentum=0.1 in Flax's convention, keeping 10 % of the old running statistics instead of 90 %.",
     [("self.mean.value = (1 - m) * self.mean.value + m * jax.lax.stop_gradient(mu)",
       "self.mean.value = m * self.mean.value + (1 - m) * jax.lax.stop_gradient(mu)"),
      ("self.var.value = (1 - m) * self.var.value + m * jax.lax.stop_gradient(var) * n / (n - 1)",
       "self.var.value = m * self.var.value + (1 - m) * jax.lax.stop_gradient(var) * n / (n - 1)")])
case("14_cnn_bn_biased_var.py", "cnn.py", "batchnorm_biased_var", "module",
     "The port's running variance is updated with the biased batch variance, where torch stores the unbiased one (N/(N-1)).",
     [("self.var.value = (1 - m) * self.var.value + m * jax.lax.stop_gradient(var) * n / (n - 1)",
       "self.var.value = (1 - m) * self.var.value + m * jax.lax.stop_gradient(var)")])
case("15_cnn_flatten_order.py", "cnn.py", "flatten_order", "module",
     "The port flattens the NHWC feature map directly (H, W, C order) before the head, whose weights expect torch's C, H, W order.",
     [("h = jnp.transpose(h, (0, 3, 1, 2)).reshape(h.shape[0], -1)  # torch's C, H, W order",
       "h = h.reshape(h.shape[0], -1)")])
case("16_cnn_correct_eval.py", "cnn.py", "correct", "module",
     "The same CNN in eval mode (running statistics perturbed away from 0/1) ported with stock nnx.BatchNorm(use_running_average=True).",
     [("torch_model = TorchCNN()  # train mode: batch statistics, running stats updated",
       "torch_model = TorchCNN().eval()  # eval mode: running statistics"),
      ("self.bn1 = BatchNorm(C)", "self.bn1 = nnx.BatchNorm(C, use_running_average=True, momentum=0.9, epsilon=1e-5, rngs=rngs)"),
      ("self.bn2 = BatchNorm(C)", "self.bn2 = nnx.BatchNorm(C, use_running_average=True, momentum=0.9, epsilon=1e-5, rngs=rngs)")])
# ---------------------------------------------------------------- GRU (batch_first)
case("17_gru_correct.py", "gru.py", "correct", "module",
     "A batch_first GRU with a non-zero initial state and right-padded masked loss, ported as a hand-written cell (fused r|z|n kernels, b_hn inside the reset gate); torch RMSprop as optax.rmsprop with eps outside the sqrt.")
case("18_gru_bias.py", "gru.py", "gru_bias", "module",
     "The port uses stock nnx.GRUCell, which has no hidden-side bias on the candidate: torch's b_hn can only be folded into the input bias, outside r * (.).",
     [("self.gru = GRU(I, H, rngs=rngs)", "self.gru = nnx.RNN(nnx.GRUCell(I, H, rngs=rngs))"),
      ("out = self.gru(x, h0)", "out = self.gru(x, initial_carry=h0)")])
# ---------------------------------------------------------------- LSTM (time-major)
case("19_lstm_correct.py", "lstm.py", "correct", "module",
     "A time-major LSTM with non-zero (h0, c0) ported as an nnx.LSTMCell-layout cell (per-gate kernels, (c, h) carry) that keeps b_ih and b_hh apart; the loss also reads the final cell state; Adam.")
case("20_lstm_carry_order.py", "lstm.py", "lstm_layout", "module",
     "The port passes torch's (h0, c0) order as the cell's carry, which is (c, h) as in nnx.LSTMCell: the initial hidden and cell states are swapped.",
     [("carry = (c0, h0)  # the cell carries (c, h), like nnx.LSTMCell", "carry = (h0, c0)")])
_LOADER = '''

# the port's own weight loader (the checker is told not to copy)
transfer = False


def _load(order):
    lstm, Hh = torch_model.lstm, H
    w_ih, w_hh = lstm.weight_ih_l0.detach().numpy(), lstm.weight_hh_l0.detach().numpy()
    b_ih, b_hh = lstm.bias_ih_l0.detach().numpy(), lstm.bias_hh_l0.detach().numpy()
    blocks = {g: slice(k * Hh, (k + 1) * Hh) for k, g in enumerate(order)}
    cell = jax_model.lstm
    for g, (ii, hh) in {"i": (cell.ii, cell.hi), "f": (cell.if_, cell.hf), "g": (cell.ig, cell.hg), "o": (cell.io, cell.ho)}.items():
        ii.kernel.value = jnp.asarray(w_ih[blocks[g]].T)
        hh.kernel.value = jnp.asarray(w_hh[blocks[g]].T)
        ii.bias.value = jnp.asarray(b_ih[blocks[g]])
        hh.bias.value = jnp.asarray(b_hh[blocks[g]])
    jax_model.head.kernel.value = jnp.asarray(torch_model.head.weight.detach().numpy().T)
    jax_model.head.bias.value = jnp.asarray(torch_model.head.bias.detach().numpy())


_load("ifgo")  # torch packs the gates i | f | g | o
'''
case("21_lstm_correct_own_loader.py", "lstm.py", "correct", "loader",
     "The same time-major LSTM with transfer = False: the port loads torch's weights itself, splitting the packed gates in torch's i|f|g|o order, the two biases kept apart.",
     [("jax_optimizer = optax.adam(1e-2)\n", "jax_optimizer = optax.adam(1e-2)\n" + _LOADER)])
case("22_lstm_gate_order.py", "lstm.py", "lstm_gate_order", "loader",
     "With transfer = False the port's own loader splits torch's packed LSTM weights in TF/Keras-like i|f|o|g order instead of torch's i|f|g|o.",
     [("jax_optimizer = optax.adam(1e-2)\n", "jax_optimizer = optax.adam(1e-2)\n" + _LOADER.replace('_load("ifgo")  # torch packs the gates i | f | g | o', '_load("ifog")  # gate order i | f | o | g'))])
# ---------------------------------------------------------------- transformer encoder block
case("23_tfm_correct.py", "tfm.py", "correct", "module",
     "A hand-written pre-LN encoder block with a key padding mask (torch masked_fill -inf, port additive -1e9), exact GELU, LayerNorm eps 1e-5; AdamW.")
case("24_tfm_softmax_scale.py", "tfm.py", "attention_scale", "module",
     "The port scales the attention scores by 1/sqrt(model width) instead of 1/sqrt(head width).",
     [('s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * DH ** -0.5', 's = jnp.einsum("bqhd,bkhd->bhqk", q, k) * D ** -0.5')])
case("25_tfm_mask_polarity.py", "tfm.py", "mask_polarity", "module",
     "The port's additive mask penalises the real tokens and lets the padding through (polarity inverted).",
     [("s = s + (1.0 - mask[:, None, None, :].astype(s.dtype)) * -1e9  # additive padding mask",
       "s = s + mask[:, None, None, :].astype(s.dtype) * -1e9  # additive padding mask")])
case("26_tfm_layernorm_eps.py", "tfm.py", "layernorm_eps", "module",
     "The port's LayerNorms keep nnx's default epsilon=1e-6 where torch uses 1e-5, on small-variance (embedding-sized) inputs.",
     [("self.ln1 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)", "self.ln1 = nnx.LayerNorm(D, rngs=rngs)"),
      ("self.ln2 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)", "self.ln2 = nnx.LayerNorm(D, rngs=rngs)")])
# ---------------------------------------------------------------- GPT-2
case("27_gpt2_correct.py", "gpt2.py", "correct", "module",
     "Hugging Face GPT2LMHeadModel (2 layers, right padding) ported by hand: fused c_attn split q|k|v, causal + key-padding mask, gelu_new as tanh GELU, lm_head tied to wte via Embed.attend.")
case("28_gpt2_gelu_exact.py", "gpt2.py", "gelu_exact", "module",
     "GPT-2's gelu_new is the tanh approximation but the port uses the exact erf GELU.",
     [("return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=True))  # gelu_new",
       "return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=False))")])
case("29_gpt2_causal_diagonal.py", "gpt2.py", "causal_mask_diagonal", "module",
     "The port's causal mask uses tril(k=-1), hiding each token from itself (the diagonal) as well as the future.",
     [("causal = jnp.tril(jnp.ones((t, t), dtype=bool))", "causal = jnp.tril(jnp.ones((t, t), dtype=bool), k=-1)")])
case("30_gpt2_untied_head.py", "gpt2.py", "untied_lm_head", "module",
     "The port gives the LM head its own kernel (a copy of wte at load) instead of tying it to wte: same loss, but the embedding misses the head's gradient and the two drift apart.",
     [('''        self.transformer = GPT2(rngs)
''', '''        self.transformer = GPT2(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)
'''),
      ("        return self.transformer.wte.attend(h)  # tied lm_head", "        return self.lm_head(h)")])
# ---------------------------------------------------------------- Llama (GQA)
case("31_llama_correct.py", "llama.py", "correct", "module",
     "Hugging Face LlamaForCausalLM with grouped-query attention (4 query heads, 2 kv heads), rope_theta 5e5, rms_norm_eps 1e-5, right padding, ported by hand: rotate-half RoPE, kv heads repeated, SwiGLU.")
case("32_llama_rope_interleaved.py", "llama.py", "rotary_layout", "module",
     "The port applies RoPE in the interleaved (GPT-J / Meta-checkpoint) layout, rotating pairs (2i, 2i+1), where HF Llama rotates halves (i, i + d/2).",
     [('''def rotate_half(x):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)''', '''def rotate_every_two(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return jnp.stack([-x2, x1], axis=-1).reshape(x.shape)'''),
      ("    emb = jnp.concatenate([freqs, freqs], axis=-1)", "    emb = jnp.repeat(freqs, 2, axis=-1)"),
      ("    return x * cos + rotate_half(x) * sin", "    return x * cos + rotate_every_two(x) * sin")])
case("33_llama_rope_theta.py", "llama.py", "rotary_theta", "module",
     "The port's RoPE uses the classic base 10000 where the config sets rope_theta = 500000.",
     [("    inv_freq = 1.0 / (THETA ** (jnp.arange(0, DH, 2, dtype=x.dtype) / DH))",
       "    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, DH, 2, dtype=x.dtype) / DH))")])
case("34_llama_gqa_tiled.py", "llama.py", "gqa_heads_tiled", "module",
     "The port expands the kv heads with jnp.tile (query head h reads kv head h % n_kv) where HF's repeat_kv repeats each kv head (h // n_rep).",
     [("        k = jnp.repeat(k, NH // NKV, axis=2)  # query head h reads kv head h // (NH // NKV)\n        v = jnp.repeat(v, NH // NKV, axis=2)",
       "        k = jnp.tile(k, (1, 1, NH // NKV, 1))\n        v = jnp.tile(v, (1, 1, NH // NKV, 1))")])
case("35_llama_swiglu_swapped.py", "llama.py", "swiglu_swapped", "module",
     "The port applies SiLU to up_proj and multiplies by gate_proj: the gate and up projections are swapped.",
     [("        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))",
       "        return self.down_proj(self.gate_proj(x) * jax.nn.silu(self.up_proj(x)))")])
case("36_llama_embed_scaled.py", "llama.py", "embedding_scaled", "module",
     "The port multiplies the token embeddings by sqrt(hidden_size) (a Gemma / T5-style habit) which Llama does not do.",
     [("        x = self.embed_tokens(ids)\n", "        x = self.embed_tokens(ids) * jnp.sqrt(D).astype(self.embed_tokens.embedding.value.dtype)\n")])
# ---------------------------------------------------------------- BERT
case("37_bert_correct.py", "bert.py", "correct", "module",
     "Hugging Face BertForMaskedLM (sentence pairs, right padding, -100 labels) ported by hand: word + position + token-type embeddings, post-LN eps 1e-12, exact GELU, decoder tied to word_embeddings plus its own bias.")
case("38_bert_token_type_dropped.py", "bert.py", "token_type_dropped", "module",
     "The port's embeddings leave out the token-type (segment) embedding.",
     [("        x = x + self.token_type_embeddings(token_type_ids)\n", "")])
case("39_bert_ignore_index_mean.py", "bert.py", "ignore_index_mean", "loss",
     "The port masks the -100 labels but averages over every position, where torch's cross_entropy(ignore_index=-100) averages over the labelled positions only.",
     [("    return (nll * valid).sum() / valid.sum()", "    return jnp.mean(nll * valid)")])
# ---------------------------------------------------------------- ViT
case("40_vit_correct.py", "vit.py", "correct", "module",
     "Hugging Face ViTForImageClassification ported by hand: conv patch embedding (NCHW input, NHWC conv), trainable CLS token and position embeddings, pre-LN eps 1e-12, CLS-token classifier; Nesterov SGD.")
case("41_vit_stop_gradient_embeddings.py", "vit.py", "stop_gradient", "module",
     "The port wraps the CLS token and position embeddings in stop_gradient (treating them as fixed tables) while torch trains them.",
     [("        cls = jnp.broadcast_to(self.cls_token.value, (x.shape[0], 1, D))\n        return jnp.concatenate([cls, x], axis=1) + self.position_embeddings.value",
       "        cls = jnp.broadcast_to(jax.lax.stop_gradient(self.cls_token.value), (x.shape[0], 1, D))\n        return jnp.concatenate([cls, x], axis=1) + jax.lax.stop_gradient(self.position_embeddings.value)")])
case("42_vit_mean_pool.py", "vit.py", "pooling_mismatch", "module",
     "The port classifies the mean of all tokens (a common ViT variant) where HF's ViTForImageClassification reads the CLS token.",
     [("        return self.classifier(h[:, 0])  # the CLS token", "        return self.classifier(h.mean(axis=1))")])
case("43_lstm_folded_bias.py", "lstm_stock.py", "lstm_bias_folded", "module",
     "The port uses stock nnx.LSTMCell, whose single hidden-side bias holds b_ih + b_hh: the forward and the gradients match, but torch's optimizer moves both biases, so training differs from the first step.",
     [("carry = (c0, h0)  # nnx.LSTMCell carries (c, h)", "carry = (c0, h0)  # nnx.LSTMCell carries (c, h); its one bias per gate = b_ih + b_hh")])
case("44_gru_rmsprop_eps.py", "gru.py", "rmsprop_eps", "optimizer",
     "torch RMSprop divides by sqrt(v) + eps but optax.rmsprop's default (eps_in_sqrt=True) divides by sqrt(v + eps): with small gradients the first steps differ.",
     [("jax_optimizer = optax.rmsprop(1e-2, decay=0.9, eps=1e-8, eps_in_sqrt=False)  # torch adds eps after the sqrt",
       "jax_optimizer = optax.rmsprop(1e-2, decay=0.9, eps=1e-8)")])
case("45_llama_rmsnorm_eps.py", "llama.py", "rmsnorm_eps", "module",
     "The port's RMSNorms keep nnx.RMSNorm's default epsilon=1e-6 where the config sets rms_norm_eps=1e-5 (the embeddings entering the first norm are small).",
     [("        self.input_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)", "        self.input_layernorm = nnx.RMSNorm(D, rngs=rngs)"),
      ("        self.post_attention_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)", "        self.post_attention_layernorm = nnx.RMSNorm(D, rngs=rngs)"),
      ("        self.norm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)", "        self.norm = nnx.RMSNorm(D, rngs=rngs)")])
