# SPDX-License-Identifier: Apache-2.0
# jax/_src/util.py (0.11): the base of CacheInterface.
import abc


class StrictABCMeta(abc.ABCMeta):
  def register(cls, subclass):
    del subclass
    raise NotImplementedError(f"{cls} does not support virtual subclasses")

  __instancecheck__ = type.__instancecheck__
  __subclasscheck__ = type.__subclasscheck__


class StrictABC(metaclass=StrictABCMeta):
  __slots__ = ()
