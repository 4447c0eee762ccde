"""Float32 sanity pass for the 4 correct ports: prove10's loader with no float64 casts (torch float32 model, NNX float32
port, float32 batch); prints max |diff| over loss, gradients and 3 optimizer steps. Run: timeout 150 python f32check10.py"""
import copy, functools, sys
sys.argv = sys.argv[:1]
import prove10 as P
import numpy as np, torch, jax.numpy as jnp
from flax import nnx

P.to64_torch = lambda tm: copy.deepcopy(tm)
P.to64_jax = lambda jm: nnx.clone(jm)
P.load_case = functools.partial(P.load_case.__wrapped__ if hasattr(P.load_case, "__wrapped__") else P.load_case, f64=False)
P.batch_t = lambda b: {k: (torch.tensor(v, dtype=torch.float32) if np.issubdtype(v.dtype, np.floating) else torch.tensor(v)) for k, v in b.items()}
P.batch_j = lambda b: {k: (jnp.asarray(v, dtype=jnp.float32) if np.issubdtype(v.dtype, np.floating) else jnp.asarray(v)) for k, v in b.items()}
for f in ["01_opt_correct.py", "09_distilbert_correct.py", "18_gru_correct.py", "25_unet_correct.py"]:
    name, rec = P.prove(f)
    print(f, "float32 max_abs_diff_all=%.3g" % rec["max_abs_diff_all"], "first>1e-8:", rec["first_differs"], flush=True)
