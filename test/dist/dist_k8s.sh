#!/usr/bin/env bash
# The Kubernetes manifests (tools/dist/k8s) and the Slurm script
# (tools/dist/slurm), checked offline:
#   - yamllint (strict);
#   - kubectl decodes every object with its own types (`kubectl set env
#     --local`, no cluster): a wrong kind, apiVersion or field type fails,
#     and a misspelled field, which decoding drops, is found by comparing
#     the input with what kubectl gives back;
#   - the fields wcache relies on: hostPID, the /run/wcache hostPath in
#     every container of the daemon and the engine pods, --runtime-dir and
#     probes running `wcctl status` on it, GPUs from nvidia.com/gpu (the same
#     count in both), every rank's --metrics-listen port declared as its
#     container's metrics-<rank> port (the targets Prometheus' pod discovery
#     makes) and no prometheus.io/port pinning the pod to one of them, one
#     container per tp rank;
#   - the command lines are ones the built wcd and wcctl accept;
#   - wcd and the engine run as two non-root users without privilege
#     escalation, capabilities or a writable root file system; wcd serves
#     its group (--socket-group), the engine is in it and trusts wcd's uid
#     (WCACHE_TRUST_UID), an init container hands /run/wcache to wcd's user
#     (run, as root with its capabilities, on a stand-in directory, twice);
#   - a damaged copy fails each of these checks (so they check something);
#   - the Slurm script runs end to end with a stand-in srun (one node, host
#     backend): wcctl start, the engine step, stop, nothing left behind.
# kubectl offline: `kubectl create/apply --dry-run=client` both ask a server
# (discovery or openapi) and fail without a cluster, in kubectl 1.20 and 1.32.
. "$(dirname "$0")/../lib/lib.sh"
K8S=$WC_TOP/tools/dist/k8s
PY=${PYTHON:-/usr/bin/python3}
command -v yamllint >/dev/null || fail "yamllint is not installed (make deps installs it)"
command -v kubectl >/dev/null || fail "kubectl is not installed (make deps installs kubernetes-client)"
"$PY" -c 'import yaml' 2>/dev/null || fail "python3-yaml is missing (yamllint's dependency)"
W=$(tmpdir)
trap 'rm -rf "$W"' EXIT

