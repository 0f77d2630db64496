"""The error tree: one class per code, and local errors that refine a coded one."""

from __future__ import annotations

import pytest

import mq.client.types
from mq import errors


def error_classes() -> list[type[errors.MQError]]:
    """Every error class that :mod:`mq.errors` defines."""
    return [
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.MQError)
    ]


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_has_the_name_of_its_code(cls: type[errors.MQError]) -> None:
    """A class with a code of its own is what ``error_for_code`` returns for it; a
    local one (no code of its own) refines the class registered for its code."""
    registered = errors.error_for_code(cls.code)
    assert registered.name == cls.name
    if "code" in vars(cls):
        assert registered is cls
    else:
        assert issubclass(cls, registered)


def test_the_client_errors_live_in_the_tree_and_where_they_used_to() -> None:
    assert mq.client.types.ClientStateError is errors.ClientStateError
    assert mq.client.types.BrokerUnavailableError is errors.BrokerUnavailableError
    # An open circuit breaker is a network failure: retriable, NETWORK_EXCEPTION.
    assert issubclass(errors.BrokerUnavailableError, errors.NetworkError)
    assert errors.BrokerUnavailableError.retriable
    assert errors.BrokerUnavailableError.code == errors.NetworkError.code == 13
    # Calling a stopped client fails the same way until the application changes.
    assert not errors.ClientStateError.retriable
    assert "code" not in vars(errors.ClientStateError)
    assert errors.error_for_code(errors.ClientStateError.code) is errors.MQError
