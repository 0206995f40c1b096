# SPDX-License-Identifier: Apache-2.0
# jax/_src/compilation_cache.py (0.11): the functions compiler.py calls,
# as 0.11 has them (compression: zlib; the directory cache: one file a
# key, standing in for LRUCache).
from __future__ import annotations

import hashlib
import os
import threading
import zlib

from jax._src import config
from jax._src.compilation_cache_interface import CacheInterface

_cache: CacheInterface | None = None
_cache_initialized: bool = False
_cache_checked: bool = False
_cache_used: bool = False
_cache_initialized_mutex = threading.Lock()
_UNSUPPORTED_RUNTIMES: set[str] = set()
_TIME_BYTES = 4


def is_cache_used(backend) -> bool:
  global _cache_checked, _cache_used
  with _cache_initialized_mutex:
    if _cache_checked:
      return _cache_used
    _cache_checked = True
    if not config.enable_compilation_cache.value:
      pass
    elif (backend.platform in ["tpu", "gpu", "cpu", "neuron"]
          and getattr(backend, "supports_executable_serialization", True)):
      _cache_used = True
    return _cache_used


class LRUCache(CacheInterface):
  """jax/_src/lru_cache.py's LRUCache: a file per key in the directory."""

  def __init__(self, path):
    self._path = path
    os.makedirs(path, exist_ok=True)

  def get(self, key):
    try:
      with open(os.path.join(self._path, key + "-cache"), "rb") as f:
        return f.read()
    except FileNotFoundError:
      return None

  def put(self, key, value):
    with open(os.path.join(self._path, key + "-cache"), "wb") as f:
      f.write(value)


def _initialize_cache() -> None:
  global _cache_initialized, _cache
  with _cache_initialized_mutex:
    if _cache_initialized:
      return
    path = config.compilation_cache_dir.value
    if not path:
      return
    if not config.enable_compilation_cache.value:
      return
    _cache_initialized = True
    assert _cache is None, "The cache has already been initialized!"
    _cache = LRUCache(path)


def is_persistent_cache_enabled() -> bool:
  return (config.compilation_cache_dir.value is not None
          and config.enable_compilation_cache.value)


def _get_cache(backend) -> CacheInterface | None:
  if backend.runtime_type in _UNSUPPORTED_RUNTIMES:
    return None
  if _cache is None:
    _initialize_cache()
  return _cache


def compress_executable(executable: bytes) -> bytes:
  return zlib.compress(executable)


def decompress_executable(executable: bytes) -> bytes:
  return zlib.decompress(executable)


def is_executable_in_cache(backend, cache_key: str) -> bool:
  cache = _get_cache(backend)
  if cache is None:
    return False
  return cache.get(cache_key) is not None


def get_executable_and_time(cache_key, compile_options, backend, executable_devices,
                            host_callbacks=()):
  cache = _get_cache(backend)
  if cache is None:
    return None, None
  executable_and_time = cache.get(cache_key)
  if executable_and_time is None:
    return None, None
  executable_and_time = decompress_executable(executable_and_time)
  serialized_executable, compile_time = extract_executable_and_time(executable_and_time)
  return backend.deserialize_executable(serialized_executable, executable_devices,
                                        compile_options), compile_time


def put_executable_and_time(cache_key, module_name, executable, backend, compile_time):
  cache = _get_cache(backend)
  if cache is None:
    return
  serialized_executable = executable.serialize()
  executable_and_time = compress_executable(
      combine_executable_and_time(serialized_executable, compile_time))
  min_entry_size = config.persistent_cache_min_entry_size_bytes.value
  if len(executable_and_time) < min_entry_size:
    return
  cache.put(cache_key, executable_and_time)


def get_cache_key(module, devices, compile_options, backend, ignore_custom_partitioning=False):
  # cache_key.get(): the computation, jaxlib's version, the platform and
  # its version, the compile options, the devices, the compression.
  h = hashlib.sha256()
  for part in (module.text, "jaxlib 0.11.0", backend.platform, backend.platform_version,
               repr(compile_options), ",".join(d.device_kind for d in devices.flat), "zlib"):
    h.update(part.encode())
  return module.name + "-" + h.hexdigest()


def reset_cache() -> None:
  global _cache, _cache_initialized, _cache_checked, _cache_used
  _cache = None
  with _cache_initialized_mutex:
    _cache_initialized = False
    _cache_checked = False
    _cache_used = False


def combine_executable_and_time(serialized_executable: bytes, compile_time: int) -> bytes:
  return int(compile_time).to_bytes(_TIME_BYTES, byteorder="big") + serialized_executable


def extract_executable_and_time(executable_and_time: bytes):
  return executable_and_time[_TIME_BYTES:], int.from_bytes(
      executable_and_time[:_TIME_BYTES], byteorder="big")
