"""Server side Flower adapter of coded-fl (the Strategy wrapper).

Public surface: see ``__all__``. Filled by the Flower integration; nothing else is exported.
"""

__all__: list[str] = []
