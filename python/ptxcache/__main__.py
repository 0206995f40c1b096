# SPDX-License-Identifier: Apache-2.0
"""python3 -m ptxcache: what is wired and what is not.

    python3 -m ptxcache status [--json] [--no-import]
    python3 -m ptxcache env            # the variables enable() would set, as shell exports
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from . import __version__, autostart, front, inductor, jax as pjax, jit, jitdirs, pgo, prefetch
from . import torch as ptorch, triton as ptriton, wire
from .client import Client, socket_and_source, version_of
from .errors import PtxcacheError, Unsupported


def _version(dist: str) -> str | None:
    """The installed version of dist (without importing it), or None if it
    cannot be imported."""
    try:
        import importlib.util
        if importlib.util.find_spec(dist) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        from importlib import metadata
        return metadata.version(dist)
    except Exception:
        return "unknown version"


def _daemon(path: str) -> dict[str, Any]:
    d: dict[str, Any] = {"socket": path}
    try:
        with Client(path) as c:
            h = c.hello()
            v = version_of(h)
            d.update(reachable=True, server=h.get("server"), pid=h.get("pid"), version=v,
                     same_version=v == __version__,
                     assembler=(h.get("assembler") or "").strip().splitlines()[-1:] or None)
            try:
                c.artifact_get("ptxcache", "status-probe", lease=False, wait_ms=0)
                d["artifacts"] = True
            except Unsupported:
                d["artifacts"] = False
            try:
                s = c.stats()
                d["stats"] = {k: v for k, v in s.items() if k.startswith("artifact")}
                # The socket's tenant ("-": the main socket; ptxcached(8), TENANTS).
                d["tenant"] = s.get("tenant", "-")
                # The shared tier, as the daemon shows it: its password "***".
                if "l2" in s:
                    d["l2"] = s["l2"]
            except PtxcacheError:
                pass
    except PtxcacheError as e:
        d.update(reachable=False, error=str(e))
    return d


def _cmdline(pid: Any) -> list[str]:
    try:
        with open("/proc/%d/cmdline" % int(pid), "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except (OSError, TypeError, ValueError):
        return []


def _daemon_in_use() -> dict[str, Any]:
    """Which daemon a client of this environment uses, and why: "given"
    ($PTXCACHE_SOCKET), "own" (the user's, at the default socket), "node
    service", or "none" (with what a client would do about it)."""
    env = os.environ
    if env.get("PTXCACHE_SOCKET"):
        d = _daemon(env["PTXCACHE_SOCKET"])
        d.update(socket_from="PTXCACHE_SOCKET", in_use="given" if d["reachable"] else "none",
                 why="PTXCACHE_SOCKET names it: clients use it and nothing else, and never "
                     "start a daemon for it")
        return d
    own, node = autostart.own_socket(), autostart.node_socket()
    path, src = socket_and_source()
    d = _daemon(own) if os.path.exists(own) else {"socket": own, "reachable": False,
                                                  "error": "no socket at '%s'" % own}
    if d["reachable"]:
        args = _cmdline(d.get("pid"))
        started = "--idle-exit" in args
        d.update(socket_from=src, in_use="own", started_by_client=started,
                 why="the user's own daemon answers at the default socket" +
                     (" (started by a client; it exits after %s s idle)"
                      % args[args.index("--idle-exit") + 1] if started and
                      args.index("--idle-exit") + 1 < len(args) else ""))
        if os.path.exists(autostart.log_path()):
            d["log"] = autostart.log_path()
        return d
    own_error = d.get("error")
    n = _daemon(node)
    if n["reachable"]:
        n.update(socket_from="the node's service", in_use="node service",
                 why="no daemon of the user's own answers (%s); the node's service does" % own_error)
        return n
    binary, how = front.find_ptxcache_binary()
    n = {"socket": own, "socket_from": src, "reachable": False, "in_use": "none",
         "error": own_error, "node_socket": node, "node_error": n.get("error"),
         "autostart": autostart.enabled(), "ptxcache_binary": binary,
         "why": "nothing answers at the user's socket '%s' or the node's '%s'" % (own, node)}
    if os.path.exists(autostart.log_path()):
        n["log"] = autostart.log_path()
    return n


def _next_steps(out: dict[str, Any]) -> list[str]:
    """What to do about what is missing, most important first."""
    steps = []
    d = out["daemon"]
    if d["in_use"] == "none":
        if d.get("socket_from") == "PTXCACHE_SOCKET":
            steps.append("start the daemon that PTXCACHE_SOCKET names, or unset it to use the "
                         "node's or your own")
        elif not d.get("autostart"):
            steps.append("PTXCACHE_AUTOSTART=0 keeps clients from starting one: unset it, run "
                         "'ptxcache autostart', or ask for the node service "
                         "(systemctl enable --now ptxcached.socket)")
        elif d.get("ptxcache_binary"):
            steps.append("nothing to do: the first client (the fronts, or this package) starts "
                         "ptxcached for you; to start it now: ptxcache autostart")
        else:
            steps.append("no ptxcache programs found: pip install ptxcache (or the Debian "
                         "package ptxcache)")
    elif d.get("version") and not d.get("same_version"):
        if d["in_use"] == "own":
            steps.append("the daemon (pid %s) is version %s, this package %s: stop it (kill %s); "
                         "the next client starts this version's" % (d.get("pid"), d["version"],
                                                                   __version__, d.get("pid")))
        else:
            steps.append("the daemon at '%s' is version %s, this package %s: update one of "
                         "them" % (d["socket"], d["version"], __version__))
    if not (out["triton"]["wired"] and out["ptxas"]["wired"]):
        steps.append("to put every JIT's cache on it (Triton's, Inductor's and their ptxas, JAX's, "
                     "CuPy's and DeepGEMM's directories): PTXCACHE_JIT=1 (with ptxcache.pth "
                     "installed, as pip install does), or ptxcache.jit.enable() before the first "
                     "compile")
    return steps


def _pgo_job() -> dict[str, Any]:
    """Which job id a program started in this environment gives PyTorch's
    profile of dynamic shapes (ptxcache.pgo), as {job_id_from, note}."""
    env = os.environ
    user = next((v for v in pgo.USER_VARS if env.get(v) is not None), None)
    if user:
        return {"job_id_from": user, "note": "PGO job id: yours, %s=%s" % (user, env[user])}
    if env.get(ptorch.ENV_SWITCH, "0") in ("", "0"):
        return {"job_id_from": None,
                "note": "no PGO job id: PyTorch keeps no profile without one (TORCH_COMPILE_JOB_ID), "
                        "and the package gives one only where %s=1" % ptorch.ENV_SWITCH}
    if env.get(pgo.ENV) == "0":
        return {"job_id_from": None,
                "note": "no PGO job id: %s=0 (PyTorch keeps no profile without one)" % pgo.ENV}
    return {"job_id_from": "ptxcache",
            "note": "PGO job id: each program its own, from its script's path, content and "
                    "arguments (%s=0: none)" % pgo.ENV}


def status(do_import: bool) -> dict[str, Any]:
    # This process is no job: it fetches and records no entries of its own.
    os.environ[prefetch.ENV] = "0"
    jit.turn_on_waiting()       # as a program that imports its JIT has them
    out: dict[str, Any] = {"package": {"version": __version__, "file": os.path.dirname(__file__),
                                       "msgpack": wire.codec_name(),
                                       "pth_installed": ptorch.pth_installed()},
                           "switch": {v: os.environ.get(v) for v in (jit.ENV_SWITCH, ptorch.ENV_SWITCH)},
                           "daemon": _daemon_in_use()}
    fr, how = front.find_front(make_link=False)
    out["ptxas"] = {"front": fr, "found": how, "TRITON_PTXAS_PATH": os.environ.get("TRITON_PTXAS_PATH"),
                    "triton_ptxas": front.triton_ptxas(),
                    "PTXCACHE_PTXAS": os.environ.get("PTXCACHE_PTXAS")}
    out["ptxas"]["wired"] = bool(out["ptxas"]["TRITON_PTXAS_PATH"]) and \
        os.path.realpath(out["ptxas"]["TRITON_PTXAS_PATH"] or "") == os.path.realpath(fr or "-")
    tm, tb = os.environ.get("TRITON_CACHE_MANAGER"), os.environ.get("TRITON_REMOTE_CACHE_BACKEND")
    out["triton"] = {"version": _version("triton"), "TRITON_CACHE_MANAGER": tm,
                     "TRITON_REMOTE_CACHE_BACKEND": tb,
                     "wired": tm == ptriton.MANAGER_SPEC and tb == ptriton.BACKEND_SPEC}
    ind: dict[str, Any] = {"version": _version("torch"), "tested": list(inductor.TESTED_TORCH),
                           "caches": {}}
    for cache, (var, mod, attr) in inductor.SWITCHES.items():
        ind["caches"][cache] = {"namespace": inductor.CACHES[cache][0],
                                "lease": inductor.CACHES[cache][1], var: os.environ.get(var)}
    if do_import and ind["version"]:
        try:
            import importlib
            rc = importlib.import_module(inductor.MODULE)
            inst = inductor.installed(rc)
            for cache, (var, mod, attr) in inductor.SWITCHES.items():
                e = ind["caches"][cache]
                e["backend"] = inst[cache]
                try:
                    e[mod + "." + attr] = getattr(importlib.import_module(mod), attr, "absent")
                except Exception as ex:
                    e[mod + "." + attr] = "cannot import: %s" % ex
                e["wired"] = inst[cache] == "ptxcache" and e[mod + "." + attr] is True
        except Exception as ex:
            ind["import_error"] = str(ex)
    else:
        for cache, (var, mod, attr) in inductor.SWITCHES.items():
            e = ind["caches"][cache]
            e["wired"] = None if ind["version"] else False
    for cache, why in inductor.NOT_SWITCHED_ON.items():
        e = ind["caches"].get(cache)
        if e is not None and not e.get("wired"):
            e["note"] = "left off: %s; %s=1 turns it on" % (why,
                                                           inductor.SWITCHES[cache][0])
    ind["caches"]["RemoteDynamoPGOCache"].update(_pgo_job())
    out["inductor"] = ind
    out["jax"] = {"version": _version("jax"), "tested": list(pjax.TESTED_JAX),
                  pjax.ENV_SWITCH: os.environ.get(pjax.ENV_SWITCH)}
    if do_import and out["jax"]["version"] and os.environ.get(pjax.ENV_SWITCH) != "0":
        try:
            import importlib
            importlib.import_module(pjax.MODULE)
            pjax.install_on_import()
            out["jax"].update(pjax.installed())
        except Exception as ex:
            out["jax"]["import_error"] = str(ex)
    out["jax"]["wired"] = (out["jax"].get("cache") == "ptxcache" if "cache" in out["jax"] else
                           None if out["jax"]["version"] else False)
    out["jitdirs"] = jitdirs.status()
    if not out["jitdirs"]["enabled"]:
        # Not enabled in this process: what each kind would be.
        out["jitdirs"]["dirs"] = {
            kind: {"served": False, "why": ("left out: " + k["why"]) if not k["served"] else
                   "%s unset (or ptxcache.pth not installed)" % jit.ENV_SWITCH}
            for kind, k in jitdirs.KINDS.items()}
    out["next"] = _next_steps(out)
    return out


def _yn(v: Any) -> str:
    return {True: "yes", False: "no", None: "?"}.get(v, str(v)) if isinstance(v, (bool, type(None))) else str(v)


def print_status(s: dict[str, Any]) -> None:
    p, d = s["package"], s["daemon"]
    print("ptxcache %s (%s), msgpack: %s, ptxcache.pth installed: %s"
          % (p["version"], p["file"], p["msgpack"], _yn(p["pth_installed"])))
    print("; ".join("%s: %s" % (v, x or "unset") for v, x in s["switch"].items()))
    print("daemon in use: %s: %s" % (d["in_use"], d["why"]))
    if d.get("reachable"):
        print("daemon: %s (from %s): %s, pid %s, artifacts: %s%s%s"
              % (d["socket"], d["socket_from"], d.get("server"), d.get("pid"), _yn(d.get("artifacts")),
                 "" if d.get("tenant", "-") == "-" else ", tenant %s" % d["tenant"],
                 "" if d.get("same_version") else "; version %s, NOT this package's %s"
                 % (d.get("version") or "unknown", p["version"])))
    else:
        print("daemon: %s (from %s): NOT reachable: %s" % (d["socket"], d["socket_from"], d.get("error")))
    if d.get("l2") is not None:
        print("shared tier: %s" % (d["l2"] or "off"))
    if d.get("log"):
        print("daemon log: %s" % d["log"])
    x = s["ptxas"]
    print("ptxas front: %s: %s (%s); TRITON_PTXAS_PATH=%s"
          % ("wired" if x["wired"] else "NOT wired", x["front"] or "none", x["found"],
             x["TRITON_PTXAS_PATH"] or "unset"))
    t = s["triton"]
    print("triton %s: remote cache %s (TRITON_CACHE_MANAGER=%s, TRITON_REMOTE_CACHE_BACKEND=%s)"
          % (t["version"] or "not installed", "wired" if t["wired"] else "NOT wired",
             t["TRITON_CACHE_MANAGER"] or "unset", t["TRITON_REMOTE_CACHE_BACKEND"] or "unset"))
    i = s["inductor"]
    print("torch %s (checked against %s)%s" % (i["version"] or "not installed", ", ".join(i["tested"]),
                                                "; " + i["import_error"] if "import_error" in i else ""))
    for cache, e in i["caches"].items():
        var = inductor.SWITCHES[cache][0]
        w = e.get("wired")
        extra = "" if "backend" not in e else ", backend: %s" % e["backend"]
        print("  %-28s %-10s %s=%s%s%s" % (cache, {True: "wired", False: "NOT wired", None: "?"}[w],
                                          var, e.get(var) or "unset", extra,
                                          ("; " + e["note"]) if "note" in e else ""))
    j = s["jax"]
    print("jax %s (checked against %s): persistent compilation cache %s%s" % (
        j["version"] or "not installed", ", ".join(j["tested"]),
        {True: "on the daemon", False: "NOT on the daemon", None: "?"}[j["wired"]],
        "; " + j["import_error"] if "import_error" in j else
        "; cache: %s" % j["cache"] if "cache" in j else ""))
    print("JIT cache directories, file by file (%s=NAME=PATH,... adds yours):" % jitdirs.ENV_DIRS)
    for kind, row in s["jitdirs"].get("dirs", {}).items():
        print("  %-12s %-10s %s%s" % (kind, "served" if row.get("served") else "NOT served",
                                     row.get("path", ""), "; " + row["why"] if row.get("why") else
                                     "; identity " + row["identity"] if row.get("identity") else ""))
    for step in s["next"]:
        print("next: %s" % step)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m ptxcache",
                                 description="ptxcached from Python: what is wired and what is not.")
    sub = ap.add_subparsers(dest="cmd")
    st = sub.add_parser("status", help="the daemon, the ptxas front, Triton's and Inductor's caches")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.add_argument("--no-import", action="store_true",
                    help="do not import PyTorch to check its remote caches")
    sub.add_parser("env", help="the variables ptxcache.torch.enable() would set, as shell exports")
    a = ap.parse_args(argv)
    if a.cmd == "status":
        s = status(not a.no_import)
        if a.json:
            json.dump(s, sys.stdout, indent=2, default=str)
            print()
        else:
            print_status(s)
        return 0 if s["daemon"].get("reachable") else 1
    if a.cmd == "env":
        import shlex
        for var, (value, why) in ptorch.planned_environment().items():
            print("export %s=%s   # %s" % (var, shlex.quote(value), why))
        print("export %s=1" % ptorch.ENV_SWITCH)
        return 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
