"""The optional C accelerator of the record format; everything else is in setup.cfg.

``optional=True``: a machine without a C compiler or Python's headers installs
mq all the same and runs the pure-Python record parser.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mq.storage._speedups",
            ["mq/storage/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
