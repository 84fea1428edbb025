"""The `purpose` fact (facts/purpose.py over data/purposes.yaml) and what
rules do with it (`severity_by_purpose`): which signal decides, that a
file's folder only speaks for pods that do no GPU work, that the fact schema
and the rule format name the same purposes, and that the engine lowers or
silences a rule's findings by purpose and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from gpuaudit.bundled import policies_dir
from gpuaudit.engine.evaluate import evaluate
from gpuaudit.engine.rules import RuleError, fact_schema, load_rule
from gpuaudit.facts import Subject
from gpuaudit.facts.purpose import purposes
from gpuaudit.facts.workload import subjects
from gpuaudit.model import Resource
from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.sources.manifests import ReadResult, read_text


def documents(manifest: str, file: str) -> list:
    result = ReadResult()
    read_text(textwrap.dedent(manifest), file, result)
    return result.documents


def purpose_of(manifest: str, file: str = "deploy/app.yaml") -> tuple[str, dict]:
    docs = documents(manifest, file)
    workloads, _ = build_workloads(docs)
    facts = next(subjects(workloads[0])).facts
    return facts["purpose"], facts["purpose_evidence"]


def pod(image: str, command: list[str] | None = None, *, name: str = "p", kind_extra: str = "") -> str:
    cmd = f"\n    command: {json.dumps(command)}" if command else ""
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}{kind_extra}}}
spec:
  containers:
  - name: c
    image: {image}{cmd}
    resources:
      limits: {{nvidia.com/gpu: 1}}
"""


@pytest.mark.parametrize(
    ("manifest", "purpose", "signal"),
    [
        (pod("oguzpastirmaci/gpu-burn:latest"), "stress-test", "image"),
        (pod("busybox", ["sh", "-c", "/app/gpu_burn 60"]), "stress-test", "program"),
        (pod("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"), "smoke-test", "image"),
        (pod("intel/opencl", ["clinfo"]), "smoke-test", "program"),
        (pod("vault.habana.ai/gaudi-docker/1.17.0/pytorch", ["hl-smi"]), "smoke-test", "program"),
        (pod("nvidia/cuda:12.4.1-base-ubuntu22.04", ["nvidia-smi"]), "smoke-test", "idle"),
        # What the node is, printed around nvidia-smi (`$(uname -n)` inside a string).
        (
            pod(
                "nvidia/cuda:12.2.0-base-ubuntu22.04",
                ["bash", "-lc", 'echo "Node: $(uname -n)"\nnvidia-smi\necho "done"'],
            ),
            "smoke-test",
            "idle",
        ),
        # ... but a string that runs the work is not idle.
        (pod("pytorch/pytorch", ["sh", "-c", 'echo "loss: $(python3 fit.py)"']), "unknown", "none"),
        (pod("x/bench", ["python3", "benchmarks/benchmark_serving.py"]), "benchmark", "program"),
        (pod("mlcommons/mlperf-inference:v4.1"), "benchmark", "image"),
        (pod("vllm/vllm-openai:v0.10.0", ["vllm", "serve", "Qwen/Qwen2.5-7B"]), "service", "server"),
        (pod("nvcr.io/nim/meta/llama3-8b-instruct:1.0.3"), "service", "image"),
        (pod("pytorch/pytorch", ["torchrun", "--nproc_per_node=1", "train.py"]), "training", "program"),
        (pod("registry.k8s.io/pause:3.9"), "placeholder", "image"),
        (pod("busybox", ["sleep", "infinity"], name="gpu-placeholder"), "placeholder", "name"),
        (pod("busybox", ["sleep", "infinity"], name="debug"), "unknown", "idle"),
        (pod("example/app:1"), "unknown", "none"),
    ],
)
def test_each_signal_decides(manifest: str, purpose: str, signal: str) -> None:
    got, evidence = purpose_of(manifest)
    assert (got, evidence["signal"]) == (purpose, signal), evidence
    assert evidence["why"]


