"""The facts behind the static rule pack: command lines, parallelism, the
model-size heuristic, MIG profiles, and every fact document matching the
documented fact schema."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit import gpus
from gpuaudit.engine.rules import fact_schema
from gpuaudit.facts.cmdline import flag, shell_words, tokens
from gpuaudit.facts.context import Site, build_context
from gpuaudit.facts.model_size import find_dtype, parameters_b
from gpuaudit.facts.parallelism import container_parallelism
from gpuaudit.model import Container, GpuRequest
from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.pipelines.check import manifest_subjects
from gpuaudit.sources.manifests import read_paths

from .conftest import ROOT, shared_or_skip


def container(args=(), command=(), env=None, gpus_=8.0) -> Container:
    return Container(
        name="c",
        pointer="/spec/containers/0",
        init=False,
        image="",
        command=tuple(command),
        args=tuple(args),
        env=env or {},
        gpus=(GpuRequest("nvidia.com/gpu", "whole", None, gpus_, "/x"),),
        cpu_request=None,
        cpu_limit=None,
        memory_request=None,
        memory_limit=None,
        volume_mounts={},
        resources_pointer="/spec/containers/0/resources",
    )


def test_command_lines_expand_kubernetes_and_shell_variables_and_split_shell_lines():
    words = tokens(
        ["/bin/sh", "-c"],
        ['python3 -m vllm.entrypoints.openai.api_server --model "${MODEL}" -tp=$(TP)'],
        {"MODEL": "google/gemma-2b-it", "TP": "2"},
    )
    assert [w.text for w in words][-4:] == [
        "vllm.entrypoints.openai.api_server",
        "--model",
        "google/gemma-2b-it",
        "-tp=2",
    ]
    assert flag(words, ("--model",)).text == "google/gemma-2b-it"
    assert flag(words, ("-tp",)).text == "2"
    assert (flag(words, ("-tp",)).field, flag(words, ("-tp",)).index) == ("args", 0)
    assert flag(tokens([], ["--x=$(UNSET)"], {}), ("--x",)).text == "$(UNSET)"


@pytest.mark.parametrize(
    "line",
    [
        "python train.py --lr 0.1\t--epochs=3\n",
        "torchrun --nproc_per_node 8 train.py",  # plain: split without shlex
        "echo 'a b' \"c d\" e\\ f",  # quotes and escapes: shlex
        "a\x0bb c",  # whitespace to str.split, not to shlex
        "a\x1cb c",
        "a\x85b c",
        "a\u00a0b c",
        "a\u3000b c",
        "sh -c 'unbalanced",  # shlex refuses: split on whitespace
    ],
)
def test_a_shell_line_splits_into_the_words_shlex_gives(line):
    import shlex

    try:
        expected = shlex.split(line, comments=False)
    except ValueError:
        expected = line.split()
    assert [w.text for w in tokens([], [line], {})] == [w for w in expected if w]


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab -=$'\"\\\t\n\r\x0b\x0c\x00\x1c\u00a0\u3000", max_size=24))
def test_shell_words_are_the_words_shlex_gives(line):
    """shell_words is a regex reading of shlex.split(comments=False): the same
    words for every line, and a refusal (ValueError) for the same lines."""
    import shlex

    try:
        expected = shlex.split(line, comments=False)
    except ValueError:
        with pytest.raises(ValueError):
            shell_words(line)
        return
    assert shell_words(line) == expected


@pytest.mark.parametrize(
    ("args", "env", "gpus_", "total", "matches", "unused"),
    [
        (["--tensor-parallel-size=8"], {}, 8, 8, True, 0),
        (["--tensor-parallel-size", "2"], {}, 8, 2, False, 6),
        (["--tp", "4", "--dp", "2"], {}, 8, 8, True, 0),
        (["-tp", "8", "-pp", "2"], {}, 8, 16, True, 0),  # a group across two pods
        ([], {"NUM_SHARD": "2"}, 2, 2, True, 0),
        (["torchrun", "--nproc_per_node=gpu", "train.py"], {}, 8, None, True, 0),
        (["torchrun", "--nproc-per-node", "4", "train.py"], {}, 8, 4, False, 4),
        (["--tensor-parallel-size=3"], {}, 8, 3, False, 5),
    ],
)
def test_parallelism_is_compared_with_the_gpus_held(args, env, gpus_, total, matches, unused):
    facts = container_parallelism(container(args=args, env=env, gpus_=gpus_))
    assert (facts["total"], facts["matches_gpus"], facts["unused_gpus"]) == (
        total,
        matches,
        unused,
    )


def test_no_parallelism_flag_means_no_parallelism_facts():
    assert container_parallelism(container(args=["--port", "8000"])) is None


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("google/gemma-2b-it", 2.5),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", 70),
        ("hf://meta-llama/Llama-3.1-8B", 8),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 109),  # 17B are the active experts
        ("deepseek-ai/DeepSeek-R1", 671),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1.5),
        ("google/timesfm-2.0-500m-pytorch", 0.5),
        ("/data/nemo_rl_gemma3_27b_3_11/hf", 27),
        ("openai/whisper-large-v3", None),
        ("meta-llama/Llama-3.1", None),  # a version, not a size
    ],
)
def test_parameter_count_from_the_model_name(name, params):
    assert parameters_b(name) == params


def test_dtype_from_flags_env_and_the_model_name():
    assert find_dtype(tokens([], ["--quantize=bitsandbytes-nf4"], {}), {}, "x") == "int4"
    assert find_dtype([], {"QUANTIZE": "fp8"}, "x") == "fp8"
    assert find_dtype([], {}, "TheBloke/Llama-2-7B-AWQ") == "int4"
    assert find_dtype(tokens([], ["--dtype", "float32"], {}), {}, "x") == "float32"
    assert find_dtype([], {}, "google/gemma-2b") == "bfloat16"


def test_mig_profiles_come_from_the_catalogue_with_variants():
    assert gpus.known_mig_profile("1g.10gb") and gpus.known_mig_profile("1g.18gb+me")
    assert gpus.known_mig_profile("4g.96gb+gfx")
    assert not gpus.known_mig_profile("1g.11gb") and not gpus.known_mig_profile("gpu")
    assert gpus.model_for_pci("0x233510de").model == "H200-141GB"


def test_mig_parteds_own_default_config_is_valid():
    """Every layout in mig-parted's shipped config names profiles its GPUs offer."""
    path = shared_or_skip("corpus", "manifests", "NVIDIA__mig-parted", "deployments__systemd__config-default.yaml")
    read = read_paths([str(path)])
    [subject] = list(manifest_subjects([], [], build_context(Site(), [], []), read.bare))
    assert subject.facts["config_type"] == "mig-parted"
    assert len(subject.facts["mig_configs"]) > 30
    assert subject.facts["invalid_profiles"] == []


