# SPDX-License-Identifier: Apache-2.0
"""The OCI image (`make image`, mk/image.py) end to end: built from
scratch, its layer holds the two programs, the glibc files they need and
nothing else runnable, its config runs ptxcached as the non-root user
65532 with the socket and cache directories as volumes; then the image's
own entrypoint runs and serves, from outside, `ptxcache ping`, a compile
of a corpus kernel identical to a daemon of the build tree, and an
artifact put and get, and the image's own CLI answers the probe the
DaemonSet runs (deploy/kubernetes/).

How it runs, both where both can:
- in a chroot, always (as root): the rootfs unpacked by `umoci unpack`
  (ownership as the image has it), the entrypoint and user read from the
  runtime config umoci derives from the image, run by `chroot
  --userspec=UID:GID` in a mount namespace of its own with /proc and
  /dev mounted; the volumes are the rootfs's own directories, as a
  runtime initialises an anonymous volume;
- under podman (test_image_runs_under_podman): the archive loaded and
  run (here it needs runc, as crun refuses the hybrid cgroup hierarchy,
  and limits no higher than the ones it has); a step that fails fails the
  test. .ci/run installs podman (mk/deps.sh podman); where it is not
  installed the test skips, saying so. No `--init`: the daemon is PID 1
  there, as in the chroot.
Skipped only where not root (chroot, unshare and mount need it), under
make check-asan and inside the Debian package's build. About 10 s here, podman's run included (the static build is
incremental, in build-static/)."""
import atexit
import gzip
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time

from harness import CLI, ROOT, SANITIZED, Daemon, Skip, triton_kernels

# tests/run.py: one after another with the other files of this group (they build build-static/).
GROUP = "static"
# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the image holds the static programs"

VERSION = re.search(r"^VERSION\s*:=\s*(\S+)", open(os.path.join(ROOT, "Makefile")).read(),
                    re.M).group(1)
UID = 65532
SOCKET_DIR, CACHE_DIR = "/run/ptxcache", "/var/cache/ptxcache"
SOCKET = SOCKET_DIR + "/ptxcached.sock"
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
              "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
COMPILE = ["compile", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", "-"]
_cache = {}


def need_image_context():
    if SANITIZED:
        raise Skip("the image holds the static build, not the sanitized one: make test runs this")
    if os.environ.get("PTXCACHE_PACKAGE_BUILD"):
        raise Skip("inside the Debian package's build: the image is another package of the tree")


def image():
    """make image into a temp dir, once per run; (dir, its output)."""
    need_image_context()
    if "dir" not in _cache:
        d = tempfile.mkdtemp(prefix="ptxcache-image-")
        atexit.register(shutil.rmtree, d, True)
        r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "image",
                            "IMAGE_DIR=" + d], capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        _cache["dir"], _cache["out"] = d, r.stdout
    return _cache["dir"]


def blob(layout, digest):
    return os.path.join(layout, "blobs", *digest.split(":", 1))


def expected():
    """A corpus kernel and its PTX from a daemon of the build tree."""
    if "want" not in _cache:
        ir = open(triton_kernels()[1], "rb").read()
        with Daemon(workers=1) as d:
            _cache["want"] = (ir, d.cli(*COMPILE, input=ir).stdout)
    return _cache["want"]


def cli(sock, *args, input=None):
    return subprocess.run([CLI, "--socket", sock] + list(args), input=input, capture_output=True,
                          timeout=300, env=dict(os.environ, PTXCACHE_AUTOSTART="0"))


def wait_ping(sock, proc, what, log):
    deadline = time.time() + 60
    while True:
        r = cli(sock, "ping")
        if r.returncode == 0:
            return r
        assert proc is None or proc.poll() is None, "%s exited: %s" % (what, log())
        assert time.time() < deadline, "%s did not answer: %r %s" % (what, r.stderr, log())
        time.sleep(0.1)


