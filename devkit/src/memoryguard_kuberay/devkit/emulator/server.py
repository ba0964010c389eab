"""The emulated API served over HTTP with the real server's request body
limit. kmock serves through aiohttp, whose requests take at most 1 MiB; a
real kube-apiserver takes request bodies up to 3 MiB (``MaxRequestBodyBytes``)
and then judges the object (a ConfigMap over 1 MiB is a 422, not a 413), so
the emulator takes 3 MiB too."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp.test_utils
import aiohttp.web_request
import aiohttp.web_runner
import aiohttp.web_server
import kmock

MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024


class _RealBodyLimit(aiohttp.test_utils.RawTestServer):
    async def _make_runner(self, debug: bool = True, **kwargs: Any) -> aiohttp.web_runner.ServerRunner:
        srv = aiohttp.web_server.Server(self._handler, loop=self._loop, debug=debug, **kwargs)

        def request(message: Any, payload: Any, protocol: Any, writer: Any,
                    task: asyncio.Task[None]) -> aiohttp.web_request.BaseRequest:
            return aiohttp.web_request.BaseRequest(message, payload, protocol, writer, task, srv._loop,
                                                   client_max_size=MAX_REQUEST_BODY_BYTES)

        srv.request_factory = request
        return aiohttp.web_runner.ServerRunner(srv, debug=debug, **kwargs)


def EmulatorServer(handler: kmock.RawHandler, *, host: str = "127.0.0.1") -> kmock.Server:
    """``kmock.Server`` with the real API server's 3 MiB request body limit
    (its server class is an attrs field: given, not overridden)."""
    return kmock.Server(handler, host=host, server_cls=_RealBodyLimit)
