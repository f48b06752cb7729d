"""Maps the repository's top-level folders under the one import namespace ``r9k``.

Packages are discovered in each folder (any directory with an ``__init__.py``), so a new kernel
subpackage needs no edit here.
"""
from setuptools import find_packages, setup

FOLDERS = {
    "r9k.registry": "registry",
    "r9k.profiles": "profiles",
    "r9k.r9kctl": "r9kctl",
    "r9k.kernels": "kernels",
    "r9k.plugin": "plugin",
}

packages = ["r9k"]
package_dir = {"r9k": "r9k"}
for name, folder in FOLDERS.items():
    packages.append(name)
    package_dir[name] = folder
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir)
