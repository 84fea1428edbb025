"""The fact documents as types: one ``msgspec.Struct`` per target (workload,
pod, container, config, node, claim, cluster) and per shape several targets
share (GPU requests, model, parallelism, spread, telemetry, purpose evidence),
each fact documented on its field.

The facts modules build plain dicts (rules judge those, and ``gpuaudit
check`` never imports this module); these types say what the dicts hold:

- ``gpuaudit/facts/facts.schema.json``, the schema rules are validated
  against, is generated from them (``scripts/gen_fact_schema.py``; a test
  fails when the committed file is stale), so a fact is declared once, here.
- ``tests/test_fact_types.py`` converts every fact document of the corpus and
  of the recorded clusters to its type, strictly: a fact computed but not
  declared here, or of another type, fails it.
- Readers outside facts/ and engine/ read a document through its type
  (``Subject.typed``, ``as_type``): an attribute a type checker follows,
  where a renamed fact is an error, not a ``None`` on some input.

A field without a default is in every document of its target; one with a
default is in some (a live pod's ``phase`` is not in a manifest's pod). A fact
only some documents hold but never null is marked ``ABSENT``: read as None
where a document lacks it, while the schema keeps its type without null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias, TypeVar

import msgspec
from msgspec import Meta

# JSON's number: a fact computed as an int stays one (an attribute read for a
# message prints as the dict's value did).
Number: TypeAlias = int | float
# Fields that hold a fact only some documents of a target have (see the module docstring).
ABSENT = Meta(extra_json_schema={"x-absent": True})
TextMap: TypeAlias = Annotated[
    dict[str, str],
    Meta(title="text_map", description="Labels or annotations: name -> value, as text."),
]
Purpose: TypeAlias = Literal[
    "service",
    "training",
    "batch",
    "benchmark",
    "smoke-test",
    "stress-test",
    "placeholder",
    "demo",
    "simulated",
    "unknown",
]
CommandKind: TypeAlias = Literal["idle", "idle_forever", "server", "gpu_test", "download"]
PendingCause: TypeAlias = Literal["allocation", "placement", "resources", "quota", "dra", "gated", "unknown"]


class _Facts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """A fact document or a part of one (read-only)."""

    # Whether the schema lists every field as required (only where it did before types).
    __schema_required__: ClassVar[bool] = False


class Lifecycle(_Facts, kw_only=True, frozen=True):
    deadline: Annotated[bool, Meta(description="activeDeadlineSeconds or the kind's equivalent.")]
    cleanup: Annotated[
        bool,
        Meta(
            description=(
                "ttlSecondsAfterFinished, cleanPodPolicy Running/All, shutdownAfterJobFinishes, ttlStrategy/podGC."
            )
        ),
    ]
    fields: Annotated[
        list[str],
        Meta(description="The fields this kind supports, with the values that bound the run where only some do."),
    ]
    pointer: str
    nodes_bounded: Annotated[
        str | None,
        Meta(
            description=(
                "What removes the nodes every GPU pod of the workload runs on after a bounded time (GKE queued "
                "provisioning or flex-start: maxRunDurationSeconds), or null."
            )
        ),
    ] = None
    work_queue: Annotated[
        bool | None,
        Meta(
            description=(
                "(Job, CronJob) The pods are independent work items: more completions than pods at once, or "
                "several pods at once with no completion count. A hung pod holds its own GPUs only, and a "
                "deadline for the whole Job would end the queue."
            )
        ),
        ABSENT,
    ] = None


class Scaling(_Facts, kw_only=True, frozen=True):
    min_replicas: int | None
    scale_to_zero: bool
    autoscaler: Annotated[
        str | None, Meta(description="HPA/ScaledObject in the input aimed at it, or the Ray autoscaler.")
    ]
    pointer: str


class Rollout(_Facts, kw_only=True, frozen=True):
    surge: Annotated[
        int | None,
        Meta(
            description=(
                "New pods a rolling update starts before old ones go (maxSurge; 25% of the replicas rounded up by "
                "default; 0 for Recreate); null when unread."
            )
        ),
    ]
    single_node_claims: Annotated[
        list[str],
        Meta(
            description=(
                "PersistentVolumeClaims its GPU pods mount that the input declares ReadWriteOnce(Pod): a new pod "
                "must start on the old one's node."
            )
        ),
    ]
    pointer: str


class WorkloadGpu(_Facts, kw_only=True, frozen=True):
    requested: bool
    whole: bool
    total: Annotated[Number | None, Meta(description="GPUs over all pod templates times their replicas.")]
    replicated: Annotated[
        bool,
        Meta(
            description=(
                "Every GPU pod asks for a GPU a time-slicing config of the input replicates: its requests are "
                "turns on shared GPUs, not whole ones."
            )
        ),
    ] = False


class _OfWorkload(_Facts, kw_only=True, frozen=True):
    """What every document of a workload repeats (the workload, each pod
    template, each container), so a rule never has to look it up."""

    purpose: Annotated[
        Purpose,
        Meta(
            description=(
                "What the workload is for, read from its manifest (gpuaudit/data/purposes.yaml): service, training, "
                "batch, benchmark, smoke-test (a check that the GPUs are there: nvidia-smi, a CUDA sample, NCCL/RCCL "
                "tests, clinfo, hl-smi), stress-test (gpu-burn, a DCGM diagnostic), placeholder (holds GPUs on "
                "purpose: the pause image, a name that says so), demo (does no GPU work, in a file or under a name "
                "written to show something), simulated (its GPU pods go to KWOK's simulated nodes: no rule judges it), "
                "or unknown. The same for the workload, each of its pod templates and "
                "containers. Rules say per purpose how much their advice matters (severity_by_purpose)."
            )
        ),
    ]
    purpose_evidence: PurposeEvidence
    file_context: Annotated[
        Literal["test", "example"] | None,
        Meta(
            description=(
                "(manifest) Where the manifest's file sits, read from its path below the folder named on the command "
                "line: test (test fixtures, golden files: tests/, testdata/, e2e/), example (written to show "
                "something: examples/, samples/, docs/, tutorials), or null (a file to deploy, a file named on its "
                "own, stdin, a live object). Rules say per context how much their advice matters "
                "(severity_by_context)."
            )
        ),
    ] = None
    api_version: str = msgspec.field(name="apiVersion")
    kind: str
    name: str
    namespace: str
    class_: str = msgspec.field(name="class")


class WorkloadFacts(_OfWorkload, kw_only=True, frozen=True):
    lifecycle: Annotated[
        Lifecycle | None,
        Meta(
            description=(
                "(batch kinds in gpuaudit/data/lifecycle.yaml) whether the fields that bound the run are set; null "
                "for kinds not listed."
            )
        ),
    ]
    metadata: ObjectMetadata
    scaling: Annotated[
        Scaling | None,
        Meta(
            description=(
                "(long-running kinds) the fewest replicas it can run; null for kinds whose replicas are not read."
            )
        ),
    ]
    rollout: Annotated[Rollout | None, Meta(description="(Deployments) how a rolling update replaces its pods.")]
    long_running: bool
    pointer: str
    gpu: WorkloadGpu
    pod_roles: list[str]
    gpu_idle: Annotated[
        bool,
        Meta(
            description=(
                "Every pod template that requests GPUs only runs commands that use none (sleep, nvidia-smi, echo, the "
                "pause image)."
            )
        ),
    ]


class SharingPool(_Facts, kw_only=True, frozen=True):
    label: str
    value: str


class BroaderClass(_Facts, kw_only=True, frozen=True):
    name: str
    selector: str
    products: list[str]
    left_out: list[str]


class GpuProduct(_Facts, kw_only=True, frozen=True):
    never_published: Annotated[
        list[str],
        Meta(
            description=(
                "Values of nvidia.com/gpu.product that GPU Feature Discovery never publishes (it publishes the NVML "
                "name with spaces turned into '-': NVIDIA-H100-80GB-HBM3, Tesla-T4): lower case, spaces, characters "
                "NVML names do not have; or a name of a GPU family listed in gpuaudit/data/gfd_products.yaml that is "
                "none of its NVML names (NVIDIA-H100-SXM4-80GB), once GFD's -MIG-<profile> and -SHARED suffixes are "
                "taken off."
            )
        ),
    ]
    broader_class: Annotated[
        BroaderClass | None, Meta(description="A site.gpu_classes entry that contains the pinned product and more.")
    ]
    label: str
    values: list[str]
    by: Literal["nodeSelector", "affinity"]
    model: Annotated[str | None, Meta(description="Catalogue model, e.g. H100-80GB.")]
    memory_gib: Number | None
    mig_capable: Annotated[
        bool | None,
        Meta(description="Every product it allows offers MIG (gpuaudit/data/gpus.yaml); null when one is unknown."),
    ] = None
    pointer: str


class Placement(_Facts, kw_only=True, frozen=True):
    eligible_gpu_nodes: Annotated[
        int | None,
        Meta(description=("(cluster) GPU nodes whose labels, taints and GPU capacity admit this pod.")),
        ABSENT,
    ] = None
    gpu_nodes: Annotated[int | None, Meta(description="(cluster) GPU nodes in the cluster."), ABSENT] = None
    untolerated_taints: Annotated[
        list[str] | None,
        Meta(
            description=(
                "(cluster) Taints (key=value:effect) the pod does not tolerate on GPU nodes its selectors, affinity "
                "and GPU count admit: what keeps it off them, whether it is Pending or not."
            )
        ),
        ABSENT,
    ] = None
    sharing_pool: Annotated[
        SharingPool | None,
        Meta(
            description=(
                "The node label by which the pod asks for a pool whose GPUs are shared or MIG-partitioned "
                "(nvidia.com/gpu.sharing-strategy, GKE's sharing selectors and MIG partition size, "
                "nvidia.com/mig.config, a -SHARED or -MIG- product, a node-pool name saying shared, time-slicing, MPS "
                "or MIG); null when none."
            )
        ),
    ]
    gpu_product: Annotated[
        GpuProduct | None, Meta(description="A GPU model the pod is restricted to by a product/accelerator label.")
    ]
    untolerated_gpu_taints: Annotated[
        list[str] | None,
        Meta(
            description=(
                "site.gpu_taints the pod does not tolerate (key=value:effect); null when the site declares none. On "
                "platform gke, taints keyed by a requested resource are tolerated automatically."
            )
        ),
    ]
    spread: Spread | None
    pinned_node: Annotated[
        str | None,
        Meta(description=("The one node the pod can run on (nodeName, hostname selector or required affinity).")),
    ]
    pinned_by: Literal["nodeName", "nodeSelector", "affinity"] | None
    pinned_pointer: str | None
    node_data: Annotated[
        str | None,
        Meta(
            description=(
                "A directory of the node's own disk the pod mounts by hostPath (a model cache, a dataset; not a "
                "system path such as /dev, /var/log or /run: gpuaudit/data/host_devices.yaml): its data is on that "
                "node."
            )
        ),
    ] = None
    node_hardware: Annotated[
        str | None,
        Meta(
            description=(
                "A host device the pod mounts by hostPath that is plugged into one machine (a USB bus, a serial "
                "port, a Coral TPU, a camera: gpuaudit/data/host_devices.yaml): the pod goes where it is."
            )
        ),
    ]
    node_selector: dict[str, str]
    required_terms: Annotated[int, Meta(description="Required node-affinity terms.")]
    tolerations: list[dict[str, Any]]


class PodStatus(_Facts, kw_only=True, frozen=True):
    waiting_reasons: list[str]
    stuck_reason: Annotated[str | None, Meta(description="CrashLoopBackOff, ImagePullBackOff, CreateContainerError...")]
    restarts: int
    ready: bool
    not_ready_hours: Number | None
    age_hours: Number | None


class Pending(_Facts, kw_only=True, frozen=True):
    pending: Annotated[bool, Meta(description="Not bound to a node yet.")]
    cause: PendingCause | None
    message: Annotated[str | None, Meta(description="The latest FailedScheduling message.")]
    scheduler_cause: Annotated[
        PendingCause | None,
        Meta(
            description=(
                "The cause the latest FailedScheduling message names, before it is set against the pod's eligibility."
            )
        ),
    ]
    disagreement: Annotated[
        str | None,
        Meta(
            description=(
                "Where the scheduler's message and the eligible GPU node count disagree; null when they agree."
            )
        ),
    ]
    summary: Annotated[
        str | None,
        Meta(
            description=(
                "The scheduler's message (or that there was none), with the disagreement when there is one: what "
                "messages quote."
            )
        ),
    ]
    reasons: list[dict[str, Any]]
    untolerated_taints: list[str]
    gates: list[str]


class ModelScale(_Facts, kw_only=True, frozen=True):
    __schema_required__: ClassVar[bool] = True

    scale: Literal["small", "large", "unknown"]
    basis: Annotated[
        str,
        Meta(description=("Why: the model and its estimated need, the predictive server, or 'model unknown: ...'.")),
    ]


class PodMetadata(_Facts, kw_only=True, frozen=True):
    labels: TextMap
    annotations: TextMap
    object: ObjectMetadata


class SharedMemory(_Facts, kw_only=True, frozen=True):
    memory_backed: Annotated[
        bool | None,
        Meta(
            description=(
                "/dev/shm is memory-backed: a medium: Memory emptyDir, the node's /dev/shm by hostPath, hostIPC, or "
                "KubeRay's own mount in Ray pods; null when the controller's base (a KServe serving runtime) decides."
            )
        ),
    ]
    size_limit: str | None
    users: Annotated[
        str,
        Meta(
            description=(
                "What in the pod is known to pass data through /dev/shm, in words: one process per GPU on N GPUs "
                "(NCCL), N DataLoader worker process(es), a Ray node; empty when nothing known does."
            )
        ),
    ]
    ray_node: Annotated[
        bool, Meta(description=("A container runs `ray start` (the Ray object store lives in /dev/shm)."))
    ]


class PodFacts(_OfWorkload, kw_only=True, frozen=True):
    """One pod template of a workload (a Deployment's template, a PyTorchJob's Worker, a Ray worker group)."""

    gpu_command_kind: Annotated[
        CommandKind | None,
        Meta(
            description=(
                "What the GPU-holding containers run together: idle or idle_forever only when every one is; server "
                "when any one is; null otherwise. idle (sleep, nvidia-smi, echo: nothing that uses a GPU), "
                "idle_forever (sleep infinity, tail -f /dev/null, the pause image), server (a model server, which "
                "runs until stopped), gpu_test (a GPU test program that loads no model: a CUDA sample in an endless "
                "loop, a stress test such as gpu-burn; real GPU work, not idle), download (it only fetches weights or "
                "data: hf download, aws s3 cp, a python -c calling snapshot_download; "
                "gpuaudit/data/gpu_programs.yaml), or null when it may well compute."
            )
        ),
    ]
    gpu_command_text: Annotated[
        str | None, Meta(description=("The idle command as written (shortened to 60 characters), for messages."))
    ]
    engine_reserves: Annotated[
        Number | None,
        Meta(
            description=(
                "The share of its GPU's memory an LLM serving engine in a GPU container reserves at start for its KV "
                "cache, as stated (--gpu-memory-utilization, --mem-fraction-static, --cuda-memory-fraction, "
                "NIM_GPU_MEMORY_UTILIZATION) or by the engine's default (vLLM 0.9, SGLang 0.8, TGI 1.0, NIM 0.9; "
                "gpuaudit/facts/reservations.py); null when no such engine runs. Above half, a time-sliced or MPS "
                "GPU (memory not isolated) leaves a second tenant out of memory: only a MIG slice can hold it."
            )
        ),
    ]
    kv_transfer: Annotated[
        bool,
        Meta(
            description=(
                "A GPU container serves one role of a model server split into prefill and decode (SGLang "
                "--disaggregation-mode, vLLM --kv-transfer-config, Dynamo --is-prefill-worker; "
                "gpuaudit/data/gpu_programs.yaml kv_transfer): the KV cache moves GPU to GPU between the roles, each "
                "owning its GPUs by design."
            )
        ),
    ]
    saturates_gpus: Annotated[
        bool,
        Meta(
            description=(
                "A GPU container runs a stress or burn-in test (gpu-burn, dcgmproftester; "
                "gpuaudit/data/gpu_programs.yaml, by image or command): it exists to load whole GPUs, so sharing them "
                "is never the advice."
            )
        ),
    ]
    placement: Placement
    telemetry: Telemetry | None = None
    pod: Annotated[str | None, Meta(description="(cluster) the pod's name; kind/name are its top owner."), ABSENT] = (
        None
    )
    node: Annotated[str | None, Meta(description="(cluster) node the pod is bound to.")] = None
    phase: Annotated[str | None, ABSENT] = None
    exec_box: Annotated[
        bool,
        Meta(
            description=(
                "One pod (a bare Pod, or one replica of a long-running kind) whose GPU containers only sleep without "
                "end and that no probe asks for a server: a box people `kubectl exec` into to do their GPU work."
            )
        ),
    ]
    holds_gpus: Annotated[
        bool | None,
        Meta(description=("(cluster) bound to a node and not Succeeded/Failed: its GPUs are taken.")),
        ABSENT,
    ] = None
    gpus_held: Annotated[Number | None, ABSENT] = None
    status: Annotated[PodStatus | None, ABSENT] = None
    pending: Annotated[Pending | None, ABSENT] = None
    parallelism: Parallelism | None
    model: ModelFit | None
    dataloader_workers: Annotated[
        int | None,
        Meta(description=("--num_workers / --dataloader_num_workers / DATALOADER_NUM_WORKERS of a container.")),
    ]
    model_scale: Annotated[
        ModelScale,
        Meta(
            description=(
                "Whether the model the pod's GPU containers serve is known to leave room on its GPU: small (its "
                "estimated need fits half a GPU, or a predictive model: a KServe predictive model format, TF Serving, "
                "TorchServe or Triton with nothing that says LLM; gpuaudit/data/models.yaml predictive_servers), "
                "large (it needs more), unknown (no model named where gpuaudit reads it, or a name without a size it "
                "knows). Advice to share a GPU is given only for small."
            )
        ),
    ]
    engine_memory_fraction: Annotated[
        Number | None,
        Meta(
            description=(
                "The share of GPU memory the pod's serving engine is told to take (--gpu-memory-utilization, "
                "--mem-fraction-static, --mem-frac, --cuda-memory-fraction; gpuaudit/data/models.yaml "
                "engine_memory_fraction), the largest among its GPU containers; null when none is stated. At or below "
                "fits_share_at_most (0.5) the engine says the GPU is mostly unused: model_scale is then small."
            )
        ),
    ]
    spec: Annotated[
        dict[str, Any],
        Meta(
            description=(
                "The pod spec as written in the manifest (in a cluster: as the API server returned it), unchanged: a "
                "site rule can check any field, e.g. spec.priorityClassName. Empty for kinds that give only a "
                "container's resources (a KServe predictor without its own pod spec)."
            )
        ),
    ]
    metadata: Annotated[
        PodMetadata,
        Meta(description=("The pod template's labels and annotations, and those of the object it belongs to.")),
    ]
    shm: SharedMemory
    long_running: Annotated[
        bool,
        Meta(
            description=(
                "The pod runs until stopped: its kind is a service or daemon, or it is a bare Pod whose GPU "
                "containers serve or sleep without end."
            )
        ),
    ]
    role: str
    replicas: int | None
    restart_policy: Annotated[
        str | None,
        Meta(description=("The pod template's restartPolicy as written (Always, OnFailure, Never); null when unset.")),
    ]
    restart_policy_pointer: Annotated[
        str | None, Meta(description="Where restartPolicy is written (or the pod spec when it is not).")
    ]
    pointer: Annotated[str, Meta(description="The PodSpec.")]
    containers: int
    gpu: GpuRequests
    unrequested_gpu_runtime: Annotated[
        str | None,
        Meta(
            description=(
                "The runtimeClassName when it names NVIDIA's container runtime (nvidia, nvidia-cdi, nvidia-legacy) "
                "while no container asks for a GPU or sets NVIDIA_VISIBLE_DEVICES: the runtime exposes what the "
                "image's NVIDIA_VISIBLE_DEVICES names (every GPU of the node in a CUDA image); null otherwise."
            )
        ),
    ] = None
    runtime_class_pointer: Annotated[
        str | None, Meta(description="Where runtimeClassName is written (or the pod spec).")
    ] = None
    driven_by: Annotated[
        str | None,
        Meta(
            description=(
                "The role of a sibling pod shape that starts processes in this one's pods (an MPIJob's launcher, a "
                "LeaderWorkerSet's leader: mpirun over ssh or kubectl exec) and runs more than sleep; null elsewhere."
            )
        ),
    ] = None
    other_gpu_roles: Annotated[
        list[str] | None,
        Meta(
            description=(
                "(manifest) Roles of the workload's other pod shapes that request GPUs (a Ray head's worker groups, a "
                "job's workers); a group scaled to zero replicas runs none and is left out."
            )
        ),
        ABSENT,
    ] = None
    sharing_config_unread: Annotated[
        bool | None,
        Meta(
            description=(
                "(manifests) A unit of the folder named whose path names the GPU operator or its sharing config "
                "(gpu-operator/, time-sliced-2/) did not read or render: a sharing config there is unseen, so 'no "
                "sharing' is unknown."
            )
        ),
        ABSENT,
    ] = None
    ray_num_gpus: Annotated[
        Number | None,
        Meta(
            description=(
                "(Ray kinds) The GPUs this group's pods offer Ray: `num-gpus` of its rayStartParams; null when unset "
                "(Ray then offers every GPU the pod holds)."
            )
        ),
    ] = None


class ContainerFacts(_OfWorkload, kw_only=True, frozen=True):
    command_kind: Annotated[
        CommandKind | None,
        Meta(
            description=(
                "What the command runs: idle (sleep, nvidia-smi, echo: nothing that uses a GPU), idle_forever (sleep "
                "infinity, tail -f /dev/null, the pause image), server (a model server, which runs until stopped), "
                "gpu_test (a GPU test program that loads no model: a CUDA sample in an endless loop, a stress test "
                "such as gpu-burn; real GPU work, not idle), download (it only fetches weights or data: hf download, "
                "aws s3 cp, a python -c calling snapshot_download; gpuaudit/data/gpu_programs.yaml), or null when it "
                "may well compute."
            )
        ),
    ]
    command_text: Annotated[
        str | None, Meta(description=("The idle command as written (shortened to 60 characters), for messages."))
    ]
    parallelism: Parallelism | None
    visible_devices_pointer: Annotated[str | None, Meta(description="The env entry setting NVIDIA_VISIBLE_DEVICES.")]
    long_running: bool
    role: str
    container: str
    init: bool
    pointer: str
    resources_pointer: str
    cpu_request_pointer: Annotated[
        str,
        Meta(
            description=(
                "Where the CPU request is set (requests.cpu, else the limits.cpu Kubernetes copies to it), else "
                "resources_pointer: a kustomize patch that sets it is found there, not at the base's resources."
            )
        ),
    ] = ""
    cpu_limit_pointer: Annotated[str, Meta(description="Where limits.cpu is set, else resources_pointer.")] = ""
    image: str
    args: Annotated[list[str], Meta(description="command followed by args.")]
    env: Annotated[list[str], Meta(description="Names of environment variables set.")]
    visible_devices: Annotated[str | None, Meta(description="NVIDIA_VISIBLE_DEVICES as set by hand.")]
    gpu_exporter: Annotated[
        bool,
        Meta(
            description=(
                "The image is a GPU metrics exporter (dcgm-exporter, nvidia_gpu_exporter: gpuaudit/data/"
                "gpu_programs.yaml exporters), which reads every GPU of its node and needs none allocated."
            )
        ),
    ]
    video_transcoder: Annotated[
        bool,
        Meta(
            description=(
                "The image is a media server or transcoder (Jellyfin, Plex, Tdarr: gpuaudit/data/gpu_programs.yaml "
                "media_servers): its GPU decodes and encodes video on its own engines, fed by no compute pipeline."
            )
        ),
    ]
    owns_gpu_node: Annotated[
        bool,
        Meta(
            description=(
                "Its pod is pinned to cloud instance types (node.kubernetes.io/instance-type) and holds every GPU a "
                "node of those types carries (gpuaudit/data/instance_gpus.yaml; p5.4xlarge has 1, g6e.12xlarge 4), "
                "none of them shared: the node's only GPU tenant."
            )
        ),
    ]
    privileged: Annotated[
        bool,
        Meta(
            description=(
                "securityContext.privileged is true: the container gets every device node of its host, so it sees "
                "and can use every GPU of its node, not only those the device plugin allocated to it."
            )
        ),
    ]
    privileged_pointer: Annotated[str | None, Meta(description="The securityContext.privileged field, when true.")]
    gpu: GpuRequests
    merged_over: Annotated[
        str | None,
        Meta(
            description=(
                "What the controller merges this container over before it runs (KServe: the serving runtime; a "
                "container without an image, a kustomize patch read alone: its base); fields it leaves unset are "
                "unknown."
            )
        ),
    ]
    cpu_request: Annotated[
        Number | None,
        Meta(
            description=(
                "CPU cores requested; a limit alone counts as the request (Kubernetes copies it), except in a "
                "container merged over a base, where it stays null."
            )
        ),
    ]
    cpu_limit: Number | None
    memory_request: Annotated[
        Number | None,
        Meta(
            description=(
                "Memory bytes requested; a limit alone counts as the request, except in a container merged over a base."
            )
        ),
    ]
    memory_limit: Number | None
    dev_shm: Annotated[
        DevShm | None,
        Meta(description="The memory-backed emptyDir the container mounts at /dev/shm; null without one."),
    ] = None
    cpu_per_gpu: Annotated[Number | None, Meta(description="CPU request divided by GPU count; null without either.")]
    cpu_limit_per_gpu: Annotated[
        Number | None, Meta(description="CPU limit divided by GPU count; null without either.")
    ]


class DevShm(_Facts, kw_only=True, frozen=True):
    """A memory-backed /dev/shm, compared with the memory limit of the container that mounts it: what the container
    writes there counts against that limit."""

    size_limit_gib: Annotated[Number | None, Meta(description="The volume's sizeLimit; null without one.")]
    memory_limit_gib: Annotated[Number | None, Meta(description="The container's memory limit; null without one.")]
    over_memory_limit: Annotated[
        bool | None, Meta(description="sizeLimit above the memory limit; null when either is unknown.")
    ]
    pointer: str


class RenameConflict(_Facts, kw_only=True, frozen=True):
    requested: str
    advertised: str
    workloads: list[str]


class InvalidProfile(_Facts, kw_only=True, frozen=True):
    config: str
    profile: str
    gpus: list[str]
    problem: str
    pointer: str


class UnknownKey(_Facts, kw_only=True, frozen=True):
    pointer: str
    key: str
    nearest: Annotated[
        str, Meta(description="The known key it is nearest to (a typo's intent), else the keys the block knows.")
    ]


class NodePool(_Facts, kw_only=True, frozen=True):
    provisioner: Literal["karpenter"]
    gpu_only: Annotated[
        bool,
        Meta(
            description=(
                "One requirement admits only GPU instances: a GPU count or GPU name key, or an instance category, "
                "family or type that carries GPUs (g*, p*, Standard_N*)."
            )
        ),
    ]
    gpu_requirement: Annotated[str | None, Meta(description="The key of that requirement.")]
    taints_keeping_pods_away: Annotated[
        list[str],
        Meta(
            description=(
                "key:effect of the pool's NoSchedule and NoExecute taints (spec.template.spec.taints; startupTaints "
                "are removed once a node is ready and do not count)."
            )
        ),
    ]
    pointer: str
    taints_pointer: str


class ConfigFacts(_Facts, kw_only=True, frozen=True):
    """A GPU sharing configuration: a device-plugin config (in a ConfigMap) or the GPU Operator ClusterPolicy, or an
    autoscaler node pool that launches GPU nodes (Karpenter NodePool: facts/node_pools.py).
    """

    api_version: str = msgspec.field(name="apiVersion")
    kind: Annotated[
        str,
        Meta(
            description=(
                "ConfigMap (holding a device-plugin config), ClusterPolicy, or the object whose chart values hold one "
                "(HelmRelease, Application, HelmChart)."
            )
        ),
    ]
    name: str
    namespace: str
    config_type: Literal["device-plugin", "cluster-policy", "mig-parted", "node-pool"]
    key: Annotated[str | None, Meta(description="ConfigMap data key holding the config."), ABSENT] = None
    pointer: Annotated[str | None, ABSENT] = None
    time_slicing: SharingStrategy | None = None
    mps: SharingStrategy | None = None
    mig_strategy: str | None = None
    device_plugin_config: Annotated[str | None, Meta(description="ClusterPolicy spec.devicePlugin.config.name.")] = None
    device_plugin_default: str | None = None
    mig_strategy_pointer: Annotated[
        str | None,
        Meta(description="(cluster-policy) Where the MIG strategy is written (/spec when it is the default)."),
        ABSENT,
    ] = None
    mig_default_config: Annotated[str | None, Meta(description="ClusterPolicy spec.migManager.config.default.")] = None
    configures_sharing: Annotated[
        bool | None, Meta(description="Time-slicing, MPS or a MIG layout is configured."), ABSENT
    ] = None
    replicas_asked: Annotated[
        list[str] | None,
        Meta(
            description=(
                "(device-plugin) The names it time-slices under their own name that a container of the input (the "
                "folder named on the command line) asks two or more of, as 'name x count'; null where no workload is "
                "seen (a live config)."
            )
        ),
        ABSENT,
    ] = None
    other_profiles_share: Annotated[
        bool | None,
        Meta(
            description=(
                "(device-plugin) Another profile of the same object (a ConfigMap key, a values map entry) configures "
                "sharing: this one is the deliberate no-sharing choice for the nodes labelled to use it."
            )
        ),
        ABSENT,
    ] = None
    refused_by_plugin: Annotated[
        list[str] | None,
        Meta(
            description=(
                "(device-plugin) What the NVIDIA device plugin refuses when it parses this config: a sharing section "
                "without resources, a resource without a name, replicas missing or below 1."
            )
        ),
        ABSENT,
    ] = None
    mig_by_node_label: Annotated[
        bool | None,
        Meta(
            description=(
                "(cluster-policy) The MIG manager is switched on (enabled: true) without a layout of its own, so a "
                "node's nvidia.com/mig.config "
                "label may ask for one: in manifests true (no node is seen); in a cluster false (the policy is judged "
                "as written; the nodes' MIG is GPA-SH-102's)."
            )
        ),
        ABSENT,
    ] = None
    rename_conflicts: Annotated[
        list[RenameConflict] | None,
        Meta(
            description=(
                "(device-plugin) resources this config renames to <name>.shared that workloads in the input still "
                "request by the plain name."
            )
        ),
        ABSENT,
    ] = None
    shareable_services: Annotated[
        list[str] | None,
        Meta(
            description=(
                "(manifests) The input's long-running services (Kind namespace/name) whose GPU containers each hold "
                "one whole nvidia.com/gpu and run no server reserving most of its memory at start (vLLM, SGLang, "
                "TGI, NIM at their defaults) nor a stress test: what a sharing config would give a share. Null in "
                "a live audit."
            )
        ),
    ] = None
    mig_requests_unserved: Annotated[
        list[str] | None,
        Meta(
            description=(
                "nvidia.com/mig-<profile> resources workloads in the input request while mig_strategy is none or "
                "single (only mixed advertises them)."
            )
        ),
        ABSENT,
    ] = None
    unknown_keys: Annotated[
        list[UnknownKey] | None,
        Meta(
            description=(
                "(cluster-policy) Keys of spec.mig, spec.migManager.config, spec.migManager.gpuClientsConfig and "
                "spec.devicePlugin.config that the GPU operator does not know (a typo: ignored, so the field it "
                "meant keeps its default)."
            )
        ),
        ABSENT,
    ] = None
    mig_layouts_mixed: Annotated[
        list[str] | None,
        Meta(
            description=(
                "(cluster-policy) While mig.strategy is single: the layouts of the MIG manager's config "
                "(migManager.config.name, a ConfigMap of the input) that give one node MIG on some GPUs and not on "
                "others, or more than one MIG profile (per GPU model: the same device-filter); null when that "
                "config is not in the input or the strategy is not single."
            )
        ),
    ] = None
    mig_configs: Annotated[list[str] | None, Meta(description="(mig-parted) the named layouts."), ABSENT] = None
    invalid_profiles: Annotated[
        list[InvalidProfile] | None,
        Meta(
            description=(
                "(mig-parted) profiles the targeted GPUs (device-filter PCI ids; any MIG-capable GPU without a "
                "filter) do not offer, or more instances than they offer."
            )
        ),
        ABSENT,
    ] = None
    node_pool: Annotated[
        NodePool | None,
        Meta(
            description=(
                "A Karpenter NodePool (config_type node-pool): whether it launches only GPU instances and which "
                "taints keep pods away from its nodes (gpuaudit/data/node_pools.yaml)."
            )
        ),
        ABSENT,
    ] = None


class NodeFacts(_Facts, kw_only=True, frozen=True):
    """(cluster) a node with GPU resources."""

    name: str
    pointer: str
    product: str | None
    model: str | None
    gpus: Annotated[Number, Meta(description="Physical GPUs.")]
    gpu_resources: dict[str, Number]
    allocated: Annotated[
        Number | None, Meta(description=("GPUs held by pods bound to this node; null when the pods could not be read."))
    ]
    free: Number | None
    mig_capable: bool
    mig_enabled: bool
    mig_config: str | None
    sharing_strategy: Annotated[
        str | None, Meta(description="time-slicing, mps (NVIDIA) or time-sharing (GKE); null when none.")
    ]
    replicas: int | None
    unschedulable: bool
    taints: list[str]


class SelectorPin(_Facts, kw_only=True, frozen=True):
    request: str
    pin: Literal["device", "product"]
    expression: str
    pointer: str


class ClaimFacts(_Facts, kw_only=True, frozen=True):
    """(cluster) a DRA ResourceClaim."""

    api_version: Annotated[str | None, ABSENT] = msgspec.field(name="apiVersion", default=None)
    kind: Annotated[str | None, Meta(description="ResourceClaim or ResourceClaimTemplate."), ABSENT] = None
    requests: Annotated[int | None, Meta(description="(manifest) device requests in the claim."), ABSENT] = None
    selector_pins: Annotated[
        list[SelectorPin] | None,
        Meta(
            description=(
                "(manifest) CEL selectors that pin one device (index, uuid, minor, parentUUID, device.name ==) or one "
                "product (productName ==); alternatives joined by || are not pins."
            )
        ),
        ABSENT,
    ] = None
    name: str
    namespace: str
    pointer: str
    allocated: Annotated[bool | None, Meta(description="Devices are allocated to it."), ABSENT] = None
    reserved: Annotated[bool | None, Meta(description="A pod uses it (status.reservedFor)."), ABSENT] = None
    devices: Annotated[list[str] | None, ABSENT] = None
    age_hours: Number | None = None
    file_context: Annotated[
        Literal["test", "example"] | None,
        Meta(description="(manifest) Where the claim's file sits, as for a workload (severity_by_context)."),
    ] = None


class ClusterSharing(_Facts, kw_only=True, frozen=True):
    active_nodes: Annotated[int, Meta(description="GPU nodes whose labels show time-slicing, MPS or MIG in effect.")]
    time_slicing_nodes: int
    mps_nodes: int
    mig_nodes: int
    configs_with_sharing: Annotated[
        int, Meta(description="Device-plugin configs (ConfigMaps) that define time-slicing or MPS.")
    ]


class ClusterFacts(_Facts, kw_only=True, frozen=True):
    """(cluster) one document for the whole cluster."""

    name: str
    pointer: str
    partial: Annotated[
        list[str],
        Meta(
            description=(
                "Object lists the collector could not read (pods, nodes, events...): the totals that depend on them "
                "are null."
            )
        ),
    ]
    gpu_nodes: int | None
    gpus_total: Number | None
    gpus_allocated: Number | None
    sharing: ClusterSharing
    shareable_pods: Annotated[
        int | None, Meta(description=("Running pods of long-running workloads that each hold exactly one whole GPU."))
    ]
    pending_gpu_pods: int | None
    pending_by_cause: Annotated[
        dict[str, int] | None,
        Meta(description=("Pending GPU pods by the cause their own facts give (pod.pending.cause).")),
    ]
    kueue_pending: int
    kueue_examples: list[dict[str, Any]]


class GpuRequests(_Facts, kw_only=True, frozen=True):
    """GPU requests of a container or pod template."""

    unknown_mig_profiles: Annotated[
        list[str],
        Meta(
            description=(
                "MIG profiles in nvidia.com/mig-<profile> requests that no catalogued GPU offers "
                "(gpuaudit/data/gpus.yaml)."
            )
        ),
    ]
    unadvertised_shared: Annotated[
        list[str] | None,
        Meta(
            description=(
                "(pod) `.shared` resources requested that no device-plugin config in the input renames to, nor "
                "site.shared_resource names; null when neither says."
            )
        ),
    ] = None
    requested: Annotated[
        bool,
        Meta(
            description=(
                "Any GPU-like resource, MIG slice, shared replica, DRA claim or fraction annotation. A DRA "
                "claim counts unless the input holds its template or claim and every device class it names "
                "is no GPU's (qat.intel.com, an IMEX channel)."
            )
        ),
    ]
    count: Annotated[
        Number | None,
        Meta(description=("Devices requested (sum over resources, limits win); null when a value was unreadable.")),
    ]
    count_unknown: Annotated[bool, Meta(description="A GPU count was not a number (e.g. $GPU_PER_NODE).")]
    whole: Annotated[
        bool,
        Meta(
            description=(
                "Requests whole device-plugin GPUs (nvidia.com/gpu, amd.com/gpu...) without a sharing modifier."
            )
        ),
    ]
    whole_count: Annotated[Number, Meta(description="How many whole GPUs.")]
    replicated: Annotated[
        bool | None,
        Meta(
            description=(
                "(pod) A resource it asks for is one a time-slicing or MPS config of the input replicates under its "
                "own name (Context.replicated_names): its 'GPUs' may be turns on a shared one."
            )
        ),
        ABSENT,
    ] = None
    shared: Annotated[
        bool, Meta(description=("Requests a share: MIG slice, .shared replica, HAMi vGPU or a fraction annotation."))
    ]
    modes: list[Literal["whole", "mig", "shared", "fraction", "dra"]]
    plugin_named: Annotated[
        bool,
        Meta(
            description=(
                "Every GPU request names NVIDIA GPUs as a plugin of its own does (nvidia.com/gpu-all from a generic "
                "CDI device plugin): that plugin decides how many GPUs one is and what the container sees."
            )
        ),
    ] = False
    resources: Annotated[
        list[str], Meta(description=("Resource names, e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb, claim/<template>."))
    ]
    mig_profiles: list[str]
    dra_claims: int
    pointer: Annotated[str | None, Meta(description="The first GPU request's field.")]
    in_requests: Annotated[
        bool | None, Meta(description="(container) the GPU appears in resources.requests."), ABSENT
    ] = None
    in_limits: Annotated[bool | None, Meta(description="(container) the GPU appears in resources.limits."), ABSENT] = (
        None
    )
    requests_equal_limits: Annotated[
        bool | None, Meta(description="(container) where both are given, they are equal."), ABSENT
    ] = None
    fractional_whole: Annotated[
        bool | None,
        Meta(description=("(container) a whole-GPU resource with a non-integer count such as 0.5.")),
        ABSENT,
    ] = None
    init_requested: Annotated[bool | None, Meta(description="(pod) an initContainer requests GPUs."), ABSENT] = None
    init_count: Annotated[Number | None, Meta(description="(pod) GPUs the largest initContainer requests."), ABSENT] = (
        None
    )
    main_count: Annotated[
        Number | None, Meta(description="(pod) GPUs the app containers request together."), ABSENT
    ] = None
    init_pointer: Annotated[str | None, Meta(description="(pod) the first initContainer GPU request.")] = None
    init_excess: Annotated[
        Number | None,
        Meta(
            description=(
                "(pod) GPUs the largest initContainer requests beyond main_count: reserved all the pod's life, used "
                "by nobody."
            )
        ),
        ABSENT,
    ] = None
    slice: Annotated[
        bool | None,
        Meta(
            description=(
                "Containers only: the GPU this container uses is a slice of one, not a whole GPU: a shared, MIG or "
                "fractional resource (HAMi gpucores/gpumem beside nvidia.com/gpu), a pod-level fraction annotation "
                "(Run:ai, KAI gpu-fraction), a node pool whose GPUs are shared or partitioned "
                "(placement.sharing_pool), or a resource a time-slicing or MPS config of the input replicates under "
                "its own name. Per-GPU ratios (CPU per GPU) do not apply to a slice."
            )
        ),
        ABSENT,
    ] = None


class Telemetry(_Facts, kw_only=True, frozen=True):
    """GPU telemetry aggregated over the audit window (Prometheus/DCGM or NVML samples); null when none was found for
    this subject. Compute values are ratios 0..1.
    """

    # Every signal defaults to None: telemetry laid over a document by hand
    # (a what-if, a test) names only the signals it has.

    signal: Annotated[
        str | None, Meta(description=("The compute metric used (SM_ACTIVE, else GR_ENGINE_ACTIVE, else GPU_UTIL/100)."))
    ] = None
    signal_name: Annotated[
        str | None,
        Meta(
            description=(
                "The compute signal without the DCGM_FI_PROF_/DCGM_FI_DEV_ prefix (SM_ACTIVE, GR_ENGINE_ACTIVE, "
                "GPU_UTIL): the name to show wherever compute is shown."
            )
        ),
    ] = None
    samples: Annotated[
        Number | None,
        Meta(
            description=(
                "Real samples of the compute signal judged (at most one per query step; gaps are not filled by "
                "Prometheus' lookback)."
            )
        ),
    ] = None
    span_hours: Annotated[
        Number | None,
        Meta(
            description=(
                "Hours from the pod's first to its last sample inside the window: the span its values describe (the "
                "window when the source does not say)."
            )
        ),
    ] = None
    demand_evidence: Annotated[
        bool | None,
        Meta(
            description=(
                "Whether work was waiting for the GPU, from site-defined signals named demand_* (request rate or "
                "queue, busy CPU, data-loader wait): true when any is above 0, false when all are 0, null when none "
                "is collected."
            )
        ),
    ] = None
    window_seconds: Number | None = None
    coverage: Annotated[
        Number | None,
        Meta(
            description=(
                "Share of the query steps from the pod's first to its last sample in the window that hold a real "
                "sample (its own life, not the whole window)."
            )
        ),
    ] = None
    gpus: Number | None = None
    compute_mean: Number | None = None
    compute_p95: Number | None = None
    compute_max: Number | None = None
    fb_used_mean_mib: Number | None = None
    fb_used_max_mib: Number | None = None
    fb_total_mib: Number | None = None
    resident_fraction: Number | None = None
    resident_idle_fraction: Number | None = None
    pcie_tx_mean_bps: Number | None = None
    pcie_rx_mean_bps: Number | None = None
    nvlink_mean_bps: Number | None = None
    occupancy_mean: Number | None = None
    tensor_active_mean: Number | None = None
    dram_active_mean: Annotated[
        Number | None,
        Meta(description=("Mean share of time the device-memory interface was busy (DCGM_FI_PROF_DRAM_ACTIVE), 0..1.")),
    ] = None
    idle_gpu_hours: Annotated[
        Number | None,
        Meta(description=("GPUs held x span_hours x coverage x (1 - mean compute): capacity held but not used.")),
    ] = None
    extra: Annotated[dict[str, Any], Meta(description="Site-defined signals from config.")] = {}
    pcie_mean_bps: Annotated[Number | None, Meta(description="PCIe TX + RX, bytes/s, mean over the window.")] = None


class ModelFit(_Facts, kw_only=True, frozen=True):
    """The model a GPU container loads and the GPUs its size needs, by the heuristic in gpuaudit/data/models.yaml; null
    when no model or no size is known.
    """

    name: str
    source: Annotated[
        Literal["args", "env", "storageUri", "label", "spec", "image"],
        Meta(
            description=(
                "Where the name was read: a flag (args), env, KServe storageUri, a pod label, the object's spec, or "
                "an image named after its model (NVIDIA NIM)."
            )
        ),
    ]
    params_b: Annotated[Number | None, Meta(description="Billions of parameters.")]
    dtype: str
    bytes_per_param: Number
    weights_gib: Number | None
    need_gib: Annotated[Number | None, Meta(description="Weights x headroom.")]
    gpu_memory_gib: Annotated[Number, Meta(description="Per-GPU memory used for the estimate.")]
    gpu_memory_source: Literal["selector", "site", "assumed"]
    gpus: Annotated[
        Number | None,
        Meta(description=("Whole GPUs the container holds; null when they are one pod's share of a multi-pod group.")),
    ]
    gpus_needed: int | None
    excess_gpus: Annotated[int | None, Meta(description="gpus - gpus_needed.")]
    fits_half_gpu: Annotated[
        bool | None,
        Meta(
            description=(
                "need_gib fits in half of one GPU's memory (gpu_memory_gib): the model could share a GPU. Null when "
                "its size is unknown."
            )
        ),
    ]
    weights_exceed_gpus: Annotated[
        bool | None,
        Meta(
            description=(
                "weights_gib alone is more than the memory of the GPUs held (gpus x gpu_memory_gib): the model cannot "
                "be loaded as written. Null when its size, the GPUs held or their memory (from a product selector or "
                "site.gpu_memory_gib, never assumed) is unknown."
            )
        ),
    ]
    pointer: str | None


class Parallelism(_Facts, kw_only=True, frozen=True):
    """Parallelism a container declares (--tensor-parallel-size, --num-shard, -tp, --pipeline-parallel-size,
    --data-parallel-size, --nproc-per-node, NUM_SHARD... and KServe workerSpec), or vLLM's and SGLang's default of
    one GPU where a container with several sets none (`default_of`), compared with its whole GPUs; null when nothing
    declares any.
    """

    tensor: int | None
    pipeline: int | None
    data: int | None
    processes: Annotated[int | None, Meta(description="Processes per node (torchrun, DeepSpeed).")]
    total: Annotated[
        int | None,
        Meta(
            description=(
                "GPUs the process group uses: processes, else tensor x pipeline x data; null when a value was "
                "unreadable."
            )
        ),
    ]
    gpus: Annotated[Number | None, Meta(description="Whole GPUs the container holds.")]
    matches_gpus: Annotated[
        bool | None, Meta(description=("total equals the GPUs held, or is a multiple of them (a group spanning pods)."))
    ]
    unused_gpus: Annotated[Number | None, Meta(description="GPUs held beyond total.")]
    pointer: str | None
    processes_over_gpus: Annotated[
        int | None,
        Meta(
            description=(
                "Processes per node (torchrun --nproc_per_node, DeepSpeed --num_gpus) beyond the whole GPUs the "
                "container holds: 0 when they fit; null when either is unknown. The count is per node, so per pod: "
                "more processes than GPUs share devices or fail on a device ordinal."
            )
        ),
    ]
    nodes: Annotated[
        int | None,
        Meta(
            description=(
                "Nodes (pods) one group spans, as the command says (--nnodes 2); null for one pod or a number it "
                "does not say (a Ray cluster started by hand, --node-rank, --headless: then split_over_gpus is null)."
            )
        ),
    ] = None
    split_over_gpus: Annotated[
        int | None,
        Meta(
            description=(
                "GPUs one copy of the model is split over (tensor x pipeline parallel) beyond the whole GPUs the "
                "container holds: 0 when they fit; null when unknown. Right only when the group spans several pods "
                "(LeaderWorkerSet, Ray, multi-node KServe)."
            )
        ),
    ]
    gpus_asked: Annotated[
        int | None,
        Meta(
            description=(
                "GPUs the command line asks of this pod: the processes per node when stated, else tensor x pipeline "
                "parallel; null when the pod's GPUs or the sizes are unknown."
            )
        ),
    ]
    default_of: Annotated[
        str | None,
        Meta(
            description=(
                "The engine (vLLM, SGLang) whose default gave the sizes: its command sets none, and it then runs on "
                "one GPU. Read only for a container that holds several whole GPUs and starts the engine once, with "
                "no config file or shell variable that could set them; null when the sizes are declared."
            )
        ),
    ] = None
    said: Annotated[str, Meta(description="The sizes as declared (`tensor 2, data 2`), or the engine default.")] = ""


class Spread(_Facts, kw_only=True, frozen=True):
    """Required pod anti-affinity or a DoNotSchedule topology spread on kubernetes.io/hostname that selects the pod's
    own labels; null without one.
    """

    max_pods_per_node: int
    by: Literal["podAntiAffinity", "topologySpreadConstraints"]
    gpus_per_node: Annotated[
        Number | None,
        Meta(description=("From a GPU-count node selector (gke-accelerator-count...) or site.gpus_per_node.")),
    ]
    gpus_per_node_source: str | None
    nodes_demanded: Annotated[int | None, Meta(description="Nodes the replicas are spread over.")]
    nodes_needed: Annotated[int | None, Meta(description="Nodes their GPUs would fill.")]
    extra_nodes: int | None
    pointer: str | None


class PurposeEvidence(_Facts, kw_only=True, frozen=True):
    """Which signal decided `purpose`, what matched and why that means the purpose."""

    __schema_required__: ClassVar[bool] = True

    signal: Annotated[
        Literal["program", "image", "context", "name", "idle", "server", "kind", "none"],
        Meta(
            description=(
                "program (a container's command line), image, context (a folder or file name of the file it was read "
                "from: examples/, demo/, docs/...), name (its name or a label's value), idle (its GPU containers do "
                "no GPU work), server (a model server), kind (a training operator's kind, or the kind's class), none."
            )
        ),
    ]
    value: Annotated[
        str,
        Meta(
            description=(
                "What matched: `container: command or image`, the name, the path segment (shortened to 120 characters)."
            )
        ),
    ]
    why: Annotated[str, Meta(description="Why that signal means this purpose, as the table says.")]


class SharingStrategy(_Facts, kw_only=True, frozen=True):
    resources: list[str]
    min_replicas: Annotated[int | None, Meta(description="The fewest replicas of a resource (counts of 1 or more).")]
    max_replicas: Annotated[
        int | None, Meta(description="The most replicas of a resource: at 1, the section shares nothing.")
    ]
    rename_by_default: bool
    fail_requests_greater_than_one: bool | None


class ObjectMetadata(_Facts, kw_only=True, frozen=True):
    """The labels and annotations on the object itself (a Deployment's, a PyTorchJob's), not on its pod templates."""

    labels: TextMap
    annotations: TextMap


TargetFacts: TypeAlias = WorkloadFacts | PodFacts | ContainerFacts | ConfigFacts | NodeFacts | ClaimFacts | ClusterFacts
# target -> the type of its fact documents
TARGET_TYPES: Mapping[str, type[TargetFacts]] = {
    "workload": WorkloadFacts,
    "pod": PodFacts,
    "container": ContainerFacts,
    "config": ConfigFacts,
    "node": NodeFacts,
    "claim": ClaimFacts,
    "cluster": ClusterFacts,
}
# The schema's $defs, by name: the targets and the shapes several facts share
# (every other Struct here is written inline where it is used).
SCHEMA_DEFS: Mapping[str, Any] = {
    **TARGET_TYPES,
    "gpu": GpuRequests,
    "telemetry": Telemetry,
    "model": ModelFit,
    "parallelism": Parallelism,
    "spread": Spread,
    "purpose_evidence": PurposeEvidence,
    "sharing_strategy": SharingStrategy,
    "object_metadata": ObjectMetadata,
    "text_map": TextMap,
}


def as_facts(target: str, facts: Mapping[str, Any]) -> TargetFacts:
    """A target's fact document as its type (strict: a fact not declared, or
    of another type, raises ``msgspec.ValidationError``)."""
    return msgspec.convert(facts, TARGET_TYPES[target], strict=True)


FactsType = TypeVar("FactsType", bound=_Facts)


def as_type(facts: Mapping[str, Any], cls: type[FactsType]) -> FactsType:
    """A fact document (or a part of one) as ``cls``, for a reader that knows
    its target: ``as_type(ctx.facts, PodFacts).placement.gpu_product``."""
    return msgspec.convert(facts, cls, strict=True)
