"""PyTorch half of detach-parity: one module per scenario, mirrored in jax_impl/.

Importing this package pins full float32 matmuls (no TF32) so that results do not
depend on the accelerator (see pitfall P16); on CPU this changes nothing.
"""

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