def check_serves(sock, cache_dir, tag):
    """From outside: a compile identical to the build tree's daemon, an
    artifact round trip; the socket and the cache are the image user's."""
    ir, want = expected()
    r = cli(sock, *COMPILE, input=ir)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want, "the image's PTX differs from the build tree's daemon's"
    value = hashlib.sha256(tag.encode()).digest() * 4096     # 128 KiB
    with tempfile.NamedTemporaryFile() as f:
        f.write(value)
        f.flush()
        assert cli(sock, "artifact", "get", "triton", "image-" + tag).returncode == 1
        r = cli(sock, "artifact", "put", "triton", "image-" + tag, f.name)
        assert r.returncode == 0, r.stderr
    r = cli(sock, "artifact", "get", "triton", "image-" + tag)
    assert r.returncode == 0 and r.stdout == value, (r.returncode, len(r.stdout), r.stderr)
    assert os.stat(sock).st_uid == UID, "the socket is not the image user's"
    assert os.stat(os.path.join(cache_dir, "cache.db")).st_uid == UID


def test_image_is_from_scratch_and_runs_as_its_user():
    d = image()
    assert re.search(r"image ptxcache:%s: \d+ files, [\d.]+ MB unpacked, [\d.]+ MB compressed"
                     % re.escape(VERSION), _cache["out"]), _cache["out"]
    layout = os.path.join(d, "oci")
    index = json.load(open(os.path.join(layout, "index.json")))
    assert [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]] \
        == ["ptxcache:" + VERSION], index
    manifest = json.load(open(blob(layout, index["manifests"][0]["digest"])))
    assert len(manifest["layers"]) == 1, manifest     # from scratch: no base layer
    config = json.load(open(blob(layout, manifest["config"]["digest"])))
    c = config["config"]
    assert c["User"] == "%d:%d" % (UID, UID), c
    assert c["Entrypoint"] == ["/usr/bin/ptxcached", "--socket", SOCKET, "--cache-dir", CACHE_DIR], c
    assert set(c["Volumes"]) == {SOCKET_DIR, CACHE_DIR}, c
    assert config["architecture"] == {"x86_64": "amd64", "aarch64": "arm64"}[os.uname().machine]
    with tarfile.open(blob(layout, manifest["layers"][0]["digest"])) as t:
        members = {m.name: m for m in t.getmembers()}
        passwd = t.extractfile("etc/passwd").read().decode()
    files = {n for n, m in members.items() if m.isfile()}
    libs = {n for n in files if n.startswith(("lib/", "lib64/"))}
    assert files - libs == {"usr/bin/ptxcached", "usr/bin/ptxcache", "etc/passwd", "etc/group",
                            "etc/nsswitch.conf"}, files
    # glibc's loader and the libraries the programs NEED (and those NEED),
    # read off the image's own files: nothing more, nothing but glibc's.
    names = {os.path.basename(n) for n in libs} | \
        {os.path.basename(n) for n, m in members.items() if m.issym()}
    with tempfile.TemporaryDirectory() as t, \
            tarfile.open(blob(layout, manifest["layers"][0]["digest"])) as tf:
        tf.extractall(t, members=[m for m in tf.getmembers() if m.isfile() or m.issym()])
        want, todo = set(), ["usr/bin/ptxcached", "usr/bin/ptxcache"]
        while todo:
            f = os.path.join(t, todo.pop())
            dyn = subprocess.run(["objdump", "-p", f], capture_output=True, text=True).stdout
            interp = subprocess.run(["readelf", "-l", f], capture_output=True, text=True).stdout
            for n in re.findall(r"^\s*NEEDED\s+(\S+)", dyn, re.M) + \
                    re.findall(r"program interpreter: /\S*/([^/\]]+)\]", interp):
                if n not in want:
                    want.add(n)
                    found = [x for x in libs if os.path.basename(x) == n]
                    todo += found
    assert names == want, (names, want)
    assert names <= GLIBC_LIBS, names
    assert "ptxcache:x:%d:%d:" % (UID, UID) in passwd, passwd
    for v in (SOCKET_DIR, CACHE_DIR):
        m = members[v.lstrip("/")]
        assert m.isdir() and m.uid == UID and m.gid == UID, (v, m.uid)
    assert members["tmp"].mode == 0o1777
    assert all(m.uid == 0 for n, m in members.items() if n not in (SOCKET_DIR[1:], CACHE_DIR[1:]))
    assert not any(n.endswith(("/sh", "/bash", "/busybox")) for n in members), "a shell in the image"
    # The archive is the same image as the layout: its own index names one
    # manifest, whose config (entrypoint, user, environment, volumes) and
    # layers are blobs of the archive whose bytes hash to their digests and
    # have their sizes, the layer the layout's.
    with tarfile.open(os.path.join(d, "ptxcache-%s.oci.tar" % VERSION)) as t:
        def member(name):
            f = t.extractfile(name)
            assert f is not None, "%s missing from the archive" % name
            return f.read()

        def verified(desc):
            data = member("blobs/" + desc["digest"].replace(":", "/", 1))
            algo, hexd = desc["digest"].split(":", 1)
            assert algo == "sha256" and hashlib.sha256(data).hexdigest() == hexd, desc
            assert len(data) == desc["size"], (desc, len(data))
            return data

        assert json.loads(member("oci-layout")) == {"imageLayoutVersion": "1.0.0"}
        aindex = json.loads(member("index.json"))
        assert len(aindex["manifests"]) == 1, aindex
        amd = aindex["manifests"][0]
        assert amd["annotations"]["org.opencontainers.image.ref.name"] == "ptxcache:" + VERSION, amd
        amanifest = json.loads(verified(amd))
        assert amanifest.get("schemaVersion") == 2 and amanifest["config"]["mediaType"] == \
            "application/vnd.oci.image.config.v1+json", amanifest
        aconfig = json.loads(verified(amanifest["config"]))
        ac = aconfig["config"]
        assert ac["Entrypoint"] == c["Entrypoint"] and ac["User"] == c["User"], ac
        assert ac.get("Env") == c.get("Env") and set(ac["Volumes"]) == set(c["Volumes"]), ac
        assert any(e.startswith("PATH=") for e in ac.get("Env", [])), ac
        assert len(amanifest["layers"]) == 1, amanifest
        layer = verified(amanifest["layers"][0])
        with open(blob(layout, manifest["layers"][0]["digest"]), "rb") as f:
            assert layer == f.read(), "the archive's layer is not the layout's"
        # Its rootfs diff_ids: the layer's uncompressed bytes.
        raw = gzip.decompress(layer) if layer[:2] == b"\x1f\x8b" else layer
        assert aconfig["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw).hexdigest()], \
            aconfig["rootfs"]


def run_in_chroot(layout, tmp):
    """The image's entrypoint, as its user, in a chroot of its unpacked
    rootfs; what it served is checked."""
    bundle = os.path.join(tmp, "bundle")
    r = subprocess.run(["umoci", "unpack", "--image", "%s:ptxcache:%s" % (layout, VERSION), bundle],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    spec = json.load(open(os.path.join(bundle, "config.json")))
    args, user = spec["process"]["args"], spec["process"]["user"]
    assert (user["uid"], user["gid"]) == (UID, UID), user
    rootfs = os.path.join(bundle, spec["root"]["path"])
    log_path = os.path.join(tmp, "chroot.log")
    script = ('mount --make-rprivate / && mount -t proc proc "$R/proc" && '
              'mount --rbind /dev "$R/dev" && '
              'exec chroot --userspec=%d:%d --groups=%d "$R" "$@"' % (UID, UID, UID))
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "R": rootfs}
    for e in spec["process"].get("env", []):
        k, _, v = e.partition("=")
        env.setdefault(k, v)
    env["PATH"] = "/usr/bin:/bin:/usr/sbin:/sbin"   # for unshare, mount and chroot here
    log = open(log_path, "wb")
    # A pid namespace of its own: the daemon is PID 1, as in a container
    # with no init.
    proc = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c",
                             script, "sh"] + args + ["--workers", "1"],
                            stdout=log, stderr=log, env=env)
    sock = os.path.join(rootfs, SOCKET.lstrip("/"))
    try:
        wait_ping(sock, proc, "the image's entrypoint in a chroot", lambda: open(log_path).read())
        daemon = int(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                    text=True).stdout.split()[0])
        with open("/proc/%d/status" % daemon) as f:
            status = f.read()
        uids = re.search(r"^Uid:\s+(\d+)", status, re.M).group(1)
        assert int(uids) == UID, "the daemon runs as uid %s" % uids
        assert re.search(r"^NSpid:\s+%d\s+1$" % daemon, status, re.M), status
        check_serves(sock, os.path.join(rootfs, CACHE_DIR.lstrip("/")), "chroot")
        # The probe of the DaemonSet: the image's own CLI, as its user.
        r = subprocess.run(["chroot", "--userspec=%d:%d" % (UID, UID), rootfs, "/usr/bin/ptxcache",
                            "--socket", SOCKET, "ping"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("ok: ptxcached " + VERSION), r.stdout + r.stderr
        os.kill(daemon, signal.SIGTERM)
        assert proc.wait(60) == 0, open(log_path).read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def run_under_podman(archive, tmp):
    """The image under podman, in a private store: loaded, run, served,
    stopped with exit status 0; any step that fails fails the test."""
    podman = shutil.which("podman")
    assert podman
    store = os.path.join(tmp, "podman")
    base = [podman, "--root", store + "/root", "--runroot", store + "/run", "--storage-driver",
            "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none"]
    runc = shutil.which("runc")
    if runc:
        base += ["--runtime", runc]
    r = subprocess.run(base + ["load", "-i", archive], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "podman load failed: " + r.stderr.strip()[-2000:]
    m = re.search(r"Loaded image(?:\(s\))?: (\S+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    ref = m.group(1)
    assert ref == "localhost/ptxcache:" + VERSION, ref     # the name the layout gives
    vols = {}
    for v in (SOCKET_DIR, CACHE_DIR):
        vols[v] = os.path.join(tmp, "vol" + v.replace("/", "-"))
        os.makedirs(vols[v])
        os.chown(vols[v], UID, UID)
    # Limits podman would raise past ours fail without CAP_SYS_RESOURCE:
    # lower ones, ample for one daemon and its worker.
    nofile, nproc = [min(resource.getrlimit(r)[0], 4096) for r in (resource.RLIMIT_NOFILE,
                                                                 resource.RLIMIT_NPROC)]
    name = "ptxcache-test-%d" % os.getpid()
    run = base + ["run", "-d", "--name", name, "--network", "none",
                  "--ulimit", "nofile=%d:%d" % (nofile, nofile), "--ulimit", "nproc=%d:%d" % (nproc, nproc)]
    for v, h in vols.items():
        run += ["-v", "%s:%s" % (h, v)]
    r = subprocess.run(run + [ref, "--workers", "1"], capture_output=True, text=True, timeout=120)
    try:
        assert r.returncode == 0, "podman run failed: " + r.stderr.strip()[-2000:]
        logs = lambda: subprocess.run(base + ["logs", name], capture_output=True, text=True).stderr
        sock = os.path.join(vols[SOCKET_DIR], "ptxcached.sock")
        wait_ping(sock, None, "the image under podman", logs)
        check_serves(sock, vols[CACHE_DIR], "podman")
        r = subprocess.run(base + ["exec", name, "/usr/bin/ptxcache", "--socket", SOCKET, "ping"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("ok: ptxcached " + VERSION), r.stdout + r.stderr
        r = subprocess.run(base + ["stop", "-t", "30", name], capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        state = subprocess.run(base + ["inspect", "-f", "{{.State.ExitCode}}", name],
                               capture_output=True, text=True).stdout.strip()
        assert state == "0", (state, logs())
    finally:
        subprocess.run(base + ["rm", "-f", name], capture_output=True, timeout=120)
        subprocess.run(base + ["rmi", "-a", "-f"], capture_output=True, timeout=120)


def test_image_entrypoint_serves_compile_and_artifacts():
    d = image()
    if os.geteuid() != 0:
        raise Skip("needs root: the image runs in a chroot (chroot, unshare, mount)")
    layout = os.path.join(d, "oci")
    with tempfile.TemporaryDirectory() as tmp:
        run_in_chroot(layout, tmp)
        print("    test_image: the image's entrypoint served in a chroot as uid %d" % UID)


def test_image_runs_under_podman():
    """The archive (`ptxcache-VERSION.oci.tar`) loaded into podman and run
    with the two volumes: it serves, the image's CLI answers the probe, and
    it stops with status 0. .ci/run installs podman (mk/deps.sh podman);
    without it, or not as root (podman's private store and runc here need
    root), this skips, saying so."""
    d = image()
    if not shutil.which("podman"):
        raise Skip("podman is not installed (mk/deps.sh podman; .ci/run installs it)")
    if os.geteuid() != 0:
        raise Skip("needs root: podman runs here with a private store, runc and cgroupfs as root")
    with tempfile.TemporaryDirectory() as tmp:
        run_under_podman(os.path.join(d, "ptxcache-%s.oci.tar" % VERSION), tmp)
        print("    test_image: the image served under podman")
