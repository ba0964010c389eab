"""The demo's shared clock (issue 61, 1): the operator reads the time from
the world's file, sleeps on it, and says in its wake file when it is busy
(a daemon awake, an Event not yet posted) or until when it is idle; the
world moves the time on only as far as that says."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memoryguard_kuberay.core import sharedclock
from memoryguard_kuberay.operator.clock import Clock


class Stopped:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        return True


def test_the_files_are_read_back_as_written(tmp_path: Path) -> None:
    sharedclock.write_time(tmp_path / "time", 1796700000.25)
    assert sharedclock.read_time(tmp_path / "time") == 1796700000.25
    sharedclock.write_wake(tmp_path / "wake", None)
    assert sharedclock.read_wake(tmp_path / "wake") is None
    sharedclock.write_wake(tmp_path / "wake", 1796700300.0)
    assert sharedclock.read_wake(tmp_path / "wake") == 1796700300.0
    (tmp_path / "odd").write_text("idle soon")
    assert sharedclock.read_wake(tmp_path / "odd") is None  # not a time: the world waits
    assert sharedclock.read_wake(tmp_path / "missing") is None
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nothing left aside


async def test_a_daemon_sleeps_until_the_world_moves_the_time_on(tmp_path: Path) -> None:
    time_file, wake = tmp_path / "time", tmp_path / "wake"
    sharedclock.write_time(time_file, 1000.0)
    clock = Clock(900.0, shared=time_file, wake=wake)
    assert clock.now() == 1000.0
    clock.enlist("default/g")
    assert sharedclock.read_wake(wake) is None  # enlisted and awake: busy
    stopped = Stopped()
    sleeper = asyncio.create_task(clock.sleep(300.0, stopped, "default/g"))
    await asyncio.sleep(0.05)
    assert sharedclock.read_wake(wake) == 1300.0 and not sleeper.done()
    sharedclock.write_time(time_file, 1299.0)
    await asyncio.sleep(0.05)
    assert not sleeper.done()  # a wall second is nothing: only the file's time counts
    sharedclock.write_time(time_file, 1300.0)
    await asyncio.wait_for(sleeper, 2)
    assert sharedclock.read_wake(wake) is None  # awake again: its cycle runs, busy


async def test_pending_work_keeps_it_busy_while_the_daemon_sleeps(tmp_path: Path) -> None:
    time_file, wake = tmp_path / "time", tmp_path / "wake"
    sharedclock.write_time(time_file, 0.0)
    clock = Clock(900.0, shared=time_file, wake=wake)
    queued = [1]
    clock.pending.append(lambda: bool(queued))
    clock.enlist("a")
    clock.enlist("b")
    stopped = Stopped()
    a = asyncio.create_task(clock.sleep(60.0, stopped, "a"))
    await asyncio.sleep(0.05)
    assert sharedclock.read_wake(wake) is None  # b awake, an Event queued
    b = asyncio.create_task(clock.sleep(30.0, stopped, "b"))
    await asyncio.sleep(0.05)
    assert sharedclock.read_wake(wake) is None  # both asleep, the Event still queued
    queued.clear()
    await asyncio.sleep(0.05)
    assert sharedclock.read_wake(wake) == 30.0  # the earliest wake
    stopped.event.set()
    await asyncio.wait_for(asyncio.gather(a, b), 2)
    clock.delist("a")
    clock.delist("b")
    assert sharedclock.read_wake(wake) is None  # no daemon: nothing says it is idle


async def test_on_the_wall_clock_a_sleep_is_its_scaled_wall_time() -> None:
    stopped = Stopped()
    await asyncio.wait_for(Clock(1000.0).sleep(10.0, stopped, "a"), 2)  # 10 ms of the wall at 1000x
    slow = asyncio.create_task(Clock(1.0).sleep(10.0, stopped, "b"))
    await asyncio.sleep(0.1)
    assert not slow.done()
    stopped.event.set()
    await asyncio.wait_for(slow, 2)
