# SPDX-License-Identifier: Apache-2.0
# jax/_src/config.py (0.11): the options the compilation cache reads, each
# from its JAX_* environment variable at import, then config.update().
import os


class _State:
  def __init__(self, name, default, conv):
    self.name = name
    env = os.environ.get(name.upper())
    self.value = conv(env) if env is not None else default


def _bool(s):
  return s.lower() in ("1", "true", "yes", "on")


class Config:
  def __init__(self):
    self._states = {}

  def add(self, name, default, conv):
    s = self._states[name] = _State(name, default, conv)
    return s

  def update(self, name, value):
    self._states[name].value = value


config = Config()
enable_compilation_cache = config.add("jax_enable_compilation_cache", True, _bool)
compilation_cache_dir = config.add("jax_compilation_cache_dir", None, str)
persistent_cache_min_compile_time_secs = config.add(
    "jax_persistent_cache_min_compile_time_secs", 1.0, float)
persistent_cache_min_entry_size_bytes = config.add(
    "jax_persistent_cache_min_entry_size_bytes", 0, int)
raise_persistent_cache_errors = config.add("jax_raise_persistent_cache_errors", False, _bool)


def update(name, value):
  config.update(name, value)
