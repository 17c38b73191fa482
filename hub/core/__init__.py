"""The sans-I/O core: pure state machines, no asyncio, no sockets, no stores."""
