"""r9k-stack: declarative, checked kernel variants and serving profiles for vLLM.

Its subpackages are the folders ``r9k/registry``, ``r9k/profiles``, ``r9k/r9kctl``, ``r9k/kernels``,
``r9k/plugin`` and ``r9k/bench``; the repository's top level has one link to each (``registry`` ->
``r9k/registry``: docs/architecture.md, "The layout").
"""

__version__ = "0.1.0"
