"""agui-hub: a real-time state hub for AG-UI agents."""

__version__ = "0.1.0"
