# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for torch/_inductor/remote_cache.py (PyTorch 2.11): the
classes a backend override plugs into, with PyTorch's call shapes (see
tests/jitstubs/README.md)."""
import json
import sys

try:
    import redis
except ImportError:
    redis = None


class _Stats:
    def __init__(self):
        self.stats = {}

    def add(self, name, what):
        self.stats.setdefault(name, {"hit": 0, "miss": 0, "put": 0, "exception": 0})[what] += 1


cache_stats = _Stats()


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
            cache_stats.add(self._name, "miss" if value is None else "hit")
        except Exception:
            cache_stats.add(self._name, "exception")
            raise
        return value

    def put(self, key, data):
        try:
            self._put(key, data)
            cache_stats.add(self._name, "put")
        except Exception:
            cache_stats.add(self._name, "exception")
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
