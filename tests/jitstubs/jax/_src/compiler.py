# SPDX-License-Identifier: Apache-2.0
# jax/_src/compiler.py (0.11): compile_or_get_cached() and the cache read,
# compile and write it does, with 0.11's rules (a key only where the cache
# is used; no write from a process other than 0, nor of a compile quicker
# than jax_persistent_cache_min_compile_time_secs; a cache error is a
# warning, not a failure). Single-process, no AutoPGLE.
from __future__ import annotations

import logging
import time
import warnings

from jax._src import compilation_cache
from jax._src import config
from jax._src import distributed

logger = logging.getLogger(__name__)


def backend_compile_and_load(backend, module, executable_devices, options, host_callbacks):
  return backend.compile_and_load(module, executable_devices, options)


def compile_or_get_cached(backend, computation, devices, compile_options, host_callbacks,
                          executable_devices, pgle_profiler=None):
  module_name = computation.name
  cache_key = _get_cache_key(compile_options, backend, computation, devices)
  if cache_key is None:
    return backend_compile_and_load(backend, computation, executable_devices,
                                    compile_options, host_callbacks)
  retrieved_executable, retrieved_compile_time = _cache_read(
      module_name, cache_key, compile_options, backend, executable_devices, host_callbacks)
  if retrieved_executable is not None:
    return retrieved_executable
  return _compile_and_write_cache(backend, computation, executable_devices, compile_options,
                                  host_callbacks, module_name, cache_key)


def _get_cache_key(options, backend, computation, devices, override_fdo_profile=None):
  if not compilation_cache.is_cache_used(backend):
    return None
  return compilation_cache.get_cache_key(computation, devices, options, backend)


def _compile_and_write_cache(backend, computation, executable_devices, compile_options,
                             host_callbacks, module_name, cache_key):
  start_time = time.monotonic()
  executable = backend_compile_and_load(backend, computation, executable_devices,
                                        compile_options, host_callbacks)
  compile_time = time.monotonic() - start_time
  _cache_write(cache_key, compile_time, module_name, backend, executable)
  return executable


def _cache_read(module_name, cache_key, compile_options, backend, executable_devices,
                host_callbacks):
  try:
    return compilation_cache.get_executable_and_time(
        cache_key, compile_options, backend, executable_devices, host_callbacks)
  except Exception as ex:
    if config.raise_persistent_cache_errors.value:
      raise
    warnings.warn(f"Error reading persistent compilation cache entry for "
                  f"'{module_name}': {type(ex).__name__}: {ex}")
    return None, None


def _cache_write(cache_key, compile_time_secs, module_name, backend, executable):
  if distributed.global_state.process_id != 0:
    return
  min_compile_time = config.persistent_cache_min_compile_time_secs.value
  if compile_time_secs < min_compile_time:
    return
  try:
    compilation_cache.put_executable_and_time(
        cache_key, module_name, executable, backend, int(compile_time_secs))
  except Exception as ex:
    if config.raise_persistent_cache_errors.value:
      raise
    warnings.warn(f"Error writing persistent compilation cache entry for "
                  f"'{module_name}': {type(ex).__name__}: {ex}")
