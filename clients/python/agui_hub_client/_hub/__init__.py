"""The hub's pure code, carried inside the client: a private copy of what the client runs of
the hub, so that a consumer holds exactly what the hub holds without installing the hub.

``core``, ``wire`` and ``errors.py`` here are the hub's own ``hub/core``, ``hub/wire`` and
``hub/errors.py`` (symlinks in the repository, files in the client's wheel and sdist), and
``receipts/model.py`` is ``hub/receipts/model.py``: one copy of the source, two import names.
They import one another only relatively, so the same files are ``hub.core.patch`` in the hub
and ``agui_hub_client._hub.core.patch`` here (``tests/test_layers.py`` holds that rule).

Private: import the client's own names (``agui_hub_client``, ``agui_hub_client.errors``), not
these. An exception the client raises from this code is this copy's class (for example
``agui_hub_client._hub.errors.LimitExceeded``), which is not ``hub.errors.LimitExceeded`` even
where both are installed: catch the names :mod:`agui_hub_client.errors` exports.
"""
