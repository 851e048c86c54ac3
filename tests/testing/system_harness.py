"""The harness of the tests that run the system as real processes: a
coordinator and workers (Cluster), network namespaces as separate hosts
(Hosts), throwaway certificates (dev_certs, tls_flags), and Prometheus
/metrics read back (scrape, samples).

Used by tests/system/system_test.py, the tests under tests/chaos,
tests/elastic, tests/faults, tests/interactive and tests/scale, and the
benchmarks under bench/ that run real processes. Each sets TRAINYARD, the
`trainyard` binary, before it starts anything.
"""
import json
import os
import selectors
import shutil
import signal
import subprocess
import time

TRAINYARD = None  # the `trainyard` binary: set by the user's main
REPO = os.getcwd()  # the runfiles tree: scripts/, examples/, proto/

SPEC = """
name: "sys"
model { preset: "tiny" dropout_rate: 0.0 }
task: "digits_to_words"
feature_lengths { inputs: 16 targets: 32 }
batch_size: 8
num_workers: 2
total_steps: 20
summary_period: 10
eval_period: 10
eval { num_batches: 1 }
seed: 3
optimizer { adafactor {} }
learning_rate { factors: "constant" base_learning_rate: 0.01 }
data { pack: false }
"""


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Cluster:
    """A coordinator and workers; every process is stopped and reaped."""

    def __init__(self, root, heartbeat_timeout=10, listen="127.0.0.1:0", coordinator_extra=(), env=None):
        self.root = root
        self.procs = []
        self.coordinator_extra = ("--heartbeat-timeout", str(heartbeat_timeout), *coordinator_extra)
        self.env = dict(os.environ, **(env or {}))  # the CLI's (TLS, token)
        self.coordinator = self._start("coordinator", self._coordinator_argv(listen))
        self.coordinators = 1
        self.address = self.coordinator.listening
        self.workers = []

    def _coordinator_argv(self, listen):
        return [TRAINYARD, "coordinator", "--listen", listen, "--state-dir", os.path.join(self.root, "state"),
                "--output-root", self.root, *self.coordinator_extra]

    def _start(self, name, argv, prefix=()):
        log = open(os.path.join(self.root, f"{name}.log"), "w")
        with log:
            proc = subprocess.Popen(list(prefix) + argv, stdout=subprocess.PIPE, stderr=log, text=True)
        proc.name, proc.log = name, log.name
        self.procs.append(proc)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=60):
            raise AssertionError(f"{name} printed nothing in 60 s; log:\n{self.log(proc)}")
        line = proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise AssertionError(f"{name}: first line {line!r}; log:\n{self.log(proc)}")
        proc.listening = line[len("listening on "):]
        if "--metrics-listen" in argv:  # then `metrics on HOST:PORT`
            line = proc.stdout.readline().strip()
            if not line.startswith("metrics on "):
                raise AssertionError(f"{name}: second line {line!r}; log:\n{self.log(proc)}")
            proc.metrics = line[len("metrics on "):]
        return proc

    def restart_coordinator(self, sig=signal.SIGTERM):
        """`sig` to the coordinator (SIGTERM: it must exit 0; SIGKILL), then a
        new one with the same flags on the same address and state directory
        (workers keep their --coordinator); logs coordinator-2, -3, ..."""
        old = self.coordinator
        old.send_signal(sig)
        code = old.wait(timeout=30)
        assert sig != signal.SIGTERM or code == 0, f"the coordinator exited {code} after SIGTERM"
        self.coordinators += 1
        self.coordinator = self._start(f"coordinator-{self.coordinators}", self._coordinator_argv(self.address))
        return self.coordinator

    def add_worker(self, listen="127.0.0.1:0", prefix=(), coordinator=None, extra=()):
        proc = self._start(f"worker-{len(self.workers)}",
                           [TRAINYARD, "worker", "--coordinator", coordinator or self.address,
                            "--listen", listen, *extra], prefix)
        self.workers.append(proc)
        return proc

    def keep_logs(self):
        """Every process's log (its last 2 MiB) into Bazel's undeclared
        outputs (test.outputs/outputs.zip), so that a failed run can be read
        afterwards."""
        kept = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if not kept or not os.path.isdir(self.root):
            return
        for name in sorted(os.listdir(self.root)):
            if name.endswith(".log"):
                with open(os.path.join(self.root, name), "rb") as src:
                    src.seek(0, os.SEEK_END)
                    src.seek(max(src.tell() - (2 << 20), 0))
                    with open(os.path.join(kept, name), "wb") as dst:
                        dst.write(src.read())

    def coordinator_tail(self, lines=60):
        """The last `lines` lines of every coordinator's log (for a failure
        message)."""
        out = []
        for name in sorted(os.listdir(self.root)):
            if name.startswith("coordinator") and name.endswith(".log"):
                with open(os.path.join(self.root, name), errors="replace") as f:
                    out.append(f"--- {name}\n" + "".join(f.readlines()[-lines:]))
        return "\n".join(out)

    @staticmethod
    def log(proc):
        with open(proc.log) as f:
            return f.read()[-4000:]

    def logs(self, prefix):
        """The whole logs of every process named `prefix`... ("worker-",
        "coordinator"), in the order they started."""
        text = ""
        for proc in self.procs:
            if proc.name.startswith(prefix):
                with open(proc.log) as f:
                    text += f.read()
        return text

    def cli(self, *args, check=True, timeout=120):
        result = subprocess.run([TRAINYARD, *args[:1], "--coordinator", self.address, *args[1:]],
                                capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and result.returncode != 0:
            raise AssertionError(f"trainyard {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def submit(self, spec_path, *overrides):
        sets = [a for o in overrides for a in ("--set", o)]
        return self.cli("submit", spec_path, *sets).stdout.strip()

    def status(self, job):
        return json.loads(self.cli("status", job, "--json").stdout)

    def wait_state(self, job, states, timeout):
        def check():
            s = self.status(job)
            return s if s["state"] in states else None
        return wait_for(check, timeout, f"{job} to reach {states}")

    # Signals no test sends: a process that died of one crashed.
    CRASHES = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT, signal.SIGTRAP,
               signal.SIGPIPE)

    def crashed(self):
        """'NAME died of SIGx' for each process that died of a fault or of
        SIGPIPE (never sent by a test), each with its log's last lines."""
        out = []
        for proc in self.procs:
            code = proc.poll()
            if code is not None and code < 0 and -code in self.CRASHES:
                tail = "\n".join(self.log(proc).splitlines()[-15:])
                out.append(f"{proc.name} died of {signal.Signals(-code).name}; its log ends:\n{tail}")
        return out

    def stop(self):
        """SIGTERM to every process, each reaped; fails for one that
        ignored it for 20 s or that had crashed (crashed())."""
        crashes = self.crashed()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"{proc.name} ignored SIGTERM for 20 s")
            finally:
                proc.stdout.close()
        if crashes:
            raise AssertionError("\n".join(crashes))


