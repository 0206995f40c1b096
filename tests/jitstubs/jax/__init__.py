# SPDX-License-Identifier: Apache-2.0
# Stand-in for JAX 0.11 (tests/test_jax.py): importing it imports
# jax._src.compiler through pxla, as the real package's __init__ does.
from jax.version import __version__  # noqa: F401
from jax._src import config  # noqa: F401
from jax._src.interpreters import pxla  # noqa: F401
