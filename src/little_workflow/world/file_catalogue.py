"""Where file and object-store Worlds' catalogue lived before it joined the catalogue's
rooms (`world/catalogue/files.py`): its names, for code that imports them here."""

from .catalogue.files import FileCatalogue

__all__ = ["FileCatalogue"]
