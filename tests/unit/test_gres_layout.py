"""GRES layout: type names, targeted shard requests and the generated Slurm lines."""

from __future__ import annotations

import pytest

from slurm_colo.gres_layout import (
    NodeGpus,
    compress_indices,
    expand_hostlist,
    gres_conf,
    parse_index_list,
)


def test_type_names_keep_the_model_type_for_exclusive_gpus() -> None:
    ng = NodeGpus("gpu[01-02]", 4, "a100", 80, (0, 1), 4)
    assert [ng.gres_type(i) for i in range(4)] == ["a100_s0", "a100_s1", "a100", "a100"]
    assert ng.shard_request(1) == "gres:shard:a100_s1:1"
    assert ng.index_for_type("a100_s1") == 1 and ng.index_for_type("a100") is None
    assert NodeGpus("n", 2, "", shared=(1,)).gres_type(0) == "excl"


def test_generated_lines() -> None:
    ng = NodeGpus("vm", 4, "v100", 32, (0, 1), 4)
    text = gres_conf([ng])
    assert "NodeName=vm Name=gpu Type=v100_s0 File=/dev/nvidia0" in text
    assert "NodeName=vm Name=gpu Type=v100 File=/dev/nvidia3" in text
    assert "NodeName=vm Name=shard Count=4 File=/dev/nvidia1" in text
    assert "AutoDetect=off" in text
    assert ng.node_gres() == "gpu:v100_s0:1,gpu:v100_s1:1,gpu:v100:2,shard:8"
    assert NodeGpus("vm", 2, "v100", shared=()).node_gres() == "gpu:v100:2"


def test_gpus_are_listed_in_device_index_order_wherever_the_shared_pool_is() -> None:
    """Slurm numbers a node's GPUs in the order of the types in slurm.conf's Gres=: a
    shared pool at the top listed first gave a job placed on GPU 6 the GPU numbered 0."""
    top = NodeGpus("dgx", 8, "a100", 80, (6, 7), 8)
    assert top.node_gres() == "gpu:a100:6,gpu:a100_s6:1,gpu:a100_s7:1,shard:16"
    files = [line.split("File=/dev/nvidia")[1] for line in top.gres_conf_lines() if "=gpu " in line]
    assert files == [str(i) for i in range(8)]
    ends = NodeGpus("n", 4, "v100", 32, (0, 3), 4)
    assert ends.node_gres() == "gpu:v100_s0:1,gpu:v100:2,gpu:v100_s3:1,shard:8"
    assert NodeGpus("n", 2, "v100", 32, (0, 1), 4).type_runs() == [("v100_s0", 1), ("v100_s1", 1)]


@pytest.mark.parametrize("shared", [(1,), (1, 2), (0, 2)])
def test_a_shared_pool_that_splits_the_whole_gpus_is_refused(shared: tuple[int, ...]) -> None:
    """Slurm adds up a type named twice in Gres= (gpu:v100:1,...,gpu:v100:2 is gpu:v100:3)."""
    with pytest.raises(ValueError, match="splits the whole GPUs .type v100. in two") as e:
        NodeGpus("n", 4, "v100", 32, shared, 4)
    assert "lowest or highest indices" in str(e.value)


@pytest.mark.parametrize(
    "expr,names",
    [
        ("vm", ["vm"]),
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("a[1-2]b,c", ["a1b", "a2b", "c"]),
    ],
)
def test_hostlists(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names


def test_index_lists() -> None:
    assert parse_index_list("0-1,3", 4) == (0, 1, 3)
    assert parse_index_list("", 4) == ()
    assert compress_indices([0, 1, 2, 5]) == "0-2,5"
    with pytest.raises(ValueError):
        parse_index_list("2-1", 4)
    with pytest.raises(ValueError):
        parse_index_list("x", 4)


def test_slurm_s_gres_of_a_node_is_checked_against_the_device_order() -> None:
    """As Slurm 22.05-26.05 report a node's GRES: the types in slurm.conf's Gres= order,
    with socket ranges; a node listed pool first is numbered otherwise than its devices."""
    top = NodeGpus("vm", 4, "v100", 32, (2, 3), 4)
    assert (
        top.gres_mismatch(
            "gpu:v100:2,gpu:v100_s2:1,gpu:v100_s3:1,shard:v100:0,shard:v100_s2:4,shard:v100_s3:4"
        )
        is None
    )
    assert top.gres_mismatch("gpu:V100:2(S:0-1),gpu:v100_s2:1(S:0),gpu:v100_s3:1(S:1)") is None
    why = top.gres_mismatch(
        "gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2,shard:v100_s2:4,shard:v100_s3:4,shard:v100:0"
    )
    assert why is not None
    assert "Slurm lists its GPUs as gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2 " in why
    assert "device index order is gpu:v100:2,gpu:v100_s2:1,gpu:v100_s3:1;" in why
    assert "gpu:4 where" in (top.gres_mismatch("gpu:4,shard:8") or "")  # untyped: not ours
    assert top.gres_mismatch("") is None and top.gres_mismatch("(null)") is None  # unknown
