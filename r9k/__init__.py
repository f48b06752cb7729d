"""r9k-stack: declarative, checked kernel variants and serving profiles for vLLM.

The top-level folders of the repository are mapped under this one namespace (see setup.py):
``registry/`` -> ``r9k.registry``, ``profiles/`` -> ``r9k.profiles``, ``r9kctl/`` -> ``r9k.r9kctl``,
``kernels/`` -> ``r9k.kernels``, ``plugin/`` -> ``r9k.plugin``, ``bench/`` -> ``r9k.bench``.
"""

__version__ = "0.1.0"
