"""Python client for agui-hub: a :class:`Consumer` that mirrors a thread, a :class:`Producer`
that publishes AG-UI events to it, :func:`connect` (AG-UI ``connect``: a thread's history and
its open run, as a reloading UI gets them), and :class:`Receipts` that records handoff
receipts."""

from agui_hub_client.agui_connect import connect
from agui_hub_client.consumer import Consumer
from agui_hub_client.errors import (
    ClientError,
    ConnectionLost,
    HandshakeFailed,
    InterruptResolved,
    ProtocolError,
    RunError,
    RunNotSeen,
)
from agui_hub_client.mirror import Mirror, Step
from agui_hub_client.producer import Producer
from agui_hub_client.receipts import Handoff, ReceiptError, Receipts, ReceiptsUndelivered

__all__ = [
    "ClientError",
    "ConnectionLost",
    "Consumer",
    "Handoff",
    "HandshakeFailed",
    "InterruptResolved",
    "Mirror",
    "Producer",
    "ProtocolError",
    "ReceiptError",
    "Receipts",
    "ReceiptsUndelivered",
    "RunError",
    "RunNotSeen",
    "Step",
    "connect",
]
