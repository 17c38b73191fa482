"""The hub's receipt model (``model.py`` is ``hub/receipts/model.py``), without the rest of
:mod:`hub.receipts` (its store, board and classifier stay in the hub)."""
