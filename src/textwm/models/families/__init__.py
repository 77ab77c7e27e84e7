"""Model families: the family contract (:class:`ModelFamily`) and its registry; one module per family.

    from textwm.models.families import family_names, get_family
    sdar = get_family("sdar")     # a ModelFamily: objective, decoders, engine rows, checkpoint format, rules

Generic code looks a family up by name (``get_family(spec.family)``) and never imports a family module
(``ar.py``, ``sdar.py``, ``wedlm.py``); each of those holds only what is true of its family. Adding a family:
a module that builds a :class:`ModelFamily` (its objective, reference decoder and engine rows may reuse
another family's), and one line in :data:`~textwm.models.families.registry.BUILTIN` (or a
``register(MY_FAMILY)`` call, as ``tests/models/test_family_registry.py`` does).
"""

from textwm.models.families.contract import ModelFamily
from textwm.models.families.registry import (
    DEFAULT_FAMILY,
    DIFFUSION_FIELD,
    family_names,
    family_of,
    get_family,
    register,
    unregister,
)

__all__ = ["DEFAULT_FAMILY", "DIFFUSION_FIELD", "ModelFamily", "family_names", "family_of", "get_family", "register",
           "unregister"]
