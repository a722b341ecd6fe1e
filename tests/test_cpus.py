import os

import pytest

from xmcbench import cpus
from xmcbench.cpus import cgroup_cpu_quota, cpu_threads, usable_cpus
from xmcbench.sweep.launch import thread_budget


@pytest.fixture
def cgroups(tmp_path, monkeypatch):
    """A fake cgroup v2 tree for this process: /sys/fs/cgroup/job/step, and its /proc/self/cgroup."""
    root, proc = tmp_path / "cgroup", tmp_path / "proc-self-cgroup"
    (root / "job" / "step").mkdir(parents=True)
    proc.write_text("0::/job/step\n")
    monkeypatch.setattr(cpus, "_PROC_CGROUP", proc)
    monkeypatch.setattr(cpus, "_CGROUP_ROOT", root)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return root, proc


def test_the_tightest_quota_over_the_cgroup_and_its_parents_caps_the_cpus(cgroups):
    root, proc = cgroups
    assert usable_cpus() == 8  # no cpu.max anywhere: no quota
    (root / "job" / "step" / "cpu.max").write_text("max 100000\n")
    assert usable_cpus() == 8
    (root / "job" / "cpu.max").write_text("300000 100000\n")  # the job's quota binds its steps
    assert usable_cpus() == 3
    (root / "job" / "step" / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: two threads
    assert usable_cpus() == 2
    (root / "job" / "step" / "cpu.max").write_text("50000 100000\n")  # half a CPU still gets one
    assert usable_cpus() == 1
    (root / "job" / "step" / "cpu.max").write_text("5000000 100000\n")  # above the CPUs: no change
    assert usable_cpus() == 3
    for damaged in ("", "lots 100000", "100000", "100000 0", "-1 100000"):
        (root / "job" / "cpu.max").write_text(damaged)
        assert usable_cpus() == 8, damaged


def test_a_container_reads_its_own_root_and_cgroup_v1_or_no_proc_means_no_quota(cgroups):
    root, proc = cgroups
    (root / "cpu.max").write_text("200000 100000\n")
    proc.write_text("0::/\n")  # a cgroup namespace: the container's cgroup is the root it sees
    assert cgroup_cpu_quota(proc, root) == 2 and usable_cpus() == 2
    proc.write_text("12:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n")
    assert cgroup_cpu_quota(proc, root) is None and usable_cpus() == 8
    proc.unlink()
    assert usable_cpus() == 8


def test_usable_cpus_follow_the_affinity_not_the_host(cgroups, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cpus() == 1


def test_omp_num_threads_is_the_budget_when_it_is_a_positive_integer(cgroups, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads() == 3
    for ignored in ("lots", "0", "-2", "1.5", "", "\u00b2"):
        monkeypatch.setenv("OMP_NUM_THREADS", ignored)
        assert cpu_threads() == 8, ignored


def test_a_sweep_splits_the_same_budget_between_its_jobs(cgroups, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)  # the host's count: not this process's to use
    assert [thread_budget(jobs) for jobs in (1, 2, 3, 16)] == [8, 4, 2, 1]
    root, _ = cgroups
    (root / "job" / "cpu.max").write_text("400000 100000\n")
    assert [thread_budget(jobs) for jobs in (1, 2, 3)] == [4, 2, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    assert [thread_budget(jobs) for jobs in (1, 2, 4)] == [6, 3, 1]


def test_cpu_identity_reads_the_first_cpu_of_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    first = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
    first += "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 2\nflags\t\t: fpu avx2 avx512_bf16\n"
    cpuinfo.write_text(first + "\nprocessor\t: 1\nmodel name\t: Another CPU\nmodel\t\t: 1\n")
    monkeypatch.setattr(cpus, "_PROC_CPUINFO", cpuinfo)
    assert cpus.cpu_identity() == {
        "vendor_id": "GenuineIntel",
        "cpu family": "6",
        "model": "207",
        "model name": "Intel(R) Xeon(R) Processor",
        "stepping": "2",
        "flags": "fpu avx2 avx512_bf16",
    }
    monkeypatch.setattr(cpus, "_PROC_CPUINFO", tmp_path / "absent")
    assert cpus.cpu_identity() == {}
