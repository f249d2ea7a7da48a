"""The container and cluster recipes (Dockerfile, cluster/): validated as far as this machine
allows -- parsed, cross-checked against each other and the repository (image, paths, extras),
every command line parsed by the real command's own parser -- and the compose/Kubernetes
scheduler and worker command lines run as separate processes to build a table through them.
``docker compose config`` runs where docker is available."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from qpinfer.tables import open_table
from qptables.cli.commands import parser as qptables_parser
from qptables.pipeline.dask_run import SINGLE_THREAD_ENV

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
BIN = Path(sys.executable).parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
IMAGE = f"quantile-propagation:{VERSION}"


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def compose() -> dict:
    return load_yaml(CLUSTER / "docker-compose.yml")


def manifests() -> dict[str, dict]:
    return {p.name: load_yaml(p) for p in sorted((CLUSTER / "kubernetes").glob("*.yaml"))}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def parse_dask(argv: list[str]):
    """Parse a ``dask scheduler|worker ...`` command line with distributed's own click command;
    unknown options (which these commands pass through as positional arguments) fail."""
    from distributed.cli.dask_scheduler import main as scheduler_main
    from distributed.cli.dask_worker import main as worker_main

    assert argv[0] == "dask" and argv[1] in ("scheduler", "worker"), argv
    cmd = scheduler_main if argv[1] == "scheduler" else worker_main
    ctx = cmd.make_context(f"dask {argv[1]}", list(argv[2:]))
    stray = [v for k, v in ctx.params.items() if k in ("scheduler", "preload_argv") and v]
    flat = [x for v in stray for x in (v if isinstance(v, tuple | list) else [v])]
    assert not [x for x in flat if str(x).startswith("-")], f"unknown options in {argv}"
    return ctx.params


def parse_qptables(argv: list[str]):
    assert argv[0] == "qptables", argv
    return qptables_parser().parse_args(argv[1:])


# ----------------------------------------------------------------------------- Dockerfile


def test_dockerfile_pins_the_base_runs_as_non_root_and_copies_what_exists():
    ins = dockerfile_instructions()
    args = {k: v for i, r in ins if i == "ARG" for k, _, v in [r.partition("=")]}
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", base), base
    froms = [r for i, r in ins if i == "FROM"]
    assert len(froms) == 2 and all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms)
    final = ins[max(k for k, (i, _) in enumerate(ins) if i == "FROM") :]
    users = [r for i, r in final if i == "USER"]
    assert users and users[-1] not in ("root", "0"), "the runtime stage must not run as root"
    uid = re.search(r"ARG UID=(\d+)", (ROOT / "Dockerfile").read_text()).group(1)
    assert int(uid) >= 1000

    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore  # an allow-list: everything else stays out of the build context
    for i, rest in ins:
        if i == "COPY" and "--from" not in rest:
            *sources, _dest = shlex.split(rest)
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
                assert f"!{src.rstrip('/')}" in [x.rstrip("/") for x in ignore], (
                    f"{src} is excluded from the build context by .dockerignore"
                )
    runs = " ".join(r for i, r in ins if i == "RUN")
    extras = re.findall(r'pip install "\.\[(\w+)\]"', runs)
    assert extras and all(e in PYPROJECT["project"]["optional-dependencies"] for e in extras)
    cmd = [r for i, r in ins if i == "CMD"][-1]
    assert (
        shlex.split(cmd.strip("[]").replace(",", " "))[0].strip('"')
        in PYPROJECT["project"]["scripts"]
    )


# ----------------------------------------------------------------------------- compose


def test_compose_file_wires_scheduler_workers_and_build_consistently():
    c = compose()
    services = c["services"]
    assert set(services) == {"scheduler", "worker", "build"}
    for name, svc in services.items():
        assert svc["image"] == f"${{QP_IMAGE:-{IMAGE}}}", name
        context = (CLUSTER / svc["build"]["context"]).resolve()
        assert context == ROOT and (context / svc["build"]["dockerfile"]).is_file()

    sched = parse_dask(services["scheduler"]["command"])
    worker = parse_dask(services["worker"]["command"])
    build = parse_qptables(services["build"]["command"])
    assert worker["nthreads"] == 1 and worker["scheduler"] == f"tcp://scheduler:{sched['port']}"
    assert build.command == "build" and build.scheduler == worker["scheduler"]
    # the build and the workers share the volume the store is written to
    mounts = {
        s: dict(v.split(":")[::-1] for v in services[s]["volumes"]) for s in ("worker", "build")
    }
    assert mounts["worker"] == mounts["build"]
    ((mount, volume),) = mounts["build"].items()
    assert volume in c["volumes"] and build.out.startswith(mount + "/")
    assert services["build"]["hostname"]  # a re-run takes over the dead run's lock
    assert "service_healthy" in str(services["worker"]["depends_on"])


def test_docker_compose_config_accepts_the_file():
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run(
            [docker, "compose", "version"], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("docker compose is not installed here (the file is parsed by the other tests)")
    p = subprocess.run(
        [docker, "compose", "-f", str(CLUSTER / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr


# ----------------------------------------------------------------------------- Kubernetes


def test_kubernetes_manifests_are_consistent():
    m = manifests()
    assert set(m) == {"build-job.yaml", "daskcluster.yaml", "tables-pvc.yaml"}
    pvc, dc, job = m["tables-pvc.yaml"], m["daskcluster.yaml"], m["build-job.yaml"]
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["spec"]["accessModes"] == [
        "ReadWriteMany"
    ]
    assert dc["apiVersion"] == "kubernetes.dask.org/v1" and dc["kind"] == "DaskCluster"
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    name = dc["metadata"]["name"]

    sched_pod = dc["spec"]["scheduler"]["spec"]
    worker_pod = dc["spec"]["worker"]["spec"]
    job_pod = job["spec"]["template"]["spec"]
    for pod in (sched_pod, worker_pod, job_pod):
        assert all(c["image"] == IMAGE for c in pod["containers"])
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's UID
    sched = parse_dask(sched_pod["containers"][0]["args"])
    worker = parse_dask(worker_pod["containers"][0]["args"])
    assert worker["nthreads"] == 1 and worker["scheduler"] is None  # DASK_SCHEDULER_ADDRESS
    service = dc["spec"]["scheduler"]["service"]
    assert service["selector"]["dask.org/cluster-name"] == name
    port = {p["name"]: p["port"] for p in service["ports"]}["tcp-comm"]
    assert port == int(sched["port"])

    build = parse_qptables(job_pod["containers"][0]["command"])
    assert build.command == "build" and build.scheduler == f"tcp://{name}-scheduler:{port}"
    claim = pvc["metadata"]["name"]
    for pod, container in (
        (worker_pod, worker_pod["containers"][0]),
        (job_pod, job_pod["containers"][0]),
    ):
        vols = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
        mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
        assert {mounts[k]: vols[k] for k in mounts} == {"/tables": claim}
    assert build.out.startswith("/tables/")
    assert job_pod["hostname"] and job_pod["restartPolicy"] == "Never"
    assert job["spec"]["parallelism"] == 1


# ----------------------------------------------------------------------------- HPC


@pytest.mark.parametrize("system", ["slurm", "pbs"])
def test_jobqueue_launcher_prints_single_threaded_workers_and_the_build_command(system):
    pytest.importorskip("dask_jobqueue")
    script = CLUSTER / "hpc" / "qptables_jobqueue.py"
    p = subprocess.run(
        [
            sys.executable,
            str(script),
            "--system",
            system,
            "--jobs",
            "2",
            "--cores",
            "4",
            "--memory",
            "8GB",
            "--queue",
            "q1",
            "--account",
            "acct",
            "--print-job-script",
            "--",
            "probit",
            "/shared/t/probit.zarr",
            "--grid",
            "paper",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert ("#SBATCH" if system == "slurm" else "#PBS") in out
    assert "--nthreads 1" in out and "--nworkers 4" in out and "OMP_NUM_THREADS=1" in out
    cmd = shlex.split(out.split("# build command:")[1].strip())
    assert cmd[:4] == [sys.executable, "-m", "qptables.cli.commands", "build"]
    args = qptables_parser().parse_args(cmd[3:])
    assert args.out == "/shared/t/probit.zarr" and args.scheduler.startswith("tcp://")


# ----------------------------------------------------------------------------- a real run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _localize(argv: list[str], replace: dict[str, str]) -> list[str]:
    """The recipe's command line with host names, ports and paths replaced token by token (and
    ``dask``/``qptables`` resolved to this environment's console scripts)."""
    out = []
    for tok in argv:
        for old, new in replace.items():
            tok = tok.replace(old, new)
        out.append(tok)
    if out[0] in ("dask", "qptables"):
        out[0] = str(BIN / out[0])
    return out


