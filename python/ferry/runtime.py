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
    return instance


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
