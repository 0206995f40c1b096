# SPDX-License-Identifier: Apache-2.0
"""deploy/kubernetes/, checked without a cluster. Debian ships no tool
that validates manifests against Kubernetes' schemas offline (its kubectl
downloads them from an API server), so the manifests are parsed
(python3-yaml) and the fields a test can name are checked: kinds and
apiVersions, names that refer to each other (volumes, the Secret and its
keys, selectors and labels), the hostPath volumes of the node's cache and
the tenants' sockets, probes that run the image's `ptxcache ping` on the
image's socket, the tier's URL and secret from the Secret, the image's
user, name and tag as `make image` makes them (mk/image.py, the
Makefile), the daemon's arguments naming tenant-dir and tenants, and a
tenant pod that mounts its own socket alone. Then the real daemon is
given the DaemonSet's arguments and environment (`--print-config`): it
must take them, each value from where the manifest puts it. Under a
second."""
import os
import re
import subprocess
import sys
import tempfile

from harness import DAEMON, ROOT

# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "manifests parsed in Python: no C code runs"

try:
    import yaml
except ImportError:     # an interpreter of its own: Debian's python3-yaml (mk/deps.sh)
    sys.path.append("/usr/lib/python3/dist-packages")
    import yaml

K8S = os.path.join(ROOT, "deploy", "kubernetes")
API = {"Namespace": "v1", "Secret": "v1", "Pod": "v1", "DaemonSet": "apps/v1"}
MAKEFILE = open(os.path.join(ROOT, "Makefile")).read()
VERSION = re.search(r"^VERSION\s*:=\s*(\S+)", MAKEFILE, re.M).group(1)
IMAGE_NAME = re.search(r"^IMAGE_NAME\s*\?=\s*(\S+)", MAKEFILE, re.M).group(1)
IMAGE_UID = int(re.search(r"^IMAGE_UID\s*\?=\s*(\d+)", MAKEFILE, re.M).group(1))
IMAGE_PY = open(os.path.join(ROOT, "mk", "image.py")).read()
SOCKET_DIR = re.search(r'^SOCKET_DIR = "([^"]+)"', IMAGE_PY, re.M).group(1)
CACHE_DIR = re.search(r'^CACHE_DIR = "([^"]+)"', IMAGE_PY, re.M).group(1)
SOCKET = SOCKET_DIR + "/ptxcached.sock"
TENANT_NAME = re.compile(r"^[a-z0-9-]{1,32}$")


def docs():
    """{kind: [object, ...]} of every manifest, each checked for its
    apiVersion and a name."""
    out = {}
    files = sorted(f for f in os.listdir(K8S) if f.endswith(".yaml"))
    assert files, K8S
    for f in files:
        with open(os.path.join(K8S, f)) as fh:
            text = fh.read()
        assert text.startswith("# SPDX-License-Identifier: Apache-2.0\n"), f
        for d in yaml.safe_load_all(text):
            assert d["kind"] in API, (f, d["kind"])
            assert d["apiVersion"] == API[d["kind"]], (f, d["kind"], d["apiVersion"])
            assert d["metadata"]["name"], f
            out.setdefault(d["kind"], []).append(d)
    return out


def one(all_docs, kind):
    assert len(all_docs.get(kind, [])) == 1, (kind, all_docs.get(kind))
    return all_docs[kind][0]


def volumes_ok(spec):
    """Every mount names a volume of the pod; {volume name: volume}."""
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    assert len(vols) == len(spec.get("volumes", [])), "two volumes of one name"
    for c in spec.get("initContainers", []) + spec["containers"]:
        assert c["name"] and c["image"], c
        for m in c.get("volumeMounts", []):
            assert m["name"] in vols, (c["name"], m["name"])
            assert m["mountPath"].startswith("/"), m
    return vols


def flag(args, name):
    assert args.count(name) == 1, (name, args)
    return args[args.index(name) + 1]


