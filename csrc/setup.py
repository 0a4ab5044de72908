"""Build hook: cffi compiles the C kernels into pyagent_kernels._C (optional; see README.md).

setuptools' scratch folders (``build/``, the ``.egg-info``) go to a temporary folder that is removed when
the build ends, so building from a checkout (``pip install ./csrc``, ``make wheels``) writes nothing into
it. cffi compiles the module against CPython's stable ABI (``_C.abi3.so``), so the wheel is tagged
``cp311-abi3``: one wheel serves Python 3.11 and later.
"""

import atexit
import shutil
import tempfile

from setuptools import setup

scratch = tempfile.mkdtemp(prefix="pyagent-kernels-build-")
atexit.register(shutil.rmtree, scratch, ignore_errors=True)
setup(
    cffi_modules=["build_kernels.py:ffibuilder"],
    options={
        "build": {"build_base": f"{scratch}/build"},
        "egg_info": {"egg_base": scratch},
        "bdist_wheel": {"py_limited_api": "cp311"},
    },
)
