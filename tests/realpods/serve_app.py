"""The real-pod tier's Ray Serve application (issue 64): the smallest a
RayService serves, so that KubeRay's RayService runs as it does for users
(its applications deployed through the head's dashboard, its health read)."""

from ray import serve


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class Echo:
    async def __call__(self, request) -> str:  # type: ignore[no-untyped-def]
        return "ok"


app = Echo.bind()
