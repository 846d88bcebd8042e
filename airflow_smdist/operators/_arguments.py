"""Operator arguments derived from the request builders' argument dataclasses (written once, in ``specs/``;
operators read them as the plain data of :mod:`airflow_smdist.specs.arguments`, which has the same ``name``,
``default`` and ``type`` attributes as a ``dataclasses.Field``).

An operator declares only its own arguments and ``**kwargs``; :func:`with_arguments` gives its ``__init__``
the signature it really has (its own arguments plus the builder's, with their defaults), which Airflow reads
for ``default_args``, required arguments and ``partial``/``expand`` (as do ``help()`` and IDEs), and
:func:`take_arguments` pops the builder's arguments from ``kwargs`` for the operator to keep as attributes
(and template fields).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def with_arguments(fields: Sequence[Any], defaults: dict[str, Any] | None = None
                   ) -> Callable[[_F], _F]:
    """Decorate ``__init__(self, *, <own arguments>, **kwargs)`` with the builder's ``fields`` (operator
    ``defaults`` replacing the builder's where given)."""
    defaults = defaults or {}

    def decorate(init: _F) -> _F:
        own = inspect.signature(init)
        params = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in params}
        for f in fields:
            if f.name in taken:
                continue
            default = defaults.get(f.name, f.default)
            params.append(inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
                default=inspect.Parameter.empty if default is dataclasses.MISSING else default))
        params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation="Any"))
        init.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        return init

    return decorate


def take_arguments(kwargs: dict[str, Any], fields: Sequence[Any],
                   defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pop the builder's arguments from an operator's ``kwargs`` (the rest go to BaseOperator), with the
    operator's ``defaults`` (else the builder's) for those not given."""
    defaults = defaults or {}
    out = {}
    for f in fields:
        if f.name in kwargs:
            out[f.name] = kwargs.pop(f.name)
        elif f.name in defaults:
            out[f.name] = defaults[f.name]
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        else:
            raise TypeError(f"missing keyword argument {f.name!r}")
    return out