def daemonset_parts():
    d = docs()
    ds = one(d, "DaemonSet")
    ns = one(d, "Namespace")["metadata"]["name"]
    secret = one(d, "Secret")
    assert ds["metadata"]["namespace"] == ns == secret["metadata"]["namespace"]
    spec = ds["spec"]["template"]["spec"]
    c = [x for x in spec["containers"] if x["name"] == "ptxcached"]
    assert len(c) == 1, spec["containers"]
    return d, ds, spec, c[0], secret


def test_kubernetes_daemonset_node_cache_tenants_probes_secret():
    d, ds, spec, c, secret = daemonset_parts()
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items(), "selector misses the pods"
    vols = volumes_ok(spec)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    # The image: make image's name and tag, in the cluster's registry.
    repo, tag = c["image"].rsplit(":", 1)
    assert repo.rsplit("/", 1)[-1] == IMAGE_NAME and tag == VERSION, c["image"]
    # Its user, as the image has it; not root.
    sc = spec["securityContext"]
    assert sc["runAsUser"] == sc["runAsGroup"] == IMAGE_UID and sc["runAsNonRoot"] is True, sc
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # The daemon needs no init (it may be PID 1) and shares no pid space.
    assert not spec.get("shareProcessNamespace"), spec.get("shareProcessNamespace")
    # The node's cache on a hostPath, at the image's cache directory.
    cache = vols[mounts[CACHE_DIR]]
    assert cache["hostPath"]["path"] == "/var/cache/ptxcache", cache
    assert cache["hostPath"]["type"] == "DirectoryOrCreate"
    # The tenants' sockets: a hostPath directory, the daemon's tenant-dir.
    args = c["args"]
    tenant_dir = flag(args, "--tenant-dir")
    tenants = flag(args, "--tenants").split(",")
    assert tenants and all(TENANT_NAME.match(t) for t in tenants), tenants
    assert len(set(tenants)) == len(tenants), tenants
    tvol = vols[mounts[tenant_dir]]
    assert tvol["hostPath"]["path"] == "/run/ptxcache/tenants", tvol
    # The main socket stays in the pod: an emptyDir at the image's socket dir.
    assert "emptyDir" in vols[mounts[SOCKET_DIR]], vols[mounts[SOCKET_DIR]]
    hostpaths = {v["hostPath"]["path"] for v in vols.values() if "hostPath" in v}
    assert hostpaths == {"/var/cache/ptxcache", "/run/ptxcache/tenants"}, hostpaths
    # The hostPath directories are handed to the image's user first.
    init = spec["initContainers"]
    assert len(init) == 1 and init[0]["command"][:2] == ["chown", "%d:%d" % (IMAGE_UID, IMAGE_UID)]
    init_mounts = {m["name"]: m["mountPath"] for m in init[0]["volumeMounts"]}
    assert set(init[0]["command"][2:]) == {init_mounts[mounts[CACHE_DIR]],
                                           init_mounts[mounts[tenant_dir]]}, init
    # Probes: the image's CLI pings the image's socket.
    for probe in ("readinessProbe", "livenessProbe"):
        cmd = c[probe]["exec"]["command"]
        assert cmd == ["/usr/bin/ptxcache", "--socket", SOCKET, "ping"], (probe, cmd)
        assert c[probe]["timeoutSeconds"] >= 1, probe
    # Resources, requested and limited.
    for k in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][k]), c["resources"]
    # The tier: its URL and secret from the Secret.
    env = {e["name"]: e for e in c["env"]}
    ref = env["PTXCACHE_L2"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"], ref
    assert re.match(r"^redis(-cluster)?://", secret["stringData"][ref["key"]]), secret["stringData"]
    secret_file = env["PTXCACHE_L2_SECRET_FILE"]["value"]
    sdir, sname = os.path.split(secret_file)
    svol = vols[mounts[sdir]]["secret"]
    assert svol["secretName"] == secret["metadata"]["name"], svol
    items = {i["path"]: i["key"] for i in svol["items"]}
    assert items[sname] in secret["stringData"], (items, sname)
    assert svol["defaultMode"] & 0o007 == 0, "the tier's secret readable by others"
    assert spec["securityContext"]["fsGroup"] == IMAGE_UID      # readable by the daemon's group
    assert ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 30


def test_kubernetes_tenant_pod_mounts_its_own_socket_alone():
    d, ds, spec, c, secret = daemonset_parts()
    tenant_dir = flag(c["args"], "--tenant-dir")
    tenants = flag(c["args"], "--tenants").split(",")
    host_dir = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}[tenant_dir]
    host_dir = {v["name"]: v for v in spec["volumes"]}[host_dir]["hostPath"]["path"]
    pods = d["Pod"]
    assert pods, "no tenant pod"
    for pod in pods:
        ps = pod["spec"]
        vols = volumes_ok(ps)
        hostvols = {n: v["hostPath"] for n, v in vols.items() if "hostPath" in v}
        assert len(hostvols) == 1, hostvols      # nothing of the node but its socket
        (vname, hp), = hostvols.items()
        m = re.match(r"^%s/([a-z0-9-]+)\.sock$" % re.escape(host_dir), hp["path"])
        assert m and m.group(1) in tenants, (hp["path"], tenants)
        assert hp["type"] == "Socket", hp
        for ctr in ps["containers"]:
            env = {e["name"]: e.get("value") for e in ctr.get("env", [])}
            mounts = [x for x in ctr.get("volumeMounts", []) if x["name"] == vname]
            assert len(mounts) == 1 and mounts[0]["mountPath"] == env["PTXCACHE_SOCKET"], (mounts, env)
            assert env["PTXCACHE_TORCH"] == "1", env


