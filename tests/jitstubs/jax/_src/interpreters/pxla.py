# SPDX-License-Identifier: Apache-2.0
# jax/_src/interpreters/pxla.py (0.11): _cached_compilation() calls the
# compiler through its module attribute, positionally.

from jax._src import compiler
from jax._src import xla_bridge


def _cached_compilation(computation, name, compile_options, devices):
  backend = xla_bridge.get_backend()
  return compiler.compile_or_get_cached(backend, computation, devices, compile_options, (),
                                        devices)
