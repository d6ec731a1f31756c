"""The handle a driver keeps on a device declares the device's own methods: the same
arguments (each may also be an ObjectRef of one, as Ray allows) and the same answer."""

import inspect
import typing

from ray import ObjectRef

from ipu_node.card import Card
from ipu_node.device_handle import DeviceHandle

POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def test_every_call_a_handle_declares_is_a_card_method_with_its_arguments_and_answer():
    declared = typing.get_type_hints(DeviceHandle)
    assert {"info", "connect", "run", "put", "get", "stats", "shutdown"} <= set(declared)
    for name, hint in declared.items():
        (remote,) = typing.get_args(hint)
        arguments, answer = typing.get_args(remote)
        method = getattr(Card, name)
        real = typing.get_type_hints(method)
        signature = inspect.signature(method).parameters.values()  # Ray may add keywords
        parameters = [p.name for p in signature if p.name != "self" and p.kind in POSITIONAL]
        if arguments is Ellipsis:  # execute(task, *args): any arguments
            assert any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in signature), name
            continue
        assert len(arguments) == len(parameters), name
        for given, parameter in zip(arguments, parameters):
            assert given in (real[parameter], real[parameter] | ObjectRef[real[parameter]]), \
                (name, parameter)
        assert answer == real["return"], name