def test_kubernetes_daemon_takes_the_daemonsets_arguments():
    """The daemon of this tree, given the image's entrypoint flags and the
    DaemonSet's arguments and environment, prints each setting from where
    the manifest set it, the tenant flags included; the tier's URL with its
    password as "***", never the password or the secret itself."""
    d, ds, spec, c, secret = daemonset_parts()
    args = list(c["args"])
    helptext = subprocess.run([DAEMON, "--help"], capture_output=True, text=True).stdout
    for f in ("--tenant-dir", "--tenants"):
        assert f in args, (f, args)
        assert f in helptext, "the daemon has no %s, which the DaemonSet passes" % f
    with tempfile.TemporaryDirectory() as t:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PTXCACHE_")}
        secret_file = os.path.join(t, "secret")
        with open(secret_file, "w") as f:
            f.write(secret["stringData"]["secret"] + "\n")
        env["PTXCACHE_L2"] = secret["stringData"]["url"]
        env["PTXCACHE_L2_SECRET_FILE"] = secret_file
        env["PTXCACHE_CONFIG"] = os.path.join(t, "empty.conf")   # the image has none
        open(env["PTXCACHE_CONFIG"], "w").close()
        r = subprocess.run([DAEMON, "--socket", os.path.join(t, "s"), "--cache-dir",
                            os.path.join(t, "c")] + args + ["--print-config"],
                           capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode == 0, r.stderr
        cfg = dict(re.findall(r"^(\S+) = (.*)$", r.stdout, re.M))
        url = secret["stringData"]["url"]
        m = re.match(r"^(redis(?:s|-cluster)?://)([^:@/]*):([^@]+)@(.*)$", url)
        assert m, "the manifest's URL has no password to hide: %s" % url
        password = m.group(3)
        assert password not in r.stdout + r.stderr, "the tier's password printed"
        assert secret["stringData"]["secret"] not in r.stdout + r.stderr, "the secret printed"
        shown = "%s%s:***@%s" % (m.group(1), m.group(2), m.group(4))
        assert cfg["l2"] == shown + "\t# environment PTXCACHE_L2", cfg["l2"]
        assert cfg["l2-secret-file"].endswith("# environment PTXCACHE_L2_SECRET_FILE")
        assert cfg["workers"] == flag(args, "--workers") + "\t# flag", cfg["workers"]
        assert cfg["tenant-dir"] == flag(args, "--tenant-dir") + "\t# flag", cfg
        assert cfg["tenants"] == flag(args, "--tenants") + "\t# flag", cfg