def test_a_build_runs_through_scheduler_and_workers_started_like_cluster_recipes(tmp_path):
    """The compose scheduler and worker command lines (and the Kubernetes worker's) start
    separate processes; the compose build command, pointed at a smaller grid, builds through
    them and publishes a table the reader accepts."""
    services = compose()["services"]
    k8s_worker = manifests()["daskcluster.yaml"]["spec"]["worker"]["spec"]["containers"][0]
    port = str(_free_port())
    address = f"tcp://127.0.0.1:{port}"
    replace = {
        "tcp://scheduler:8786": address,
        "0.0.0.0": "127.0.0.1",
        "8786": port,
        ":8787": ":0",
        "/tables": str(tmp_path),
        "$(DASK_WORKER_NAME)": "k8s-worker",
    }
    env = {**os.environ, **SINGLE_THREAD_ENV}
    logs = tmp_path / "logs"
    logs.mkdir()
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str], extra_env: dict | None = None) -> None:
        with open(logs / f"{name}.log", "w") as log:
            procs.append(
                subprocess.Popen(
                    argv,
                    env={**env, **(extra_env or {})},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=tmp_path,
                )
            )

    try:
        start("scheduler", _localize(services["scheduler"]["command"], replace))
        start("worker-compose", _localize(services["worker"]["command"], replace))
        start(
            "worker-k8s",
            _localize(k8s_worker["args"], replace),
            {"DASK_SCHEDULER_ADDRESS": address},
        )
        from distributed import Client

        with Client(address, timeout="60s") as client:  # both workers up: a stable count below
            client.wait_for_workers(2, timeout=120)
        build = _localize(services["build"]["command"], replace) + [
            "--mu",
            "-2",
            "2",
            "0.1",
            "--log10-sigma",
            "-1",
            "1",
            "0.1",  # smaller: last wins
            "--samples",
            "2",
            "--verify-dps",
            "20",
        ]
        p = subprocess.run(
            build, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
        )
        assert p.returncode == 0, p.stderr + "".join(f.read_text() for f in sorted(logs.iterdir()))
        assert "workers: 2" in p.stderr, p.stderr  # both workers joined
        out = Path(parse_qptables(["qptables", *build[1:]]).out)
        table = open_table(out, verify_checksums=True)
        assert table.shape == (2, 41, 21) and table.tile_mu == 41
        assert not out.with_name(out.name + ".partial").exists()
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
