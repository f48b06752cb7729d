"""Maps the repository's top-level folders under the one import namespace ``r9k``.

Packages are discovered in each folder (any directory with an ``__init__.py``), so a new kernel
subpackage needs no edit here. The wheel leaves out what only a developer runs from a checkout:
benchmarks (``bench_*.py``, the kernel bench driver) and scratch profilers (``_profile*.py``); the repository's
``tests/`` is no package and never ships. The kernels' gate tests do ship: the registry declares them
(``r9kctl validate`` checks that they exist, ``r9kctl gate`` runs them). ``kernels/decode_step/bench.py``
stays too: ``r9kctl bench`` runs it.
"""
import fnmatch

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

FOLDERS = {
    "r9k.registry": "registry",
    "r9k.profiles": "profiles",
    "r9k.r9kctl": "r9kctl",
    "r9k.kernels": "kernels",
    "r9k.plugin": "plugin",
}

#: Module names (the file name without .py) that stay out of the wheel.
DEV_ONLY = ("bench_*", "_profile*")
#: Whole modules that stay out too: the driver of the kernel benchmarks (scripts/gpu.sh bench).
DEV_ONLY_MODULES = ("r9k.kernels._triton.bench",)


def dev_only(package: str, module: str) -> bool:
    return f"{package}.{module}" in DEV_ONLY_MODULES or any(fnmatch.fnmatchcase(module, p) for p in DEV_ONLY)


class BuildPy(build_py):
    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if not dev_only(m[0], m[1])]


packages = ["r9k"]
package_dir = {"r9k": "r9k"}
for name, folder in FOLDERS.items():
    packages.append(name)
    package_dir[name] = folder
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir, cmdclass={"build_py": BuildPy})
