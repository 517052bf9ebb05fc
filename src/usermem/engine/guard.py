"""Identifier guards on every public `Memory` method, by parameter name (issue 12 item 5).

Each parameter named in `policy.validate.PARAMETER_CHECKS` (tenant, user_id, actor, change_set_id, key,
domain, fields, purpose...) is checked before the method runs — for every operation, present and future:
no personal data, no control characters or lone surrogates, the key pattern for keys. A refusal is a
`ValidationError` naming the parameter (`InvalidArgument` for a wrong type), raised before anything is
read, written or audited, and it never repeats the refused value.

The write request fields of `write` (key, session_id, client_id) are left to the write pipeline, which
answers REJECT invalid_input for them (a batch's other writes go on).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from usermem.errors import InvalidArgument, ValidationError
from usermem.policy.validate import PARAMETER_CHECKS, InputProblem, check_parameter, is_reserved_tenant

C = TypeVar("C", bound=type)

# method → parameters its own pipeline judges (a write request's fields answer REJECT, not an exception)
PIPELINE_JUDGED: dict[str, frozenset[str]] = {"write": frozenset({"key", "session_id", "client_id"})}
# methods that may read usermem's own records under a reserved tenant ("*": purge audit entries)
SYSTEM_TENANT_READS = frozenset({"audit"})


def _guarded(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    params = list(inspect.signature(method).parameters.values())[1:]  # without self
    skip = PIPELINE_JUDGED.get(name, frozenset())
    checked = [(i, p.name, p.kind is inspect.Parameter.KEYWORD_ONLY) for i, p in enumerate(params)
               if p.name in PARAMETER_CHECKS and p.name not in skip]
    if not checked:
        return method
    system_reads = name in SYSTEM_TENANT_READS

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            for i, pname, kw_only in checked:
                if not kw_only and i < len(args):
                    value = args[i]
                    if system_reads and pname == "tenant" and isinstance(value, str) and is_reserved_tenant(value):
                        continue
                    out = check_parameter(pname, value)
                    if out is not value:
                        args = (*args[:i], out, *args[i + 1:])
                elif pname in kwargs:
                    value = kwargs[pname]
                    if system_reads and pname == "tenant" and isinstance(value, str) and is_reserved_tenant(value):
                        continue
                    out = check_parameter(pname, value)
                    if out is not value:
                        kwargs[pname] = out
        except TypeError as exc:
            raise InvalidArgument(str(exc)) from None
        except InputProblem as exc:
            raise ValidationError(str(exc), field=exc.field) from None
        return method(self, *args, **kwargs)

    return wrapper


def guard_parameters(cls: C) -> C:
    """Class decorator: wrap every public method of `cls` that takes a parameter named in PARAMETER_CHECKS."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        setattr(cls, name, _guarded(name, member))
    return cls
