"""Import every case in a plain interpreter (float32, no x64) and run both losses once: the files must work as the checker loads them."""
import glob, importlib.util, os, sys, time, warnings
warnings.filterwarnings("ignore")
import numpy as np, torch, jax.numpy as jnp
HERE = os.path.dirname(os.path.abspath(__file__))
files = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.py")))
if sys.argv[1:]:
    files = [f for f in files if any(a in os.path.basename(f) for a in sys.argv[1:])]
for f in files:
    t = time.time()
    try:
        spec = importlib.util.spec_from_file_location("c", f); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        doc = m.__doc__.strip().splitlines()
        assert doc[0].startswith("EXPECTED: ") and doc[1].startswith("WHERE: "), doc[:2]
        bt = {k: torch.tensor(v) for k, v in m.batch.items()}
        bj = {k: jnp.asarray(v) for k, v in m.batch.items()}
        lt = float(m.torch_loss(m.torch_model, bt)); lj = float(m.jax_loss(m.jax_model, bj))
        print(f"ok   {os.path.basename(f):40s} torch {lt:.4f} jax(uncopied) {lj:.4f} {time.time()-t:.1f}s", flush=True)
    except Exception as e:
        print(f"FAIL {os.path.basename(f)}: {type(e).__name__}: {e}", flush=True)
