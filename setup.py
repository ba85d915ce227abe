"""Build of the C extension; everything else is in pyproject.toml.

``disquepy.codec._creader`` is the client request reader. It is optional: without a C
compiler the package installs without it and the server uses the hiredis-backed reader,
with the same results.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(
    ext_modules=[
        Extension("disquepy.codec._creader", sources=["src/disquepy/codec/_creader.c"],
                  extra_compile_args=FLAGS, optional=True),
    ]
)
