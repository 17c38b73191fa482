"""The node's endpoints: each a route that :class:`~hub.server.app.HubServer` mounts.

- :mod:`.consumer`: ``ws /v1/threads/{id}``, consumers (``?since=SEQ&epoch=EPOCH`` to resume)
- :mod:`.agent`: ``ws /v1/threads/{id}/agent``, producers (agents)
- :mod:`.http`: ``GET /v1/threads/{id}``, ``/healthz``, ``/readyz``, ``/metrics``, the demo
- :mod:`.common`: the route interfaces, path parsing, responses, and the handshake's end
"""