def test_kinds_decide_last() -> None:
    job = """\
    apiVersion: batch/v1
    kind: Job
    metadata: {name: convert}
    spec:
      template:
        spec:
          containers:
          - {name: c, image: example/convert:1, resources: {limits: {nvidia.com/gpu: 1}}}
    """
    assert purpose_of(job) == ("batch", {"signal": "kind", "value": "Job (batch)", "why": "a batch kind"})
    pytorchjob = """\
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata: {name: resnet}
    spec:
      pytorchReplicaSpecs:
        Worker:
          template:
            spec:
              containers:
              - {name: pytorch, image: example/resnet:1, resources: {limits: {nvidia.com/gpu: 1}}}
    """
    assert purpose_of(pytorchjob)[:1] == ("training",)
    assert purpose_of(pytorchjob)[1]["signal"] == "kind"


def test_an_nccl_test_is_read_from_the_launcher_that_holds_no_gpu() -> None:
    mpijob = """\
    apiVersion: kubeflow.org/v2beta1
    kind: MPIJob
    metadata: {name: allreduce}
    spec:
      mpiReplicaSpecs:
        Launcher:
          template:
            spec:
              containers:
              - {name: launcher, image: nccl-tests:1, command: [mpirun, -np, "16", all_reduce_perf, -b, 1G]}
        Worker:
          template:
            spec:
              containers:
              - name: worker
                image: nccl-tests:1
                command: [sleep, infinity]
                resources: {limits: {nvidia.com/gpu: 8}}
    """
    purpose, evidence = purpose_of(mpijob)
    assert purpose == "smoke-test"
    assert evidence["value"].startswith("launcher: mpirun")


def test_a_check_is_a_smoke_test_only_when_it_is_all_the_command_runs() -> None:
    assert purpose_of(pod("rocm/pytorch", ["sh", "-c", "rocm-smi; echo done"]))[0] == "smoke-test"
    assert purpose_of(pod("rocm/pytorch", ["sh", "-c", "rocm-smi; python3 train.py"]))[0] == "training"
    short = "import torch\nprint(torch.cuda.is_available())"
    trains = short + "\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\nfor epoch in range(90): step()"
    assert purpose_of(pod("pytorch/pytorch", ["python3", "-c", short]))[0] == "smoke-test"
    assert purpose_of(pod("pytorch/pytorch", ["python3", "-c", trains]))[0] == "unknown"


def test_a_demo_folder_speaks_only_for_pods_that_do_no_gpu_work() -> None:
    sleeper = pod("ubuntu:22.04", ["bash", "-c", "sleep 86400"])
    assert purpose_of(sleeper, "repo/examples/gpu-pod.yaml") == (
        "demo",
        {
            "signal": "context",
            "value": "examples",
            "why": "its GPU containers do no GPU work, in a file written to show something",
        },
    )
    # Flattened copies keep their path with `__` for `/`.
    assert purpose_of(sleeper, "corpus/HAMi__docs__gpu-pod.yaml")[0] == "demo"
    assert purpose_of(sleeper, "deploy/gpu-pod.yaml")[0] == "unknown"
    # A demo word inside a longer folder or file name says the same; `doc` only as a whole segment.
    assert purpose_of(sleeper, "repo/tutorial-examples/job/gpu-pod.yaml")[0] == "demo"
    assert purpose_of(sleeper, "repo/k8s/gpu_demo.yaml")[0] == "demo"
    assert purpose_of(sleeper, "repo/doc-parser/gpu-pod.yaml")[0] == "unknown"
    server = pod("vllm/vllm-openai:v0.10.0", ["vllm", "serve", "google/gemma-2-2b-it"])
    assert purpose_of(server, "repo/examples/serve.yaml")[0] == "service"  # advice that goes with each copy
    # A training example named "demo" still trains.
    assert purpose_of(pod("pytorch/pytorch", ["torchrun", "train.py"], name="deepspeed-demo"))[0] == "training"


