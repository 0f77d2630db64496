"""The package list and the optional C accelerator; everything else is in setup.cfg.

The ``cli/`` folder installs as the package ``mq_cli``: a top-level ``cli`` in
site-packages would collide with any other distribution's package of that name.

``optional=True``: a machine without a C compiler or Python's headers installs
mq all the same and runs the pure-Python record parser.
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=[
        *find_packages(include=["mq", "mq.*", "spark_connector", "spark_connector.*"]),
        "mq_cli",
    ],
    package_dir={"mq_cli": "cli"},
    package_data={"mq.http": ["console/*"]},  # the web console's static files
    ext_modules=[
        Extension(
            "mq.records._speedups",
            ["mq/records/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ],
)