def dev_certs(out, *names):
    """A throwaway CA and a certificate for `names` (and loopback)."""
    r = subprocess.run([os.path.join(REPO, "scripts", "gen-dev-certs.sh"), out, *names], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out


def tls_flags(certs):
    return ("--tls-cert", os.path.join(certs, "node.pem"), "--tls-key", os.path.join(certs, "node.key"),
            "--tls-ca", os.path.join(certs, "ca.pem"))


def run(*argv):
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


class Hosts:
    """Network namespaces as separate hosts on one bridge (10.213.N.0/24):
    the coordinator on the bridge (.1), host i at .(i+2) over a veth pair
    whose root end can be taken down to cut the host off."""

    created = 0

    def __init__(self, count):
        # Names unique per instance: a deleted namespace's links vanish
        # asynchronously.
        Hosts.created += 1
        tag = (os.getpid() * 10 + Hosts.created) % 100000
        # A /24 no interface on this machine uses (a bridge left behind by a
        # killed run would otherwise take the routes).
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        n = next(k % 250 for k in range(os.getpid(), os.getpid() + 250)
                 if f" 10.213.{k % 250}." not in used)
        self.subnet = f"10.213.{n}"
        self.bridge = f"tyb{tag}"
        self.namespaces, self.links, self.addresses = [], [], []
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for i in range(count):
            ns, veth = f"tyh{i}-{tag}", f"tyv{i}-{tag}"
            run("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.links.append(veth)
            run("ip", "link", "set", veth, "master", self.bridge)
            run("ip", "link", "set", veth, "up")
            address = f"{self.subnet}.{i + 2}"
            run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            self.addresses.append(address)

    def prefix(self, i):
        return ("ip", "netns", "exec", self.namespaces[i])

    def cut(self, i, down=True):
        run("ip", "link", "set", self.links[i], "down" if down else "up")

    def partition(self, i, j, down=True):
        """Silently drops every packet between hosts i and j (both ways),
        while both still reach the coordinator and the other hosts."""
        op = "-A" if down else "-D"
        # Tests run with a PATH without the sbin directories.
        iptables = shutil.which("iptables", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or "iptables"
        for a, b in ((i, j), (j, i)):
            run("ip", "netns", "exec", self.namespaces[a], iptables, op, "INPUT", "-s", self.addresses[b], "-j", "DROP")

    def remove(self):
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)


def scrape(address, path="/metrics"):
    """(status, body) of an HTTP GET."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text):
    """{(name, frozenset(labels)): value} parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def read_ledger(out_dir):
    """[(step, examples, digest)] of the data ledger a job wrote into
    out_dir (job/data_ledger.h), in file order."""
    with open(os.path.join(out_dir, "data_ledger.jsonl")) as f:
        return [(e["step"], e["examples"], e["digest"]) for e in map(json.loads, f)]


def assert_same_data(test, reference_dir, out_dir, steps):
    """Every step 1..steps of the run in out_dir trained on the examples the
    uninterrupted run in reference_dir trained that step on: each ledger
    line (a step trained again after a fault too) equals the reference's
    for its step, every step appears, and the reference names each step
    once. Returns how many lines repeat a step."""
    ref = read_ledger(reference_dir)
    test.assertEqual([e[0] for e in ref], list(range(1, steps + 1)), f"{reference_dir}: one line per step")
    by_step = {e[0]: e for e in ref}
    got = read_ledger(out_dir)
    for e in got:
        test.assertEqual(e, by_step.get(e[0]), f"{out_dir}: step {e[0]} trained on other examples")
    test.assertEqual(sorted({e[0] for e in got}), list(range(1, steps + 1)), f"{out_dir}: steps missing")
    return len(got) - steps


def netns_unavailable():
    if os.geteuid() != 0:
        return "not root"
    probe = f"typrobe{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None
