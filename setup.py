"""Maps the repository's top-level folders under the one import namespace ``r9k``.

Packages are discovered in each folder (any directory with an ``__init__.py``), so a new kernel
subpackage needs no edit here. Every mapped folder ships whole: the benchmarks live apart in ``bench/``
(``r9kctl bench`` runs the decode-step one), so the wheel needs no filter; the repository's ``tests/`` is no
package and never ships. The kernels' gate tests do ship: the registry declares them (``r9kctl validate``
checks that they exist, ``r9kctl gate`` runs them).
"""
from setuptools import find_packages, setup

FOLDERS = {
    "r9k.registry": "registry",
    "r9k.profiles": "profiles",
    "r9k.r9kctl": "r9kctl",
    "r9k.kernels": "kernels",
    "r9k.plugin": "plugin",
    "r9k.bench": "bench",
}

packages = ["r9k"]
package_dir = {"r9k": "r9k"}
for name, folder in FOLDERS.items():
    packages.append(name)
    package_dir[name] = folder
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir)
