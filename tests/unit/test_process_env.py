"""detect_process_env reads each launcher's variables, in the documented order."""

from __future__ import annotations

import pytest

from overdrive.environment.process_env import ProcessEnv, detect_process_env
from overdrive.errors import ConfigError


def test_plain_python_is_one_process() -> None:
    env = detect_process_env({})
    assert env == ProcessEnv()
    assert (env.launcher, env.world_size, env.is_distributed, env.num_nodes) == (
        "none",
        1,
        False,
        1,
    )


def test_torchrun_variables() -> None:
    env = detect_process_env(
        {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "1234",
        }
    )
    assert env == ProcessEnv(5, 1, 8, 4, 1, "10.0.0.1", 1234, "torchrun")
    assert env.num_nodes == 2


def test_overdrive_handover_marks_the_launcher() -> None:
    env = detect_process_env({"RANK": "0", "WORLD_SIZE": "2", "OVERDRIVE_SETTINGS": "{}"})
    assert env.launcher == "overdrive"
    assert env.local_world_size == 2  # defaults to the world when not given


def test_torchrun_wins_over_slurm() -> None:
    env = detect_process_env(
        {"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    )
    assert (env.launcher, env.rank) == ("torchrun", 1)


def test_slurm_variables() -> None:
    env = detect_process_env(
        {
            "SLURM_PROCID": "6",
            "SLURM_NTASKS": "8",
            "SLURM_LOCALID": "2",
            "SLURM_NODEID": "1",
            "SLURM_TASKS_PER_NODE": "4(x2)",
            "SLURM_LAUNCH_NODE_IPADDR": "10.1.1.1",
            "MASTER_ADDR": "ignored",
        }
    )
    assert env == ProcessEnv(6, 2, 8, 4, 1, "10.1.1.1", None, "slurm")


def test_slurm_master_falls_back_to_master_addr() -> None:
    env = detect_process_env(
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "MASTER_ADDR": "h0"}
    )
    assert (env.master_addr, env.local_world_size) == ("h0", 1)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            },
            (3, 1, 4, 2, 1),
        ),
        ({"PMI_RANK": "2", "PMI_SIZE": "3"}, (2, 0, 3, 3, 0)),
        (
            {
                "MV2_COMM_WORLD_RANK": "1",
                "MV2_COMM_WORLD_SIZE": "2",
                "MV2_COMM_WORLD_LOCAL_RANK": "1",
                "MV2_COMM_WORLD_LOCAL_SIZE": "2",
            },
            (1, 1, 2, 2, 0),
        ),
    ],
)
def test_mpi_flavours(variables: dict[str, str], expected: tuple[int, ...]) -> None:
    env = detect_process_env(variables)
    assert env.launcher == "mpi"
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size, env.node_rank) == (
        expected
    )


def test_malformed_values_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="WORLD_SIZE='two'"):
        detect_process_env({"RANK": "0", "WORLD_SIZE": "two"})
    with pytest.raises(ConfigError, match="rank 4 of world size 2"):
        detect_process_env({"RANK": "4", "WORLD_SIZE": "2"})
