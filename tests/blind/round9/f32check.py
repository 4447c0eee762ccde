"""float32 pass for the correct cases (information): HF unpatched, the case's source as written, both sides float32.
Prints the largest |diff| / max(1, |torch|) over loss, every gradient and 3 steps. Run: timeout 150 python f32check.py FILE"""
import sys
import jax, jax.numpy as jnp, numpy as np, torch
from flax import nnx

files, sys.argv = sys.argv[1:], sys.argv[:1]
import prove9 as P  # noqa: E402

P._unpatch()
jax.nn.dot_product_attention = P._ORIG_DPA
_orig_load = P.load_case
P.load_case = lambda path, f64=True: _orig_load(path, False)
P.to64_torch = lambda tm: __import__("copy").deepcopy(tm).float()


def to32_jax(jm):
    jm = nnx.clone(jm)
    st = nnx.state(jm)
    nnx.update(jm, jax.tree.map(lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, st))
    return jm


P.to64_jax = to32_jax
P.batch_t = lambda b: {k: (torch.tensor(v, dtype=torch.float32) if np.issubdtype(v.dtype, np.floating) else torch.tensor(v)) for k, v in b.items()}
P.batch_j = lambda b: {k: (jnp.asarray(v, dtype=jnp.float32) if np.issubdtype(v.dtype, np.floating) else jnp.asarray(v)) for k, v in b.items()}
for f in files:
    name, rec = P.prove(f)
    print(f"f32 {f:40s} max_abs_diff_all={rec['max_abs_diff_all']:.3g} first>1e-8={rec['first_differs']}", flush=True)
