# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_inductor/remote_cache.py (PyTorch 2.11): the
classes a backend override plugs into, with PyTorch's call shapes (see
tests/jitstubs/README.md)."""
import collections
import dataclasses
import json
import sys

try:
    import redis
except ImportError:
    redis = None


@dataclasses.dataclass
class _CacheStat:
    miss: int = 0
    hit: int = 0
    put: int = 0
    exception: int = 0


class _CacheStats:
    def __init__(self):
        self._stats = collections.defaultdict(_CacheStat)

    def get(self, name, value):
        if value is None:
            self._stats[name].miss += 1
        else:
            self._stats[name].hit += 1

    def put(self, name):
        self._stats[name].put += 1

    def exception(self, name):
        self._stats[name].exception += 1


cache_stats = _CacheStats()


class RemoteCacheBackend:
    def __init__(self):
        self._name = "backend:%s" % type(self).__name__

    def _get(self, key):
        raise NotImplementedError

    def _put(self, key, data):
        raise NotImplementedError

    def get(self, key):
        try:
            value = self._get(key)
            cache_stats.get(self._name, value)
        except Exception:
            cache_stats.exception(self._name)
            raise
        return value

    def put(self, key, data):
        try:
            self._put(key, data)
            cache_stats.put(self._name)
        except Exception:
            cache_stats.exception(self._name)
            raise


class RemoteCacheJsonSerde:
    def encode(self, data):
        return bytes(json.dumps(data), "ascii")

    def decode(self, data):
        return json.loads(data)


class RemoteCache:
    backend_override_cls = None

    def __init__(self, backend, serde):
        if (override_cls := self.__class__.backend_override_cls) is not None:
            self.backend = override_cls()
        else:
            self.backend = backend
        self.serde = serde

    def get(self, key):
        return self._get(key, None)

    def put(self, key, value):
        if value is None:
            raise AssertionError("cannot put None into the cache")
        self._put(key, value, None)

    def _get(self, key, sample):
        if data := self.backend.get(key):
            return self.serde.decode(data)
        return None

    def _put(self, key, value, sample):
        self.backend.put(key, self.serde.encode(value))


class RedisRemoteCacheBackend(RemoteCacheBackend):
    def __init__(self, cache_id):
        super().__init__()
        if not redis:
            raise RuntimeError("redis not available but required for remote cache")


class RedisRemoteCache(RemoteCache):
    def __init__(self, cache_id):
        if self.__class__.backend_override_cls:
            backend = None
        else:
            backend = RedisRemoteCacheBackend(cache_id)
        super().__init__(backend, RemoteCacheJsonSerde())
        self._key_fmt = "pt2:%s::{key}:c1" % cache_id

    def _get(self, key, sample):
        return super()._get(self._key_fmt.format(key=key), sample)

    def _put(self, key, value, sample):
        super()._put(self._key_fmt.format(key=key), value, sample)


class RemoteAutotuneCache(RedisRemoteCache):
    pass


class RemoteBundledAutotuneCache(RedisRemoteCache):
    pass


class RemoteFxGraphCache(RedisRemoteCache):
    pass


class RemoteAOTAutogradCache(RedisRemoteCache):
    pass


class RemoteDynamoPGOCache(RedisRemoteCache):
    pass


def create_cache(key, is_fbcode, fb_cache_cls, oss_cache_cls):
    try:
        return getattr(sys.modules[__name__], oss_cache_cls)(key)
    except Exception:
        import logging
        logging.getLogger(__name__).warning("Unable to create cache", exc_info=True)
        return None
