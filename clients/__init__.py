"""Client side Flower adapter of coded-fl (the ClientApp mod).

Public surface: see ``__all__``. Filled by the Flower integration; nothing else is exported.
"""

__all__: list[str] = []
