"""``python -m ferry.runtime``: a runtime node with Python operators.

The daemon (``ferry run``) starts this module for every runtime node that has
a Python operator, with ``FERRY_NODE_CONFIG`` and ``FERRY_OPERATORS`` in the
environment (see src/flow/operator/runtime_main.h). Python operators and
shared-library operators run side by side in this one process and pass
batches to each other without copying them.

A Python operator is a script that defines a class ``Operator``::

    import ferry.flow

    class Operator:
        def __init__(self, config):          # or __init__(self): config is optional
            self.scale = config.get("scale", 1)

        def on_event(self, event, send_output):
            if event["type"] == "INPUT":
                batch = event["value"]        # a ferry.RecordBatch (pyarrow reads it as is)
                send_output("out", batch, {"seen": "yes"})
            return ferry.flow.CONTINUE       # or ferry.flow.STOP: this operator is done

``event`` is a dict: ``type`` ("INPUT", "INPUT_CLOSED", "STOP", "ERROR"),
``id`` (the input, or the stop reason), and for INPUT ``value``,
``metadata`` (a dict of strings) and ``sequence``; for ERROR ``error``.
``send_output(output_id, data, metadata=None)`` takes any Arrow record batch
(ferry, pyarrow, polars, ...); a ferry batch on a device stays there.

A dora-rs operator (a script that uses the ``dora`` package, e.g. returns
``DoraStatus.CONTINUE``) gets dora-style events and send_output instead
(docs/dora.md): ``kind``, a pyarrow array ``value``, ``metadata`` with a
``timestamp``, bytes and lists accepted by ``send_output``.
"""

import importlib.util
import inspect
import json
import os
import sys
import traceback

from ferry._ferry import flow as _flow

__all__ = ["build_host", "load_python_operator", "main"]


def load_python_operator(definition):
    """Runs the operator's script and returns its ``Operator`` instance."""
    path = definition["path"]
    name = "ferry_operator_" + definition["id"].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the Python operator script '{path}'")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = getattr(module, "Operator", None)
    if cls is None or not inspect.isclass(cls):
        raise TypeError(f"'{path}' defines no class Operator")
    config = definition.get("config") or {}
    try:
        parameters = [
            p
            for p in inspect.signature(cls).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
    except (TypeError, ValueError):
        parameters = []
    instance = cls(config) if parameters else cls()
    if not callable(getattr(instance, "on_event", None)):
        raise TypeError(f"the Operator of '{path}' has no on_event(event, send_output) method")
    if _uses_dora(module):
        return _DoraOperator(instance)
    return instance


def _uses_dora(module):
    """True for a script written for dora-rs: it imported the dora package
    (``import dora`` or ``from dora import ...``)."""
    for value in vars(module).values():
        if inspect.ismodule(value) and value.__name__ == "dora":
            return True
        if getattr(value, "__module__", None) == "dora":
            return True
    return False


class _DoraOperator:
    """A dora-rs operator on Ferry's operator host: dora-style events in,
    DoraStatus out (STOP and STOP_ALL both end this operator)."""

    def __init__(self, operator):
        import dora  # Ferry's shim: ferry run puts it first on PYTHONPATH

        self._dora = dora
        self._operator = operator

    def on_event(self, event, send_output):
        dora = self._dora
        event["kind"] = "dora"
        if event["type"] == "INPUT":
            event["value"] = dora._dora_value(event["value"])
            event["metadata"] = dora._incoming_metadata(event.get("metadata") or {})

        def dora_send_output(output_id, data, metadata=None):
            send_output(output_id, dora._as_arrow(data), dora._outgoing_metadata(metadata))

        status = self._operator.on_event(event, dora_send_output)
        if status is None or status == dora.DoraStatus.CONTINUE or status == _flow.CONTINUE:
            return _flow.CONTINUE
        if status in (dora.DoraStatus.STOP, dora.DoraStatus.STOP_ALL) or status == _flow.STOP:
            return _flow.STOP
        raise TypeError(f"on_event returned {status!r} (expected a DoraStatus)")


def build_host(definitions, log_errors=True):
    """An OperatorHost with every operator of ``definitions`` (FERRY_OPERATORS
    entries) added and started. Raises on the first one that fails, naming it."""
    host = _flow.OperatorHost(log_errors=log_errors)
    for definition in definitions:
        text = json.dumps(definition)
        if definition["kind"] == "python":
            try:
                instance = load_python_operator(definition)
            except Exception as error:
                raise RuntimeError(
                    f"operator '{definition['id']}': cannot start "
                    f"'{definition['path']}': {type(error).__name__}: {error}"
                ) from error
            host.add(text, instance.on_event)
        else:
            host.add(text)
    return host


def main():
    text = os.environ.get("FERRY_OPERATORS")
    if text is None:
        print(
            "ferry runtime: FERRY_OPERATORS is not set: this module runs a runtime node of a "
            "dataflow; start it with `ferry run dataflow.yml`",
            file=sys.stderr,
        )
        return 2
    try:
        definitions = _flow.parse_operators(text)
    except ValueError as error:
        print(f"ferry runtime: {error}", file=sys.stderr)
        return 2
    try:
        host = build_host(definitions)
    except RuntimeError as error:
        if error.__cause__ is not None:
            traceback.print_exception(error.__cause__)
        print(f"ferry runtime: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"ferry runtime: {error}", file=sys.stderr)
        return 1
    return host.run_node()


if __name__ == "__main__":
    sys.exit(main())