FACT_SCHEMA = fact_schema()  # assembled from gpuaudit/facts/*.schema.json


@pytest.mark.parametrize("where", ["examples", "corpus"])
def test_every_fact_document_matches_the_fact_schema(where):
    root = ROOT / "examples" if where == "examples" else shared_or_skip("corpus")
    read = read_paths([str(root)])
    workloads, _ = build_workloads(read.documents)
    site = Site.from_config(
        {
            "platform": "eks",
            "gpu_taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            "gpu_classes": [{"name": "big", "selector": {"c": "big"}, "products": ["H100-80GB", "H200-141GB"]}],
            "gpus_per_node": 8,
        }
    )
    context = build_context(site, read.documents, workloads, read.bare)
    checked = 0
    for subject in manifest_subjects(read.documents, workloads, context, read.bare):
        schema = {**FACT_SCHEMA, "$ref": f"#/$defs/{subject.target}"}
        document = json.loads(json.dumps(subject.facts))
        errors = list(jsonschema.Draft7Validator(schema).iter_errors(document))
        assert not errors, (subject.target, subject.resource, errors[0].message)
        checked += 1
    assert checked > (10 if where == "examples" else 1000)


def test_a_model_pattern_is_matched_as_its_regex_matches():
    # The table's patterns compile only for names holding their leading text:
    # the answer is the regex's own for every pattern and name.
    import re

    from gpuaudit.bundled import data_yaml
    from gpuaudit.facts.model_size import _Pattern

    names = [
        "gemma-2b",
        "gemma-2b-it",
        "gemma-7b",
        "deepseek-r1",
        "deepseek-v3-0324",
        "deepseek-r1-awq",
        "deepseek-v2.5",
        "llama-4-scout-17b-16e",
        "llama4-maverick",
        "mixtral-8x7b-instruct",
        "gpt-oss-20b",
        "gpt-oss-120b",
        "phi-3-mini-4k",
        "phi-3.5-mini",
        "phi-3-small",
        "bert-base-uncased",
        "t5-small",
        "google-t5-small",
        "t5-base",
        "gpt2",
        "resnet50",
        "resnet-50",
        "alexnet",
        "distilbert-base",
        "all-minilm-l6-v2",
        "bge-reranker-large",
        "bge-small-en",
        "bge-m3",
        "qwen2.5-7b-instruct",
        "llama-3.1-8b",
        "",
    ]
    for entry in data_yaml("models.yaml")["known"]:
        pattern = _Pattern(entry["pattern"])
        for name in names:
            assert pattern.search(name) == bool(re.search(entry["pattern"], name)), (entry["pattern"], name)
