"""Workspace config: inventory parsing (local default, ssh hosts with named GPU slots) and its errors."""

import pytest

from a3r.config import CONFIG_FILE, HostSpec, SchedulerConfig, WorkspaceConfig, host_has_gpu, local_host
from a3r.exceptions import ConfigError
from a3r.hosts.ssh import SshHost

YAML = """
hosts:
  - {name: local, slots: 2}
  - name: gpu-a
    kind: ssh
    address: me@10.0.0.7
    workdir: /scratch/a3r
    slots: [{name: gpu0, gpus: "0"}, {name: gpu1, gpus: "1"}]
scheduler:
  heartbeat_s: 2
"""


def test_default_is_one_local_slot(tmp_path):
    cfg = WorkspaceConfig.load(tmp_path / CONFIG_FILE)
    assert [(h.name, h.kind, [s.name for s in h.slots]) for h in cfg.hosts] == [("local", "local", ["0"])]
    assert cfg.scheduler.stale_after == 20 and cfg.scheduler.tick == 2.5


def test_inventory_yaml(tmp_path):
    (tmp_path / CONFIG_FILE).write_text(YAML)
    cfg = WorkspaceConfig.load(tmp_path / CONFIG_FILE)
    assert [s.name for s in cfg.host("local").slots] == ["0", "1"]
    assert [(s.name, s.gpus) for s in cfg.host("gpu-a").slots] == [("gpu0", "0"), ("gpu1", "1")]
    assert cfg.scheduler.stale_after == 4
    cfg.save(tmp_path / "copy.yaml")
    assert WorkspaceConfig.load(tmp_path / "copy.yaml") == cfg


def test_cpu_slots_split_the_cores_by_thread_count():
    """Two runs side by side on a 2-core host, one thread each: each slot's runs get the thread count in
    the variables torch's intra-op pool reads; a slot without one leaves the libraries' default alone."""
    data = {"hosts": [{"name": "local", "slots": [{"name": "0", "threads": 1}, {"name": "1", "threads": 1}]}]}
    slots = WorkspaceConfig.parse(data).host("local").slots
    assert [s.job_env() for s in slots] == [{"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}] * 2
    assert (
        WorkspaceConfig.parse({"hosts": [{"name": "local", "slots": 2}]}).host("local").slots[0].job_env()
        == {}
    )
    gpu = WorkspaceConfig.parse(
        {"hosts": [{"name": "g", "slots": [{"name": "gpu0", "gpus": "0", "threads": 4}]}]}
    )
    assert gpu.host("g").slots[0].job_env() == {
        "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "4",
        "MKL_NUM_THREADS": "4",
    }


def test_a_new_campaigns_local_host_is_one_1_thread_slot_per_core_on_a_cpu():
    """What `a3r research`, `a3r demo` and `a3r plan` create: C slots of 1 thread on a C-core CPU host (two
    1-thread runs did 1.27x the runs per hour of one 2-thread run on the 2-core host); one slot on a GPU
    host; `--slots N` splits the cores over N slots."""
    cpu = WorkspaceConfig(hosts=[local_host(cores=2, gpu=False, memory_gib=24)])
    assert [(s.name, s.threads) for s in cpu.host("local").slots] == [("0", 1), ("1", 1)]
    assert (cpu.slots, cpu.slot_threads) == (2, 1)
    assert [s.threads for s in local_host(cores=8, gpu=False, memory_gib=64).slots] == [1] * 8
    # memory caps the default at one slot per SLOT_MEMORY_GIB (4): 8 cores with 12 GiB get 3 slots, the
    # cores split over them; an explicit --slots is the user's call and is not capped
    assert [s.threads for s in local_host(cores=8, gpu=False, memory_gib=12).slots] == [2, 2, 2]
    assert [s.threads for s in local_host(cores=2, gpu=False, memory_gib=3).slots] == [2]
    assert len(local_host(8, cores=8, gpu=False, memory_gib=3).slots) == 8
    gpu = WorkspaceConfig(hosts=[local_host(cores=16, gpu=True)])
    assert (gpu.slots, gpu.slot_threads) == (1, None) and gpu.host("local").slots[0].job_env() == {}
    assert [s.threads for s in local_host(1, cores=2, gpu=False).slots] == [2]
    assert [s.threads for s in local_host(3, cores=8, gpu=True).slots] == [2, 2, 2]
    assert [s.threads for s in local_host(4, cores=2).slots] == [1] * 4  # never below one thread
    mixed = WorkspaceConfig.parse({"hosts": [{"name": "a", "slots": [{"name": "0", "threads": 1}, {"name": "1"}]}]})
    assert (mixed.slots, mixed.slot_threads) == (2, None)


def test_a_gpu_is_seen_by_its_device_node(tmp_path):
    assert not host_has_gpu(tmp_path)
    (tmp_path / "nvidiactl").touch()
    assert not host_has_gpu(tmp_path)  # the control node alone is no GPU
    (tmp_path / "nvidia0").touch()
    assert host_has_gpu(tmp_path)


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"hosts": [{"name": "g", "kind": "ssh", "workdir": "/x"}]}, "needs `address"),
        ({"hosts": [{"name": "g", "kind": "ssh", "address": "h", "workdir": "rel"}]}, "absolute `workdir`"),
        ({"hosts": [{"name": "a"}, {"name": "a"}]}, "unique"),
        ({"hosts": [{"name": "a", "slots": 0}]}, "slots must be >= 1"),
        ({"hosts": [{"name": "a", "slots": ["x", "x"]}]}, "slot names must be unique"),
        ({"scheduler": {"heartbeat_s": 1, "stale_after_s": 1}}, "must exceed heartbeat_s"),
        ({"hosts": []}, "hosts"),
        ({"hosts": [{"name": "a", "slots": [{"name": "0", "threads": 0}]}]}, "greater than or equal to 1"),
    ],
)
def test_errors(data, needle):
    with pytest.raises(ConfigError) as e:
        WorkspaceConfig.parse(data)
    assert needle in str(e.value)


@pytest.mark.parametrize("address", ["-oProxyCommand=true", "-p2222", "me@host -oX=y"])
def test_an_ssh_address_cannot_become_an_ssh_option(address):
    """hosts.yaml's address is passed to ssh as an argument: '-oProxyCommand=...' would run a command."""
    data = {"hosts": [{"name": "g", "kind": "ssh", "address": address, "workdir": "/x"}]}
    with pytest.raises(ConfigError) as e:
        WorkspaceConfig.parse(data)
    assert "hosts.0.address" in str(e.value) and "[user@]host" in str(e.value)


def test_ssh_argv_ends_options_before_the_address():
    host = SshHost(
        HostSpec(name="g", kind="ssh", address="me@h", workdir="/x"), socket="s", workspace_key="k"
    )
    assert host.ssh_argv("true")[-3:] == ["--", "me@h", "true"]


def test_unknown_host_lists_known():
    with pytest.raises(ConfigError, match="known: \\['local'\\]"):
        WorkspaceConfig().host("nope")


def test_frozen_specs():
    with pytest.raises(ValueError):
        HostSpec(name="x").name = "y"
    assert SchedulerConfig(heartbeat_s=0.5).stale_after == 1.0
