"""Package discovery for the repository layout (everything else is in pyproject.toml).

The import names live under ``fedbench.*`` while the code sits in top-level folders
(``methods/`` is ``fedbench.methods``, ...). setuptools' ``find_packages`` walks each
folder, so a new nested subpackage is included in the wheel without a hand-kept list.
"""

from setuptools import find_packages, setup

ROOTS = {"fedbench": "fedbench", "fedbench.methods": "methods", "fedbench.tasks": "tasks",
         "fedbench.runners": "runners", "fedbench.leaderboard": "leaderboard"}

packages, package_dir = [], {}
for name, folder in ROOTS.items():
    packages.append(name)
    package_dir[name] = folder
    for sub in find_packages(folder):
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
