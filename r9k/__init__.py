"""r9k-stack: declarative, checked kernel variants and serving profiles for vLLM.

The repository's top-level folders are this package's subpackages through one link each (``r9k/registry`` ->
``../registry``, likewise ``profiles``, ``r9kctl``, ``kernels``, ``plugin``, ``bench``): every tool sees
``r9k.registry`` at ``r9k/registry`` (docs/architecture.md, "The layout").
"""

__version__ = "0.1.0"
