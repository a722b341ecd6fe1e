import os

import pytest

from xmcbench.cpus import cpu_threads, usable_cpus
from xmcbench.sweep.launch import thread_budget


@pytest.fixture
def cpu_max(tmp_path):
    return tmp_path / "cpu.max"


def test_usable_cpus_are_the_schedulable_ones_capped_by_a_cgroup_quota(cpu_max):
    schedulable = len(os.sched_getaffinity(0))
    assert usable_cpus(cpu_max) == schedulable  # no cpu.max: no quota
    cpu_max.write_text("max 100000\n")
    assert usable_cpus(cpu_max) == schedulable
    cpu_max.write_text("50000 100000\n")  # half a CPU still gets one thread
    assert usable_cpus(cpu_max) == 1
    cpu_max.write_text(f"{(schedulable + 3) * 100000} 100000\n")  # a quota above the CPUs changes nothing
    assert usable_cpus(cpu_max) == schedulable
    for damaged in ("", "lots 100000", "100000", "100000 0"):
        cpu_max.write_text(damaged)
        assert usable_cpus(cpu_max) == schedulable


def test_usable_cpus_follow_the_affinity_not_the_host(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cpus() == 1


def test_omp_num_threads_is_the_budget_when_it_is_a_positive_integer(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads() == 3
    for ignored in ("lots", "0", "-2", "1.5", ""):
        monkeypatch.setenv("OMP_NUM_THREADS", ignored)
        assert cpu_threads() == usable_cpus()
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpu_threads() == usable_cpus()


def test_a_sweep_splits_the_same_budget_between_its_jobs(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)  # the host's count: not this process's to use
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [thread_budget(jobs) for jobs in (1, 2, 3, 8)] == [usable_cpus(), usable_cpus() // 2, 1, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert [thread_budget(jobs) for jobs in (1, 2, 3, 16)] == [8, 4, 2, 1]
