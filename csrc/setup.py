"""Build hook: cffi compiles the C kernels into pyagent_kernels._C (optional; see README.md)."""

from setuptools import setup

setup(cffi_modules=["build_kernels.py:ffibuilder"])
