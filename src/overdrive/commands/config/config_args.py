"""A config file as Hugging Face Accelerate's dataclasses (``ClusterConfig``, ``SageMakerConfig``).

overdrive reads config files through its own schema (``overdrive.config``); these classes
are the typed view scripts and tools written against Hugging Face Accelerate use: load a file,
look at or change its fields, write it back. Unknown top-level keys are refused by name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from overdrive.config import schema
from overdrive.config.sources import default_config_path
from overdrive.config.types import ComputeEnvironment, DistributedType

hf_cache_home = os.path.expanduser(
    os.environ.get(
        "HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    )
)
"""The Hugging Face cache folder (``HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``)."""
default_yaml_config_file = str(default_config_path(os.environ))
cache_dir = str(Path(default_yaml_config_file).parent)
"""overdrive's config folder, where ``overdrive config`` saves and ``overdrive launch`` reads
(``$XDG_CACHE_HOME/overdrive``); Hugging Face Accelerate's is ``hf_cache_home/accelerate``."""
default_json_config_file = default_yaml_config_file  # one file, as in Hugging Face Accelerate
if os.path.isfile(default_yaml_config_file) or not os.path.isfile(default_json_config_file):
    default_config_file = default_yaml_config_file
else:
    default_config_file = default_json_config_file


def _plain(value: Any) -> Any:
    """Enums as their values, recursively, so the dict dumps as YAML or JSON."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _read(path: str, *, as_json: bool) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle) if as_json else yaml.safe_load(handle)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"The config file at {path} does not hold a mapping of settings")
    return data


@dataclass
class BaseConfig:
    """The keys every config file has."""

    compute_environment: ComputeEnvironment
    distributed_type: DistributedType | str
    mixed_precision: str
    use_cpu: bool
    debug: bool

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (None left out), enums as their values."""
        return {
            key: _plain(value)
            for key, value in dataclasses.asdict(self).items()
            if value is not None
        }

    @classmethod
    def _from_dict(cls, data: dict[str, Any], path: str) -> BaseConfig:
        data = dict(data)
        data.setdefault("compute_environment", ComputeEnvironment.LOCAL_MACHINE.value)
        data.setdefault("mixed_precision", "no")
        data.setdefault("use_cpu", False)
        data.setdefault("debug", False)
        data.setdefault("distributed_type", DistributedType.NO.value)
        if data["mixed_precision"] is None:
            data["mixed_precision"] = "no"
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(
                f"The config file at {path} had unknown keys ({', '.join(map(repr, unknown))}); "
                "remove them (`overdrive config validate FILE` names each with a suggestion)"
            )
        return cls(**data)

    @classmethod
    def from_json_file(cls, json_file: str | None = None) -> BaseConfig:
        """Read a JSON config file (default: the cached one)."""
        path = json_file or default_json_config_file
        return cls._from_dict(_read(path, as_json=True), path)

    @classmethod
    def from_yaml_file(cls, yaml_file: str | None = None) -> BaseConfig:
        """Read a YAML config file (default: the cached one)."""
        path = yaml_file or default_yaml_config_file
        return cls._from_dict(_read(path, as_json=False), path)

    def to_file_dict(self) -> dict[str, Any]:
        """``to_dict()`` as a config file ``overdrive launch`` reads: without the fields
        overdrive has no setting for while they hold their default (empty sections, TPU and
        CPU-affinity switches off) and without an unset ``num_processes`` (-1). A field set
        away from its default stays, for the launch to name it."""
        known = {s.key.split(".")[0] for s in schema.SETTINGS}
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        out = {}
        for key, value in self.to_dict().items():
            idle = value in ({}, [], None) or value == defaults.get(key)
            if (key not in known and idle) or (key == "num_processes" and value == -1):
                continue
            out[key] = value
        return out

    def to_json_file(self, json_file: str) -> None:
        """Write the set fields as JSON (``to_file_dict``)."""
        with open(json_file, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(self.to_file_dict(), indent=2, sort_keys=True) + "\n")

    def to_yaml_file(self, yaml_file: str) -> None:
        """Write the set fields as YAML (``to_file_dict``)."""
        with open(yaml_file, "w", encoding="utf-8") as handle:
            yaml.safe_dump(self.to_file_dict(), handle)

    def __post_init__(self) -> None:
        if isinstance(self.compute_environment, str):
            self.compute_environment = ComputeEnvironment(self.compute_environment)
        if str(self.distributed_type) in DistributedType.__members__:
            self.distributed_type = DistributedType(str(self.distributed_type))


@dataclass
class ClusterConfig(BaseConfig):
    """A config file for one or several machines of one's own (``LOCAL_MACHINE``)."""

    num_processes: int = -1  # -1: not written; the launcher decides
    machine_rank: int = 0
    num_machines: int = 1
    gpu_ids: str | None = None
    main_process_ip: str | None = None
    main_process_port: int | None = None
    rdzv_backend: str | None = "static"
    same_network: bool | None = False
    main_training_function: str = "main"
    enable_cpu_affinity: bool = False
    fp8_config: dict[str, Any] | None = None
    deepspeed_config: dict[str, Any] | None = None
    fsdp_config: dict[str, Any] | None = None
    parallelism_config: dict[str, Any] | None = None
    megatron_lm_config: dict[str, Any] | None = None
    mpirun_config: dict[str, Any] | None = None
    downcast_bf16: bool = False
    tpu_name: str | None = None
    tpu_zone: str | None = None
    tpu_use_cluster: bool = False
    tpu_use_sudo: bool = False
    command_file: str | None = None
    commands: list[str] | None = None
    tpu_vm: list[str] | None = None
    tpu_env: list[str] | None = None
    dynamo_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for section in (
            "fp8_config", "deepspeed_config", "fsdp_config", "parallelism_config",
            "megatron_lm_config", "mpirun_config", "dynamo_config",
        ):  # fmt: skip
            if getattr(self, section) is None:
                setattr(self, section, {})
        super().__post_init__()


@dataclass
class SageMakerConfig(BaseConfig):
    """A config file for Amazon SageMaker (read and written; overdrive does not launch there)."""

    ec2_instance_type: str
    iam_role_name: str
    image_uri: str | None = None
    profile: str | None = None
    region: str = "us-east-1"
    num_machines: int = 1
    gpu_ids: str = "all"
    base_job_name: str = "accelerate-sagemaker-1"
    pytorch_version: str | None = None
    transformers_version: str | None = None
    py_version: str | None = None
    sagemaker_inputs_file: str | None = None
    sagemaker_metrics_file: str | None = None
    additional_args: dict[str, Any] | None = None
    dynamo_config: dict[str, Any] | None = None
    enable_cpu_affinity: bool = False


def load_config_from_file(config_file: str | None = None) -> BaseConfig:
    """The config file as a ``ClusterConfig`` or ``SageMakerConfig`` (by its
    ``compute_environment``); the cached default when ``config_file`` is None."""
    path = config_file or (
        default_yaml_config_file
        if os.path.isfile(default_yaml_config_file)
        else default_json_config_file
    )
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"The passed configuration file `{path}` does not exist. Please pass an existing "
            "file to `overdrive launch`, or create one with `overdrive config`."
        )
    as_json = path.endswith(".json")
    data = _read(path, as_json=as_json)
    environment = data.get("compute_environment", ComputeEnvironment.LOCAL_MACHINE.value)
    cls = SageMakerConfig if environment == ComputeEnvironment.AMAZON_SAGEMAKER else ClusterConfig
    return cls._from_dict(data, path)
