# SPDX-License-Identifier: Apache-2.0
# jax/_src/compilation_cache_interface.py (0.11), as it is.
from __future__ import annotations

import abc
import pathlib

from jax._src import util


class CacheInterface(util.StrictABC):
  _path: pathlib.Path

  @abc.abstractmethod
  def get(self, key: str):
    pass

  @abc.abstractmethod
  def put(self, key: str, value: bytes):
    pass
