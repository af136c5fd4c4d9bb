"""Zero-copy publish/subscribe of Arrow record batches between processes.

A ``Publisher`` owns a channel; ``Subscriber`` objects in other processes
receive ``ferry.RecordBatch`` objects whose buffers are the publisher's shared
memory (read-only), so pyarrow, polars and duckdb read them without a copy.
``Publisher.loan`` lends shared memory that Python fills in place, and
``send_loans`` sends it without copying; ``send`` accepts any Arrow batch
(pyarrow, polars, ferry) and copies only what is not in shared memory yet.
"""

from ferry._ferry.flow import CONTINUE, STOP, Loan, Message, Node, Publisher, Subscriber

__all__ = ["CONTINUE", "STOP", "Loan", "Message", "Node", "Publisher", "Subscriber"]
