"""Leader election on a Lease (leader.py) against the emulated API, on a
clock the test moves: one holder; a standby takes over only after the
holder has not renewed for the Lease's duration, as the standby saw it; a
holder that cannot renew stops; a clean exit hands over at once."""

from __future__ import annotations

from memoryguard_kuberay.devkit.emulator.api import EmulatedApi
from memoryguard_kuberay.devkit.emulator.server import EmulatorServer
from memoryguard_kuberay.operator.kube import Credentials, Kube
from memoryguard_kuberay.operator.leader import LeaderElector, LeaseConfig


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def test_one_holder_and_a_takeover_only_after_the_lease_ran_out() -> None:
    api = EmulatedApi()
    async with api, EmulatorServer(api) as server:
        kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
        try:
            clock_a, clock_b = Clock(), Clock()
            a = LeaderElector(kube, LeaseConfig("default", "memoryguard-operator", "a"), clock=clock_a)
            b = LeaderElector(kube, LeaseConfig("default", "memoryguard-operator", "b"), clock=clock_b)
            assert await a.try_acquire_or_renew()
            assert not await b.try_acquire_or_renew()
            # A renews: b sees the record change and keeps waiting.
            clock_a.t += 10
            clock_b.t += 10
            assert await a.try_acquire_or_renew()
            assert not await b.try_acquire_or_renew()
            # A is gone (no renewal): not yet expired 14 s after b saw the last change...
            clock_b.t += 14
            assert not await b.try_acquire_or_renew()
            # ... taken over past the 15 s duration.
            clock_b.t += 2
            assert await b.try_acquire_or_renew()
            lease = api.get("leases", "default", "memoryguard-operator")
            assert lease is not None and lease["spec"]["holderIdentity"] == "b"
            assert lease["spec"]["leaseTransitions"] == 1
            # A, back, cannot renew: the Lease is b's now.
            assert not await a.try_acquire_or_renew()
            # A clean exit gives the Lease up: a takes it at once.
            await b.release()
            assert await a.try_acquire_or_renew()
        finally:
            await kube.close()


async def test_a_holder_that_cannot_renew_stops_within_the_deadline() -> None:
    api = EmulatedApi()
    async with api, EmulatorServer(api) as server:
        kube = Kube(Credentials(server=f"http://127.0.0.1:{server.port}", token="t"), timeout_s=5)
        try:
            clock = Clock()
            cfg = LeaseConfig("default", "memoryguard-operator", "a", renew_s=0.01)
            a = LeaderElector(kube, cfg, clock=clock)
            assert await a.try_acquire_or_renew()
            from memoryguard_kuberay.devkit.emulator.api import ApiError

            def fail(_: object) -> ApiError:
                clock.t += 3  # every failed renewal costs 3 s of the deadline
                return ApiError(503, "ServiceUnavailable", "down")

            api.faults.append(fail)
            await a.hold()  # returns: the caller must stop acting
            assert clock.t - a.last_renewed > cfg.renew_deadline_s
        finally:
            await kube.close()