# check_k8s DIR: every check above on DIR's manifests; prints what failed
check_k8s() {
	local f out rc=0
	out=$(yamllint -s "$1" 2>&1) || { echo "yamllint: $out"; return 1; }
	for f in "$1"/*.yaml; do
		kubectl set env --local -f "$f" -o json WCACHE_LINT=1 --kubeconfig=/dev/null \
			>"$f.json" 2>"$f.err" || { echo "kubectl: $(cat "$f.err")"; rc=1; continue; }
	done
	[ "$rc" = 0 ] || return 1
	"$PY" - "$1" "$BIN" <<'PY'
import glob, json, os, shlex, shutil, subprocess, sys, tempfile, yaml
d, bindir = sys.argv[1], sys.argv[2]
bad = []

def subset(a, b, path):
    """every field of a (the input) is in b (kubectl's decoding)"""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            bad.append("%s: not an object after decoding" % path); return
        for k, v in a.items():
            if k not in b:
                bad.append("%s.%s: unknown field (kubectl dropped it)" % (path, k))
            else:
                subset(v, b[k], path + "." + k)
    elif isinstance(a, list):
        if not isinstance(b, list) or len(b) < len(a):
            bad.append("%s: list changed in decoding" % path); return
        for i, (x, y) in enumerate(zip(a, b)):
            subset(x, y, "%s[%d]" % (path, i))
    elif a != b and str(a) != str(b):
        bad.append("%s: %r became %r" % (path, a, b))

objs = {}
for f in sorted(glob.glob(os.path.join(d, "*.yaml"))):
    docs = [x for x in yaml.safe_load_all(open(f)) if x]
    out = json.load(open(f + ".json"))
    outs = out["items"] if out.get("kind") == "List" else [out]
    if len(docs) != len(outs):
        bad.append("%s: %d objects, kubectl decoded %d" % (f, len(docs), len(outs)))
    for a, b in zip(docs, outs):
        subset(a, b, "%s:%s" % (os.path.basename(f), a.get("kind")))
        objs[a["kind"]] = a

def pod_spec(o):
    return o["spec"]["template"]["spec"] if o["kind"] == "DaemonSet" else o["spec"]

def check_pod(o, what):
    s = pod_spec(o)
    if s.get("hostPID") is not True:
        bad.append(what + ": hostPID is not true (wcd names and watches its clients by pid)")
    vols = {v["name"]: v for v in s.get("volumes", [])}
    rt = [n for n, v in vols.items() if v.get("hostPath", {}).get("path") == "/run/wcache"]
    if not rt:
        bad.append(what + ": no hostPath volume /run/wcache")
    gpus = set()
    for c in s["containers"]:
        mounts = [m for m in c.get("volumeMounts", []) if m["name"] in rt and m["mountPath"] == "/run/wcache"]
        if not mounts:
            bad.append("%s/%s: /run/wcache is not mounted" % (what, c["name"]))
        gpus.add(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu"))
    if None in gpus or len(gpus) != 1:
        bad.append("%s: every container asks for the same nvidia.com/gpu count (got %s)" % (what, gpus))
    return s, gpus.pop() if len(gpus) == 1 else None

def unprivileged(s, what):
    """a non-root pod whose containers cannot gain anything: its uid, gid"""
    sc = s.get("securityContext", {})
    if sc.get("runAsNonRoot") is not True or not sc.get("runAsUser"):
        bad.append(what + ": the pod does not run as a non-root user (runAsNonRoot, runAsUser)")
    for c in s["containers"]:
        cs = c.get("securityContext", {})
        caps = cs.get("capabilities", {})
        if cs.get("allowPrivilegeEscalation") is not False:
            bad.append("%s/%s: allowPrivilegeEscalation is not false" % (what, c["name"]))
        if cs.get("readOnlyRootFilesystem") is not True:
            bad.append("%s/%s: readOnlyRootFilesystem is not true" % (what, c["name"]))
        if "ALL" not in caps.get("drop", []) or caps.get("add"):
            bad.append("%s/%s: capabilities are not all dropped" % (what, c["name"]))
    return sc.get("runAsUser"), sc.get("runAsGroup")

def check_users(ds_spec, pod_spec_, env):
    """issue 26: wcd and the engine run as two unprivileged users, the
    engine in wcd's socket group and trusting wcd's uid"""
    uid, gid = unprivileged(ds_spec, "DaemonSet")
    euid, _ = unprivileged(pod_spec_, "engine Pod")
    if euid == uid:
        bad.append("engine Pod: runs as wcd's uid %s (the example is of another user)" % uid)
    for c in ds_spec["containers"]:
        argv = c["command"] + c.get("args", [])
        if dict(zip(argv, argv[1:])).get("--socket-group") != str(gid):
            bad.append("DaemonSet/%s: wcd without --socket-group %s (its runAsGroup)" % (c["name"], gid))
    if gid not in pod_spec_.get("securityContext", {}).get("supplementalGroups", []):
        bad.append("engine Pod: supplementalGroups lacks wcd's group %s" % gid)
    if env.get("WCACHE_TRUST_UID") != str(uid):
        bad.append("engine Pod: WCACHE_TRUST_UID is not wcd's uid %s" % uid)
    init = " ".join(" ".join(c.get("command", []) + c.get("args", []))
                    for c in ds_spec.get("initContainers", []))
    if "chown %s:%s /run/wcache" % (uid, gid) not in init or "chmod 0710 /run/wcache" not in init:
        bad.append("DaemonSet: no init container gives /run/wcache to %s:%s, mode 0710" % (uid, gid))
    init_runs(ds_spec, uid, gid)

def init_runs(ds_spec, uid, gid):
    """the init containers' commands, run as they run (root with only the
    capabilities they add) on a stand-in of the hostPath, at the pod's
    first start (kubelet's root-owned 0755) and again at a restart (it is
    wcd's already): chmod of a directory root no longer owns needs FOWNER.
    Needs root and setpriv (else not run)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return
    tmp = tempfile.mkdtemp()
    rd = os.path.join(tmp, "wcache")
    os.mkdir(rd)
    os.chmod(rd, 0o755)
    try:
        for start in ("first", "second"):
            for c in ds_spec.get("initContainers", []):
                add = c.get("securityContext", {}).get("capabilities", {}).get("add", [])
                keep = "".join(",+" + a.lower() for a in add)
                argv = [a.replace("/run/wcache", rd) for a in c["command"] + c.get("args", [])]
                p = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-all" + keep] + argv,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if p.returncode:
                    bad.append("DaemonSet/%s: its command fails at the pod's %s start (root with capabilities %s): %s"
                               % (c["name"], start, add, p.stderr.strip()))
                    return
        st = os.stat(rd)
        if (st.st_uid, st.st_gid, st.st_mode & 0o7777) != (uid, gid, 0o710):
            bad.append("DaemonSet: the init container leaves /run/wcache %d:%d mode %04o, not %s:%s 0710"
                       % (st.st_uid, st.st_gid, st.st_mode & 0o7777, uid, gid))
    finally:
        shutil.rmtree(tmp)

def accepted(argv, what):
    """the built tool parses these options (they come before --help)"""
    p = subprocess.run([os.path.join(bindir, argv[0])] + argv[1:] + ["--help"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        bad.append("%s: %s refuses %s: %s" % (what, argv[0], shlex.join(argv[1:]), p.stderr.strip()))

ds, pod = objs.get("DaemonSet"), objs.get("Pod")
if not ds or not pod:
    bad.append("want a DaemonSet and an engine Pod, got %s" % sorted(objs))
else:
    s, dgpu = check_pod(ds, "DaemonSet")
    _, egpu = check_pod(pod, "engine Pod")
    if dgpu != egpu:
        bad.append("the engine asks for %s GPUs, the daemons for %s: both need all of the node's" % (egpu, dgpu))
    ann = ds["spec"]["template"]["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true":
        bad.append("DaemonSet: no prometheus.io/scrape annotation")
    if "prometheus.io/port" in ann:
        bad.append("DaemonSet: prometheus.io/port %s pins every target to one rank's port; declare each rank's port instead" % ann["prometheus.io/port"])
    ranks, mports = [], []
    for c in s["containers"]:
        argv = c["command"] + c.get("args", [])
        a = dict(zip(argv, argv[1:]))
        if a.get("--runtime-dir") != "/run/wcache":
            bad.append("DaemonSet/%s: wcd without --runtime-dir /run/wcache" % c["name"])
        ranks.append(str(a.get("--tp-rank")))
        ml = a.get("--metrics-listen", "")
        cports = {str(p["containerPort"]): p.get("name") for p in c.get("ports", [])}
        mport = ml.rsplit(":", 1)[-1]
        if mport not in cports:
            bad.append("DaemonSet/%s: --metrics-listen %r is not one of its ports %s" % (c["name"], ml, sorted(cports)))
        elif cports[mport] != "metrics-%s" % a.get("--tp-rank"):
            bad.append("DaemonSet/%s: its metrics port %s is named %r, not metrics-%s" % (c["name"], mport, cports[mport], a.get("--tp-rank")))
        mports.append(mport)
        accepted(argv, "DaemonSet/" + c["name"])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            cmd = c.get(probe, {}).get("exec", {}).get("command", [])
            pa = dict(zip(cmd, cmd[1:]))
            if cmd[:2] != ["wcctl", "status"] or pa.get("--runtime-dir") != "/run/wcache":
                bad.append("DaemonSet/%s: %s is not wcctl status --runtime-dir /run/wcache: %s" % (c["name"], probe, cmd))
            else:
                accepted(cmd, "DaemonSet/%s %s" % (c["name"], probe))
    if len(set(mports)) != len(mports):
        bad.append("DaemonSet: ranks share a metrics port: %s" % mports)
    tp = {dict(zip(c["args"], c["args"][1:])).get("--tp-size") for c in s["containers"]}
    if len(tp) != 1 or sorted(ranks) != [str(i) for i in range(int(tp.pop() or 0))]:
        bad.append("DaemonSet: want one container per tp rank, got ranks %s" % ranks)
    env = {e["name"]: e.get("value") for c in pod_spec(pod)["containers"] for e in c.get("env", [])}
    if env.get("WCACHE_SOCKET_TEMPLATE") != "/run/wcache/{device}":
        bad.append("engine Pod: WCACHE_SOCKET_TEMPLATE is not /run/wcache/{device}")
    for c in pod_spec(pod)["containers"]:
        accepted(c["command"] + c.get("args", []), "engine Pod/" + c["name"])
    check_users(s, pod_spec(pod), env)
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}

mkdir "$W/ok"
cp "$K8S"/*.yaml "$W/ok/"
out=$(check_k8s "$W/ok") || fail "tools/dist/k8s: $out"

# each damage is caught (by the check its message names); in parallel
damage() {
	local name=$1 file=$2 sedexpr=$3 want=$4 out
	rm -rf "$W/$name"; mkdir "$W/$name"; cp "$K8S"/*.yaml "$W/$name/"
	sed -i "$sedexpr" "$W/$name/$file"
	cmp -s "$K8S/$file" "$W/$name/$file" && { echo "damage $name changed nothing"; return 1; }
	out=$(check_k8s "$W/$name") && { echo "damage $name was not caught"; return 1; }
	[[ $out == *"$want"* ]] || { echo "damage $name: '$out' does not contain '$want'"; return 1; }
}
pids=()
while IFS='|' read -r name file sedexpr want; do
	damage "$name" "$file" "$sedexpr" "$want" >"$W/$name.result" 2>&1 &
	pids+=("$!:$name")
done <<'LIST'
type|wcache-daemonset.yaml|s/containerPort: 9400/containerPort: "nine"/|kubectl:
field|wcache-daemonset.yaml|0,/periodSeconds: 10/s//periodSecondz: 10/|periodSecondz: unknown field
indent|engine-pod.yaml|s/^  hostPID: true/  hostPID: true\n   x: 1/|yamllint:
hostpid|engine-pod.yaml|s/hostPID: true/hostPID: false/|engine Pod: hostPID is not true
mount|engine-pod.yaml|s,mountPath: /run/wcache,mountPath: /run/other,|engine Pod/engine: /run/wcache is not mounted
pin|wcache-daemonset.yaml|s/prometheus.io\/path: \/metrics/prometheus.io\/port: "9400"\n        prometheus.io\/path: \/metrics/|prometheus.io/port 9400 pins every target
portname|wcache-daemonset.yaml|s/name: metrics-1/name: metrics-0/|its metrics port 9401 is named 'metrics-0', not metrics-1
sameport|wcache-daemonset.yaml|s/containerPort: 9401/containerPort: 9400/;s/0.0.0.0:9401/0.0.0.0:9400/|ranks share a metrics port
option|wcache-daemonset.yaml|0,/- --tp-rank/s//- --tp-rnk/|wcd refuses
probe|wcache-daemonset.yaml|0,/- status/s//- stats/|startupProbe is not wcctl status
gpus|engine-pod.yaml|s/nvidia.com\/gpu: 2/nvidia.com\/gpu: 1/|the engine asks for 1 GPUs
nonroot|wcache-daemonset.yaml|s/runAsNonRoot: true/runAsNonRoot: false/|DaemonSet: the pod does not run as a non-root user
escalate|engine-pod.yaml|s/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/|engine Pod/engine: allowPrivilegeEscalation is not false
caps|wcache-daemonset.yaml|0,/- ALL/! {/- ALL/s//- NET_RAW/}|DaemonSet/wcd-0: capabilities are not all dropped
sockgroup|wcache-daemonset.yaml|0,/- "65532"/s//- "65533"/|DaemonSet/wcd-0: wcd without --socket-group 65532
group|engine-pod.yaml|s/^      - 65532/      - 65533/|supplementalGroups lacks wcd's group 65532
trust|engine-pod.yaml|s/value: "65532"/value: "65533"/|WCACHE_TRUST_UID is not wcd's uid 65532
init|wcache-daemonset.yaml|s/chmod 0710/chmod 0755/|no init container gives /run/wcache
LIST
for p in "${pids[@]}"; do
	wait "${p%%:*}" || fail "$(cat "$W/${p#*:}.result")"
done

# the Slurm script, end to end on this machine (host backend, one node)
mkdir "$W/bin"
cat >"$W/bin/srun" <<'SH'
#!/usr/bin/env bash
# stands in for srun: one task, node 0 of 1
while [[ ${1:-} == --* ]]; do shift; done
SLURM_NNODES=1 SLURM_NODEID=0 exec "$@"
SH
chmod +x "$W/bin/srun"
"$BIN/wcgen" tiny --out "$W/model" >/dev/null 2>&1 || fail "wcgen tiny"
job=wct$$
out=$(PATH=$W/bin:$BIN:$PATH SLURM_JOB_ID=$job MODEL=$W/model TP=2 PP=1 \
	WCCTL_ARGS="--backend host --timeout 60" bash "$WC_TOP/tools/dist/slurm/wcache.sbatch" 2>&1) ||
	fail "the Slurm script failed: $out"
expect_has "slurm start" "$out" "All 2 weight cache daemons on node 0 are ready"
expect_has "slurm engine step" "$out" "host-1               pp0/tp1    ready"
expect_has "slurm stop" "$out" "stopped wcd pid"
[ ! -e "/tmp/wcache-$job" ] || fail "the Slurm script left /tmp/wcache-$job: $(ls -A "/tmp/wcache-$job")"
echo ok
