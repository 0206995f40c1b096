# SPDX-License-Identifier: Apache-2.0
"""idle-exit (daemon/idle.c): a daemon with it set stops, as on SIGTERM
(exit 0, its socket removed), once no client has been connected and nothing
has been in flight for that long; one that has a client, or is asked again
and again by short-lived ones, stays. Off by default."""
import os
import subprocess
import time

from harness import Daemon, Raw, small_ir


def test_idle_exit_waits_for_clients_then_stops_cleanly():
    with Daemon(workers=1, extra=["--idle-exit", "2", "--log-level", "info"]) as d:
        held = Raw(d.socket)
        time.sleep(3.5)
        assert d.proc.poll() is None, "exited while a client was connected"
        held.close()
        # Short connections, each between two of the daemon's ticks, keep it too.
        until = time.time() + 3.5
        while time.time() < until:
            d.cli("compile", "--arch", "sm_80", "-o", "/dev/null", "-", input=small_ir("idle"))
            time.sleep(0.3)
        assert d.proc.poll() is None, "exited while clients kept coming"
        t0 = time.time()
        assert d.proc.wait(timeout=15) == 0, d.logtext()
        assert 1.5 < time.time() - t0 < 6, time.time() - t0
        assert not os.path.exists(d.socket)
        assert "idle-exit" in d.logtext(), d.logtext()


def test_idle_exit_is_off_by_default():
    with Daemon(workers=1) as d:
        r = subprocess.run([d.args[0], "--print-config"], capture_output=True, text=True)
        assert any(line.split()[:3] == ["idle-exit", "=", "0"] for line in r.stdout.splitlines()), \
            r.stdout
        time.sleep(2.5)
        assert d.proc.poll() is None