def test_live_pods_get_the_purpose_of_their_owner_by_name() -> None:
    from gpuaudit.facts.process import command_lines
    from gpuaudit.facts.workload import workload_purpose

    docs = documents(pod("busybox", ["sleep", "infinity"], name="web-7d9c-abcde"), "")
    w = build_workloads(docs)[0][0]
    lines = [command_lines(w, t) for t in w.templates]
    got = workload_purpose(w, lines, workload_class="service", name="gpu-warm-pool", file="")
    assert got["purpose"] == "placeholder"


def test_the_fact_schema_and_the_rule_format_name_the_same_purposes() -> None:
    rule_format = json.loads((policies_dir() / "rule.schema.json").read_text())
    by_purpose = rule_format["properties"]["severity_by_purpose"]
    assert by_purpose["propertyNames"]["enum"] == list(purposes())
    for target in ("workload", "pod", "container"):
        assert fact_schema()["$defs"][target]["properties"]["purpose"]["enum"] == list(purposes())


RULE = """\
id: SITE-PURPOSE
title: a GPU pod
category: allocation
severity: high
severity_by_purpose: {benchmark: low, demo: silent, service: critical}
scope: [manifest]
target: pod
violation: {properties: {gpu: {properties: {requested: {const: true}}}}}
message: "{{ name }}"
docs: Says how a rule's findings follow the workload's purpose.
"""


def _judge(rule_text: str, tmp_path: Path, purpose: str | None = None, **more: str) -> list[str]:
    """The severities ``rule_text`` gives a GPU pod with these facts."""
    path = tmp_path / "rule.yaml"
    path.write_text(rule_text)
    rule = load_rule(path)
    facts = {"gpu": {"requested": True}, "pointer": "", **({"purpose": purpose} if purpose else {}), **more}
    subject = Subject("pod", facts, Resource("v1", "Pod", "", "p"), None)
    return [f.severity for f in evaluate([rule], [subject], inputs={"manifest"}).findings]


def test_severity_by_purpose_lowers_or_silences_and_never_raises(tmp_path: Path) -> None:
    assert _judge(RULE, tmp_path, "benchmark") == ["low"]
    assert _judge(RULE, tmp_path, "demo") == []
    assert _judge(RULE, tmp_path, "service") == ["high"]  # at most: a purpose never raises it
    assert _judge(RULE, tmp_path, "training") == ["high"]
    assert _judge(RULE, tmp_path, None) == ["high"]  # a subject without the fact: the rule's own


def test_severity_by_purpose_is_refused_where_no_subject_has_a_purpose(tmp_path: Path) -> None:
    path = tmp_path / "rule.yaml"
    path.write_text(
        RULE.replace("target: pod", "target: config").replace(
            "violation: {properties: {gpu: {properties: {requested: {const: true}}}}}", "violation: {}"
        )
    )
    with pytest.raises(RuleError, match="severity_by_purpose needs a subject with a purpose"):
        load_rule(path)
    path.write_text(RULE.replace("demo: silent", "demos: silent"))
    with pytest.raises(RuleError, match="severity_by_purpose"):
        load_rule(path)


DEMO_FOLDER = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat}
spec:
  template:
    spec:
      nodeSelector: {kubernetes.io/hostname: gpu-node-03}
      containers:
      - name: server
        image: vllm/vllm-openai:v0.10.0
        args: [--model, meta-llama/Llama-3.1-70B-Instruct, --tensor-parallel-size, "2"]
        resources:
          requests: {cpu: "8", memory: 64Gi}
          limits: {nvidia.com/gpu: 2}
        volumeMounts: [{name: shm, mountPath: /dev/shm}]
      volumes: [{name: shm, emptyDir: {medium: Memory}}]
---
apiVersion: v1
kind: Pod
metadata: {name: gpu-pod}
spec:
  containers:
  - name: ubuntu
    image: ubuntu:22.04
    command: [sleep, infinity]
    resources:
      limits: {nvidia.com/gpu: 1}
