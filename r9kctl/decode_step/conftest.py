"""The decode-step tests run on the kernels' pytest set-up (Triton interpreter without a GPU, the ``gpu``
marker, the ``device``/``seed``/``rng``/``poison`` fixtures)."""
from r9k.kernels.conftest import *  # noqa: F401,F403
