"""Schemathesis hooks for test_openapi.py (loaded through SCHEMATHESIS_HOOKS).

The long polls of the API may wait for events that never come in the test:
`GET /v1/jobs/{id}/logs?follow=true&wait_ms=N` up to 30 s,
`POST /v1/agent/sync?wait_ms=N` up to lease/2, `GET /v1/jobs:watch?since=S`
up to `timeout_s` (60 s). Valid waits are cut to 200 ms (a watch's to 0 s),
and set so where a request leaves the default, so that a bounded run stays
bounded. Values outside the documented range are sent as generated: the
server must still refuse them at once."""

import schemathesis

# What a valid wait is cut to, and the largest valid value per operation.
WAITS = {"wait_ms": 200, "timeout_s": 0}
MAXIMA = {"/logs": {"wait_ms": 30_000}, "/v1/agent/sync": {"wait_ms": 2**61 - 1},
          ":watch": {"timeout_s": 60}}


@schemathesis.hook
def before_call(context, case, kwargs):
    query = case.query
    if not isinstance(query, dict):
        return
    for suffix, maxima in MAXIMA.items():
        if not case.operation.path.endswith(suffix):
            continue
        for name, maximum in maxima.items():
            if name not in query:  # the default waits too (10 s, 25 s)
                query[name] = WAITS[name]
                continue
            value = query[name]
            # The coverage phase sends values as the strings they are on the wire.
            if isinstance(value, str) and value.isascii() and value.isdigit():
                number = int(value)
            elif isinstance(value, int) and not isinstance(value, bool):
                number = value
            else:
                continue
            if WAITS[name] < number <= maximum:
                query[name] = str(WAITS[name]) if isinstance(value, str) else WAITS[name]
