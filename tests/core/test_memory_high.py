"""memory.high (cgroup v2; issue 39 item 3, seen on a real kernel in issue
40): a pod held at memory.high stalls (PSI full) by design and is never
OOM-killed there, so its pressure is no reason to rotate; a leak under
memory.high, slowed by the throttling, still reaches memory.max and is
caught before it."""

from __future__ import annotations

from memoryguard_kuberay.core.policy import Reason
from memoryguard_kuberay.core.samples import Sample
from memoryguard_kuberay.core.settings import PolicySettings
from memoryguard_kuberay.core.simulate import replay

GIB = 1 << 30
LIMIT = 8 * GIB
HIGH = 7 * GIB  # below memory.max, as MemoryQoS sets it


def at_high(t: int, *, high: int | None, psi_full: float, used: int) -> Sample:
    return Sample(time_s=float(t), memory_current_bytes=used, memory_max_bytes=LIMIT, anon_bytes=used - GIB // 16,
                  file_bytes=GIB // 16, inactive_file_bytes=GIB // 32, shmem_bytes=0, psi_some_avg10_pct=psi_full,
                  psi_full_avg10_pct=psi_full, oom_kill_count=0, memory_high_bytes=high)


def test_pressure_at_memory_high_is_not_a_reason_to_rotate() -> None:
    # Six hours held at memory.high with 40% of the time stalled, flat.
    held = [at_high(t, high=HIGH, psi_full=40.0, used=HIGH - GIB // 64) for t in range(0, 6 * 3600, 30)]
    assert replay("at-high", held, PolicySettings()).first_rotation_s is None
    # The same stalls with no memory.high: the pressure rule rotates, as before.
    same = [at_high(int(s.time_s), high=None, psi_full=40.0, used=HIGH - GIB // 64) for s in held]
    result = replay("no-high", same, PolicySettings())
    assert result.first_rotation_s is not None
    assert {td.decision.reason for td in result.decisions} & {Reason.MEMORY_PRESSURE}


def test_a_leak_under_memory_high_is_caught_before_memory_max() -> None:
    # Throttled at memory.high, the leak still grows 150 MiB/h toward the limit.
    rate_per_s = 150 * (1 << 20) / 3600
    samples = []
    for t in range(0, 14 * 3600, 30):
        used = int(HIGH - GIB // 8 + rate_per_s * t)
        if used >= LIMIT:
            break
        samples.append(at_high(t, high=HIGH, psi_full=50.0, used=used))
    oom_at = samples[-1].time_s
    result = replay("leak-under-high", samples, PolicySettings())
    assert result.first_rotation_s is not None and result.first_rotation_s < oom_at - 1800, result.decisions[:3]


def test_a_guards_pressure_percent_is_a_percent() -> None:
    # PSI is a percent in the guard and in the policy alike: 10 is 10%, not
    # 0.1% (read as a fraction until this test, with a CRD default of 1000).
    assert PolicySettings.from_spec({"policy": {"pressureFullPercent": 10}}).pressure_full_pct == 10.0
    assert PolicySettings.from_spec({"policy": {"pressureMinUsagePercent": 85}}).pressure_min_usage_fraction == 0.85


def test_a_pod_held_at_a_memory_high_above_critical_is_not_rotated_unless_the_guard_says_so() -> None:
    # MemoryQoS with a low request puts memory.high at 95% of the limit: a
    # pod living there reads 97% in use for hours, held by the kernel.
    high = int(LIMIT * 0.95)

    def held(t: int, used: int) -> Sample:
        return Sample(time_s=float(t), memory_current_bytes=used + GIB // 64, memory_max_bytes=LIMIT,
                      anon_bytes=used, file_bytes=GIB // 64, inactive_file_bytes=0, shmem_bytes=0,
                      psi_some_avg10_pct=30.0, psi_full_avg10_pct=20.0, oom_kill_count=0, memory_high_bytes=high)

    at_high_97 = [held(t, int(LIMIT * 0.97)) for t in range(0, 6 * 3600, 30)]
    assert replay("held", at_high_97, PolicySettings()).first_rotation_s is None
    judged_as_any = PolicySettings.from_spec({"policy": {"memoryHighHolds": False}})
    result = replay("held-any", at_high_97, judged_as_any)
    assert result.first_rotation_s is not None
    assert result.decisions[-1].decision.reason in (Reason.CRITICAL_USAGE, Reason.MEMORY_PRESSURE)
    # Past halfway from memory.high to memory.max it is escaping the throttle: critical as before.
    escaping = [held(t, int(LIMIT * 0.985)) for t in range(0, 6 * 3600, 30)]
    result = replay("escaping", escaping, PolicySettings())
    assert result.first_rotation_s is not None and result.decisions[-1].decision.reason is Reason.CRITICAL_USAGE