"""


def test_fix_verify_judges_a_demo_folder_alike_before_and_after(tmp_path: Path, run_cli) -> None:
    """The overlay's build is read from kustomize's output, where no folder
    says `examples/`: the idle pod there is no new finding of the overlay."""
    if shutil.which("kubectl") is None and not (Path(__file__).parents[1] / ".tools" / "bin" / "kubectl").exists():
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")
    folder = tmp_path / "examples"
    folder.mkdir()
    (folder / "serve.yaml").write_text(DEMO_FOLDER)
    tools = Path(__file__).parents[1] / ".tools" / "bin"
    env = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    checked = run_cli("check", "--format", "json", str(folder / "serve.yaml"), env=env)
    assert {f["rule"] for f in json.loads(checked.stdout)["findings"]} == {"GPA-PL-001"}
    proc = run_cli("fix", str(folder / "serve.yaml"), "--out", str(tmp_path / "overlay"), "--verify", env=env)
    assert "1 targeted finding(s) gone, 0 still there, 0 new" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr


def test_the_purpose_reads_the_env_a_config_map_completes(tmp_path: Path, run_cli) -> None:
    manifest = tmp_path / "bench.yaml"
    manifest.write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: bench-cfg}
            data: {RUN: "python3 benchmarks/benchmark_serving.py --num-prompts 1000"}
            ---
            apiVersion: batch/v1
            kind: Job
            metadata: {name: nightly}
            spec:
              template:
                spec:
                  restartPolicy: Never
                  containers:
                  - name: main
                    image: example/runner:1
                    command: [sh, -c, "$(RUN)"]
                    envFrom: [{configMapRef: {name: bench-cfg}}]
                    resources:
                      limits: {nvidia.com/gpu: 1}
            """
        )
    )
    proc = run_cli("facts", str(manifest), "--target", "workload")
    (doc,) = [d for d in json.loads(proc.stdout) if d["resource"]["kind"] == "Job"]
    assert doc["facts"]["purpose"] == "benchmark", doc["facts"]["purpose_evidence"]


def test_severity_by_context_lowers_or_silences_and_simulated_workloads_are_never_judged(tmp_path: Path) -> None:
    rule = RULE.replace("severity_by_purpose: {benchmark: low, demo: silent, service: critical}", "")
    rule = rule.replace("severity: high\n", "severity: high\nseverity_by_context: {test: silent, example: low}\n")
    assert _judge(rule, tmp_path, file_context="test") == []
    assert _judge(rule, tmp_path, file_context="example") == ["low"]
    assert _judge(rule, tmp_path) == ["high"]
    assert _judge(rule, tmp_path, "simulated") == []  # whatever the rule says


def simulated(spec_extra: str, annotations: str = "") -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: sim}}
spec:
  template:
    metadata: {{annotations: {{{annotations}}}}}
    spec:
{textwrap.indent(textwrap.dedent(spec_extra), "      ")}
      containers:
      - name: c
        image: busybox
        resources: {{limits: {{nvidia.com/gpu: 8, cpu: 100m}}}}
