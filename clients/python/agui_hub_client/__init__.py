"""Python client for agui-hub: a :class:`Consumer` that mirrors a thread, a :class:`Producer`
that publishes AG-UI events to it."""

from agui_hub_client.consumer import Consumer
from agui_hub_client.errors import (
    ClientError,
    ConnectionLost,
    HandshakeFailed,
    ProtocolError,
    RunError,
)
from agui_hub_client.mirror import Mirror, Step
from agui_hub_client.producer import Producer

__all__ = [
    "ClientError",
    "ConnectionLost",
    "Consumer",
    "HandshakeFailed",
    "Mirror",
    "Producer",
    "ProtocolError",
    "RunError",
    "Step",
]
