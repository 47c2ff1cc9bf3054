"""A multi-node Ray cluster on one machine, started with Ray's own `ray start` (issue 34).

    python -m cluster.local start [--workers 2] [--cpus 1] [--object-store-gb 0.5] [--dir DIR]
    python -m cluster.local status [--dir DIR]
    python -m cluster.local kill-node 1 [--dir DIR]    # SIGKILL worker node 1's raylet and its workers
    python -m cluster.local kill-head [--dir DIR]      # SIGKILL the head: its GCS, raylet and workers
    python -m cluster.local stop [--dir DIR]

A head node with no task CPUs (`--num-cpus=0`: the jobs' stage actors, which ask for CPUs, and
Serve replicas never land on it, so losing a worker node never takes the driver's cluster state
with it) and N worker nodes, each its own raylet and object store. Every process takes:
- its own Ray temp folder (RAY_TMPDIR, a short path under /tmp): the cluster never meets an
  embedded cluster of a job, and `stop` ends exactly its own processes (`ray stop` would end
  every Ray cluster of the machine);
- token authentication (RAY_AUTH_MODE=token, a fresh token in DIR/auth_token): Ray 2.60 refuses
  a node or a driver without the cluster's token;
- the loopback address: `--node-ip-address=127.0.0.1`, which Ray resolves to the machine's own
  address; a packet to one's own address takes the kernel's `lo` route (`ip route get` says
  `local ... dev lo`), so nothing leaves the machine.

Nodes are labeled `node-name=head`, `worker-1`, `worker-2`, ...: the jobs' placement lines (the
job's log names the node of each stage worker and Serve replica, `cluster.placement`) use the
names, and `python -m cluster.local kill-node 1` kills the node they call `worker-1`.
`LocalCluster.add_worker(cpus)` joins one more worker node (of its own size) to a running cluster.

DIR (default `runs/local-cluster`) gets `cluster.json` (address, nodes, pids), `auth_token` and
`env.sh`; after `source DIR/env.sh` every job joins the cluster (RAY_ADDRESS), or a job names it
with `cluster.address=ADDRESS` beside the two auth variables. The test fixture
(`tests/integration/multinode.py`) uses the same functions.

A failure (a `ray start` that fails, no cluster recorded in DIR, a node index that is not there)
ends the command with one line saying what failed and what to do, exit 1 (`LocalClusterError`;
a failed `ray start`'s whole output is kept in DIR/ray-start.log); EVALCLUSTER_DEBUG=1 adds the
traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cluster.placement import NAME_LABEL
from jobs.core.errors import SetupError, print_error

__all__ = ["LocalCluster", "LocalClusterError", "kill_pids", "load", "main", "pids_under", "ray_start_failure",
           "start"]

DEFAULT_DIR = Path("runs") / "local-cluster"
STATE = "cluster.json"
START_LOG = "ray-start.log"  # a failed `ray start`'s whole output (the cluster's temp folder is removed)


class LocalClusterError(SetupError):
    """The local cluster could not be started, reached or found; the message says what to do."""


def _ray() -> str:
    return str(Path(sys.executable).parent / "ray")


def pids_under(needle: str) -> set[int]:
    """Pids whose command line holds `needle` (every process of a node names the cluster's temp folder)."""
    out = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd:
            out.add(int(proc.name))
    return out


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(proc.name))
    return kids


def _descendants(pids: set[int]) -> set[int]:
    kids, out, todo = _children(), set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(kids.get(pid, []))
    return out