"""


@pytest.mark.parametrize(
    ("manifest", "value"),
    [
        (simulated("tolerations: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]"), "toleration"),
        (simulated("nodeSelector: {type: kwok}"), "nodeSelector type=kwok"),
        (
            simulated(
                """\
                affinity:
                  nodeAffinity:
                    requiredDuringSchedulingIgnoredDuringExecution:
                      nodeSelectorTerms:
                      - matchExpressions: [{key: type, operator: In, values: [kwok]}]
                """
            ),
            "node affinity",
        ),
        (simulated("restartPolicy: Never", "pod-complete.stage.kwok.x-k8s.io/delay: 1m"), "annotation"),
    ],
)
def test_pods_on_simulated_nodes_are_simulated(manifest: str, value: str) -> None:
    purpose, evidence = purpose_of(manifest)
    assert purpose == "simulated" and evidence["signal"] == "placement"
    assert evidence["value"].startswith(value)


def test_a_node_affinity_term_that_also_allows_real_nodes_is_not_simulated() -> None:
    either = simulated(
        """\
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions: [{key: type, operator: In, values: [kwok]}]
              - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-H100-80GB-HBM3]}]
        """
    )
    assert purpose_of(either)[0] != "simulated"
    assert purpose_of(simulated("nodeSelector: {type: gpu}"))[0] != "simulated"


@pytest.mark.parametrize(
    ("below", "context"),
    [
        # Not inside the first folder below the root (a repository named *-samples) ...
        ("kubernetes-engine-samples/serve.yaml", None),
        ("nccl-tests/job.yaml", None),
        # ... but in a folder below that one, named for what it shows or for tests.
        ("setup.kubecon/sample-jobs/train.yaml", "example"),
        ("kubernetes-engine-samples/mnist_demo/train.yaml", "example"),
        # Course material and interview scenarios teach; test workloads and files
        # broken on purpose are fixtures.
        ("Interview/pairing-interview-scenarios/s3/job.yaml", "example"),
        ("k8s/gpu-workshop/serve.yaml", "example"),
        ("infra/test-workloads/multi-gpu-job.yaml", "test"),
        ("infra/faulty-scenarios/job.yaml", "test"),
        # By whole words only: ci-runner, latest and attestation say nothing.
        ("apps/ci-runner/job.yaml", None),
        ("apps/latest/job.yaml", None),
        ("apps/latest-model.yaml", None),
        ("attestation.yaml", None),
        # A file's own name: for tests, a tutorial or MNIST ...
        ("infra/base/intel-gpu/gpu-test-job.yaml", "test"),
        ("tests.yaml", "test"),
        ("k8s/gpu-tutorial.yaml", "example"),
        ("samples-tf-mnist-demo.yaml", "example"),
        ("pytorchjob/pytorch_job_mnist_gloo.yaml", "example"),
        # ... but not `demo` (serve-demo may be deployed as is), `example` or
        # `sample` (a service its repository shares, named cuda-tritonserver-example).
        ("k8s/serve-demo.yaml", None),
        ("timeslicing/cuda-tritonserver-example.yml", None),
        ("azure/config/sample_specs.yaml", None),
        # Code kept but no longer deployed, in any folder's name, the first too.
        ("retired_benchmarks/minigo/cluster/selfplay/player.yaml", "test"),
        ("k8s/deprecated-v1alpha1/serve.yaml", "test"),
        ("charts/archived_apps/jupyter.yaml", "test"),
        ("retired.yaml", None),
    ],
)
def test_file_context_reads_words_inside_names(below: str, context: str | None) -> None:
    from gpuaudit.facts.purpose import file_context

    assert file_context(f"/home/me/tests/repo/{below}", ["/home/me/tests/repo"]) == context


def test_file_context_is_read_below_the_folder_named_and_never_above_it() -> None:
    from gpuaudit.facts.purpose import file_context

    roots = ["/home/me/tests/repo"]
    assert file_context("/home/me/tests/repo/deploy/app.yaml", roots) is None  # tests/ above the root says nothing
    assert file_context("/home/me/tests/repo/tests/e2e/server.yaml", roots) == "test"
    assert file_context("/home/me/tests/repo/pkg/convert/testdata/in.yaml", roots) == "test"
    assert file_context("/home/me/tests/repo/examples/serve.yaml", roots) == "example"
    assert file_context("/home/me/tests/repo/docs/versioned_docs/v1/serve.yaml", roots) == "example"
    assert file_context("/home/me/tests/repo/k8s/demo.yaml", roots) == "example"
    # A hidden folder says what its name says: an archived copy kept in .archive/.
    assert file_context("/home/me/tests/repo/.archive/kube/apps/hr.yaml", roots) == "test"
    assert file_context("/home/me/tests/repo/.config/apps/hr.yaml", roots) is None
    # A tree copied flat (`__` for each folder) is one folder: its repository's name says nothing,
    # wherever it sits below the root.
    assert file_context("/home/me/tests/repo/GCP__kubernetes-engine-samples__ai-ml/job.yaml", roots) is None
    assert file_context("/home/me/tests/repo/manifests/GCP__kubernetes-engine-samples/job.yaml", roots) is None
    # What is never deployed as it stands: CI jobs, developers' scripts, deprecated copies.
    assert file_context("/home/me/tests/repo/ci/k8s/vllm/job.yaml", roots) == "test"
    assert file_context("/home/me/tests/repo/hack/kind/ollama.yaml", roots) == "test"
    assert file_context("/home/me/tests/repo/virt01/deprecated/tdarr/deployment.yaml", roots) == "test"
    # A file named on its own: the user wants it judged as it stands.
    assert file_context("examples/serve.yaml", []) is None
    assert file_context("/elsewhere/tests/serve.yaml", []) is None
    # `check .` names what it finds by their path below it.
    assert file_context("deploy/examples/app.yaml", ["."]) == "example"
    assert file_context("./tests/e2e/app.yaml", ["."]) == "test"
    assert file_context("../other/examples/app.yaml", ["."]) is None
    assert file_context("repo/examples/app.yaml", ["repo/"]) == "example"
    # The deepest root that holds the file decides.
    assert file_context("/r/examples/app/deploy.yaml", ["/r", "/r/examples/app"]) is None


def test_examples_and_fixtures_keep_only_the_advice_that_matters_there(tmp_path: Path, run_cli) -> None:
    server = """\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: chat}
        spec:
          template:
            spec:
              nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
              containers:
              - name: server
                image: vllm/vllm-openai:v0.10.0
                args: [--model=Qwen/Qwen2.5-0.5B-Instruct]
                env: [{name: NVIDIA_VISIBLE_DEVICES, value: "0"}]
                resources: {limits: {nvidia.com/gpu: 1, cpu: "8"}}
        """
    for folder in ("deploy", "examples", "tests/e2e"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "chat.yaml").write_text(textwrap.dedent(server))
    proc = run_cli("check", str(tmp_path), "--no-kustomize", "-o", "json")
    rules_by_folder: dict[str, set[str]] = {}
    for f in json.loads(proc.stdout)["findings"]:
        folder = str(Path(f["location"]["file"]).parent.relative_to(tmp_path))
        rules_by_folder.setdefault(folder, set()).add(f["rule"])
    # Sharing advice and a memory request only where the file is deployed; a
    # hand-set NVIDIA_VISIBLE_DEVICES breaks every copy of an example, so it is
    # said there too, but not of a fixture that runs nowhere.
    assert {"GPA-AL-001", "GPA-AP-003", "GPA-AL-007"} <= rules_by_folder["deploy"]
    assert rules_by_folder["examples"] == {"GPA-AL-007"} and "tests/e2e" not in rules_by_folder
    # What is held back is listed, with why, and counted apart from exemptions.
    held = json.loads(proc.stdout)["suppressed"]
    assert {(f["rule"], Path(f["location"]["file"]).parent.name) for f in held} == {
        ("GPA-AL-001", "examples"),
        ("GPA-AP-003", "examples"),
        ("GPA-AL-001", "e2e"),
        ("GPA-AP-003", "e2e"),
        ("GPA-AL-007", "e2e"),
    }
    assert all(f["reason"].startswith("not said for a file") for f in held)
    text = run_cli("check", str(tmp_path), "--no-kustomize").stdout
    assert "5 not said in example or test folders" in text and "exempted" not in text
    # A file named on its own is judged as it stands.
    alone = run_cli("check", str(tmp_path / "examples" / "chat.yaml"), "-o", "json")
    assert {"GPA-AL-001", "GPA-AP-003"} <= {f["rule"] for f in json.loads(alone.stdout)["findings"]}
