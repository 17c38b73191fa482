"""What travels on the wire: AG-UI events, hub control frames, and their encodings."""