def kill_pids(pids: set[int] | list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class LocalCluster:
    """A running cluster's record (DIR/cluster.json)."""

    dir: str
    temp_dir: str
    address: str
    dashboard: str | None
    nodes: list[dict] = field(default_factory=list)  # {"name", "cpus", "pids"}; nodes[0] is the head

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to join: the temp folder, token auth and the address."""
        return {"RAY_TMPDIR": self.temp_dir, "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": str(Path(self.dir) / "auth_token"), "RAY_ADDRESS": self.address}

    def process_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def save(self) -> None:
        Path(self.dir, STATE).write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")
        lines = [f"export {k}={v}" for k, v in self.env.items()]
        Path(self.dir, "env.sh").write_text("# source me: every job joins the local multi-node cluster\n"
                                            + "\n".join(lines) + "\n", encoding="utf-8")

    def worker(self, index: int) -> dict:
        if not 1 <= index < len(self.nodes):
            raise ValueError(f"no worker node {index}: the cluster has worker nodes 1..{len(self.nodes) - 1}")
        return self.nodes[index]

    def kill_node(self, index: int) -> set[int]:
        """SIGKILL worker node `index`: its raylet, object store and every worker it started (a
        preempted machine). Returns the pids killed."""
        node = self.worker(index)
        pids = _descendants(set(node["pids"]))
        kill_pids(pids)
        node["killed"] = True
        self.save()
        return pids

    def kill_head(self) -> set[int]:
        """SIGKILL the head node: its GCS, raylet, object store and every worker it started (a
        lost head machine). The worker nodes are left running without it, as on a real cluster
        (their raylets give up on the GCS after a while); `stop` ends them. Returns the pids killed."""
        head = self.nodes[0]
        pids = _descendants(set(head["pids"]))
        kill_pids(pids)
        head["killed"] = True
        self.save()
        return pids

    def add_worker(self, cpus: float = 1, object_store_gb: float = 0.5) -> int:
        """Start one more worker node (`worker-<i>`, of `cpus` CPUs: nodes may differ) on the
        running cluster; returns its index. A test places something on the nodes there are
        first, then adds one (`tests/integration/test_node_loss_serve.py`)."""
        env = {**os.environ, **self.env}
        env.pop("RAY_ADDRESS", None)
        try:
            _start_worker(self, cpus, str(int(object_store_gb * 2**30)), env)
        finally:
            self.save()
        return len(self.nodes) - 1

    def alive_nodes(self) -> int:
        """Nodes Ray counts as alive (asks the cluster; a head that is gone raises)."""
        out = subprocess.run([_ray(), "status", f"--address={self.address}"], env=self.process_env(),
                             capture_output=True, text=True, timeout=60)
        if out.returncode:
            why = _last_line(out.stderr, out.stdout)
            raise LocalClusterError(f"ray status --address={self.address} failed ({why}): the head may be gone; "
                                    f"python -m cluster.local stop --dir {self.dir}, then start it again")
        active = out.stdout.split("Active:", 1)[1].split("Pending:", 1)[0]
        return sum(1 for line in active.splitlines() if "node_" in line)

    def stop(self) -> int:
        """End every process of this cluster (by its temp folder) and remove the folder."""
        pids = _descendants(pids_under(self.temp_dir) | {p for n in self.nodes for p in n["pids"]})
        pids.discard(os.getpid())
        kill_pids(pids)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        Path(self.dir, STATE).unlink(missing_ok=True)
        return len(pids)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_line(*outputs: str) -> str:
    """The last non-empty line of the first output that has one (where a command says why it failed)."""
    for text in outputs:
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines:
            return lines[-1][:300]
    return "no output"


def ray_start_failure(node: str, code: int | None, stdout: str, stderr: str, log: Path) -> str:
    """The one line for a `ray start` of `node` (head, worker-<i>) that failed (`code` None: it
    timed out); its whole output is in `log`."""
    how = "did not finish in 300 s" if code is None else f"exited with {code}"
    return (f"ray start of the {node} node {how} ({_last_line(stderr, stdout)}); its whole output: {log}. "
            f"Then python -m cluster.local stop --dir {log.parent} and start again: that clears a cluster of this "
            "folder still running or a port in use, and a node slow to start on a loaded machine may start then")


def _ray_start(args: list[str], env: dict[str, str], temp_dir: str, node: str, log: Path) -> set[int]:
    """`ray start ARGS` for `node`; the pids it left running (its node's processes). A failure is
    a `LocalClusterError`, its output kept in `log`."""
    before = pids_under(temp_dir)
    try:
        out = subprocess.run([_ray(), "start", *args], env=env, capture_output=True, text=True, timeout=300)
        code, stdout, stderr = out.returncode, out.stdout, out.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = None, _text(exc.stdout), _text(exc.stderr)
    except FileNotFoundError as exc:
        raise LocalClusterError(f"Ray's command {_ray()} is not there ({exc.strerror}): install the project "
                                "in this Python (make setup, or pip install -e .)") from exc
    if code != 0:
        log.write_text(f"$ ray start {' '.join(args)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n",
                       encoding="utf-8")
        raise LocalClusterError(ray_start_failure(node, code, stdout, stderr, log))
    time.sleep(0.5)
    return pids_under(temp_dir) - before


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def start(workers: int = 2, cpus: float = 1, object_store_gb: float = 0.5, directory: str | Path = DEFAULT_DIR,
          dashboard: bool = True) -> LocalCluster:
    """Start a head (no task CPUs) and `workers` worker nodes of `cpus` CPUs each."""
    if workers < 1:
        raise ValueError("workers: at least 1 worker node (the head runs no tasks)")
    directory = Path(directory).resolve()
    if (directory / STATE).is_file():
        raise LocalClusterError(f"{directory / STATE} exists: a cluster is running there (python -m cluster.local "
                                f"stop --dir {directory}), or remove the file")
    directory.mkdir(parents=True, exist_ok=True)
    token = directory / "auth_token"
    token.write_text(secrets.token_hex(32), encoding="utf-8")
    token.chmod(0o600)
    # short: Ray's socket paths under it must stay within AF_UNIX's 107 characters
    temp_dir = tempfile.mkdtemp(prefix="ecl-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": temp_dir, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env.pop("RAY_ADDRESS", None)
    store = str(int(object_store_gb * 2**30))
    dash_port = _free_port() if dashboard else None
    # Every node's dashboard agent on a port of its own: Ray's default (52365) is taken by the
    # first node of any cluster on the machine, and a node whose agent cannot bind it runs no job
    # agent (`ray job submit` then answers "No available agent to submit job").
    head_args = ["--head", "--dashboard-agent-listen-port=0", "--port=0", "--num-cpus=0",
                 "--node-ip-address=127.0.0.1", f"--object-store-memory={store}", f"--labels={NAME_LABEL}=head",
                 *([f"--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}", "--include-dashboard=true"]
                   if dashboard else ["--include-dashboard=false"])]
    cluster = LocalCluster(dir=str(directory), temp_dir=temp_dir, address="", dashboard=None)
    try:
        head = _ray_start(head_args, env, temp_dir, "head", directory / START_LOG)
        cluster.address = (Path(temp_dir) / "ray" / "ray_current_cluster").read_text().strip()
        cluster.dashboard = f"http://127.0.0.1:{dash_port}" if dashboard else None
        cluster.nodes.append({"name": "head", "cpus": 0, "pids": sorted(head)})
        for _ in range(workers):
            _start_worker(cluster, cpus, store, env)
    except Exception:
        cluster.stop()
        raise
    cluster.save()
    return cluster


def _start_worker(cluster: LocalCluster, cpus: float, store: str, env: dict[str, str]) -> dict:
    """Start worker node `worker-<i>` (i: the next index) of `cpus` CPUs and record it."""
    i = len(cluster.nodes)
    # Each worker node its own temp folder inside the cluster's, as separate machines have:
    # nodes sharing one would share `runtime_resources/`, and a worker node cleaning up a
    # job's working directory when its own workers are done would delete it under the
    # driver on the head (seen: `ray job submit` lost its cwd after the first stage: a
    # worker node set up the job's working directory again in the shared folder).
    # (RAY_TMPDIR does not do it: a worker node takes the head's temp folder unless
    # `--temp-dir` names one.)
    own = Path(cluster.temp_dir) / f"w{i}"
    own.mkdir()
    pids = _ray_start([f"--address={cluster.address}", "--dashboard-agent-listen-port=0", f"--num-cpus={cpus:g}",
                       "--node-ip-address=127.0.0.1", f"--object-store-memory={store}",
                       f"--resources={json.dumps({'worker_node': 1})}",
                       # its name in the jobs' placement lines (`cluster.placement`)
                       f"--labels={NAME_LABEL}=worker-{i}", f"--temp-dir={own}"], env, cluster.temp_dir,
                      f"worker-{i}", Path(cluster.dir) / START_LOG)
    node = {"name": f"worker-{i}", "cpus": cpus, "pids": sorted(pids)}
    cluster.nodes.append(node)
    return node


def load(directory: str | Path = DEFAULT_DIR) -> LocalCluster:
    path = Path(directory).resolve() / STATE
    if not path.is_file():
        raise LocalClusterError(f"no local cluster recorded in {path}: start one with python -m cluster.local start "
                                f"--dir {directory}, or name the folder it was started with (--dir)")
    return LocalCluster(**json.loads(path.read_text(encoding="utf-8")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.local", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a head and worker nodes")
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--cpus", type=float, default=1, help="CPUs of each worker node")
    s.add_argument("--object-store-gb", type=float, default=0.5, help="object store of each node")
    s.add_argument("--no-dashboard", action="store_true", help="no dashboard (then no `ray job submit`)")
    k = sub.add_parser("kill-node", help="SIGKILL a worker node (its raylet and workers)")
    k.add_argument("index", type=int)
    sub.add_parser("kill-head", help="SIGKILL the head node (its GCS, raylet and workers)")
    sub.add_parser("status", help="the nodes Ray counts as alive")
    sub.add_parser("stop", help="end every process of the cluster")
    for q in (s, k, *sub.choices.values()):
        if not any(a.dest == "dir" for a in q._actions):
            q.add_argument("--dir", default=str(DEFAULT_DIR), help=f"the cluster's folder (default {DEFAULT_DIR})")
    a = p.parse_args(argv)
    try:
        return _run(a)
    except (SetupError, ValueError) as exc:  # what failed and what to do, in one line: no traceback
        print_error(exc)
        return 1


def _run(a: argparse.Namespace) -> int:
    if a.cmd == "start":
        c = start(a.workers, a.cpus, a.object_store_gb, a.dir, dashboard=not a.no_dashboard)
        print(f"local cluster: head {c.address} (no task CPUs) + {a.workers} worker node(s) of {a.cpus:g} CPU(s); "
              f"Ray's temp folder {c.temp_dir}")
        print(f"join it:  source {Path(c.dir) / 'env.sh'}   (then any job joins it), or")
        print(f"          RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={Path(c.dir) / 'auth_token'} "
              f"python -m jobs.generate cluster.address={c.address} ...")
        if c.dashboard:
            print(f"submit:   ray job submit --address {c.dashboard} --working-dir . -- python -m jobs.pipeline ...")
        print(f"stop it:  python -m cluster.local stop --dir {a.dir}")
        return 0
    c = load(a.dir)
    if a.cmd == "kill-node":
        pids = c.kill_node(a.index)
        print(f"killed worker node {a.index}: {len(pids)} process(es)")
    elif a.cmd == "kill-head":
        print(f"killed the head node: {len(c.kill_head())} process(es)")
    elif a.cmd == "status":
        print(f"{c.address}: {c.alive_nodes()} node(s) alive of {len(c.nodes)} started")
    else:
        print(f"stopped: {c.stop()} process(es) ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
