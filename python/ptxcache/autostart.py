# SPDX-License-Identifier: Apache-2.0
"""A daemon of the user's own, where no node service answers.

A ``Client`` whose socket was not given (no path, no ``$PTXCACHE_SOCKET``)
tries the user's default socket, then the node's service socket
(``/run/ptxcache/ptxcached.sock``, ``$PTXCACHE_NODE_SOCKET`` where set);
when neither answers it runs ``ptxcache autostart``, which starts
``ptxcached`` for this user exactly as the C fronts do
(``client/autostart.c``: detached, on the user's default socket and cache
directory, under a lock file beside the socket so that of many processes
starting at once one starts it, with ``idle-exit`` and a size cap within
the disk's free space, its log in ``CACHE_DIR/ptxcached.log``). One
implementation of that protocol, in C, for every client: this module only
finds the binary, runs it and says what happened. ``PTXCACHE_AUTOSTART=0``
turns it off.
"""
from __future__ import annotations

import os

from .errors import ConnectError

__all__ = ["enabled", "own_socket", "node_socket", "log_path", "start", "IDLE_EXIT_S"]

# Where the node's systemd service listens (systemd/ptxcached.socket).
NODE_SOCKET = "/run/ptxcache/ptxcached.sock"
# client/autostart.h: AUTOSTART_IDLE_EXIT_S.
IDLE_EXIT_S = 900


def enabled(env: dict | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get("PTXCACHE_AUTOSTART", "1") != "0"


def own_socket(env: dict | None = None) -> str:
    """The user's own default socket (never the node's)."""
    env = os.environ if env is None else env
    x = env.get("XDG_RUNTIME_DIR")
    if x:
        return os.path.join(x, "ptxcache", "ptxcached.sock")
    return "/tmp/ptxcache-%d/ptxcached.sock" % os.getuid()


def node_socket(env: dict | None = None) -> str:
    env = os.environ if env is None else env
    return env.get("PTXCACHE_NODE_SOCKET") or NODE_SOCKET


def cache_dir(env: dict | None = None) -> str:
    """The user's default cache directory, as ptxcached computes it."""
    env = os.environ if env is None else env
    if env.get("XDG_CACHE_HOME"):
        return os.path.join(env["XDG_CACHE_HOME"], "ptxcache")
    if env.get("HOME"):
        return os.path.join(env["HOME"], ".cache", "ptxcache")
    return "/tmp/ptxcache-%d" % os.getuid()


def log_path(env: dict | None = None) -> str:
    """Where a daemon started for the user writes its log."""
    return os.path.join(cache_dir(env), "ptxcached.log")


def start(timeout: float = 60.0) -> tuple[str, str]:
    """Make sure a daemon answers for this user: (how, socket), how being
    "own" or "node" (one answered already) or "started". Raises
    ConnectError naming what failed."""
    import subprocess           # here: every client imports this module, few start a daemon
    from . import front
    binary, how = front.find_ptxcache_binary()
    if not binary:
        raise ConnectError("no daemon answers, and none can be started: %s" % how)
    env = dict(os.environ)
    env.pop("PTXCACHE_SOCKET", None)
    try:
        r = subprocess.run([binary, "autostart"], env=env, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConnectError("cannot start ptxcached through '%s autostart': %s" % (binary, e)) from None
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        raise ConnectError("cannot start ptxcached: %s" % msg.removeprefix("ptxcache: "))
    parts = r.stdout.split(None, 1)
    if len(parts) != 2:
        raise ConnectError("'%s autostart' said %r" % (binary, r.stdout))
    return parts[0], parts[1].strip()
