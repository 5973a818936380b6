"""The exceptions the data source raises; each message says what to change.

* :class:`OptionError` (a ``ValueError``): a source option is missing, malformed or not
  allowed; ``option`` holds its name. Raised while the query is planned.
* :class:`OffsetResolutionError` (a ``ValueError``): the options are well formed but do
  not fit the topic as it is now (a per-partition map that does not name every
  partition, a timestamp no record reaches with strategy ``error``, an offset past the
  log end offset).
* :class:`DataLossError` (a ``RuntimeError``): records the query needs are gone
  (retention, DeleteRecords, a deleted topic or partition) and ``failOnDataLoss`` is
  true. With ``failOnDataLoss=false`` the same condition is logged as
  ``data_loss_skipped`` and reading continues at the log start offset.
* :class:`FetchError` (a ``RuntimeError``): a task could not read its range from the
  broker (connection lost for longer than the poll timeout, an error code with no
  recovery, a corrupt record batch).
* :class:`SinkError` (a ``RuntimeError``): a sink task could not write its rows: a row
  the sink cannot turn into a record, a record the broker or the producer client
  refused, a transaction that could not commit. The message names the row (its index
  among the task's rows and its Spark partition) and the error.
"""

from __future__ import annotations

DATA_LOSS_HINT_FAIL = (
    'Some data may have been lost because they are not available in Kafka any more; either the '
    'data was aged out by Kafka or the topic may have been deleted before all the data in the '
    'topic was processed. If you don\'t want your streaming query to fail on such cases, set the '
    'source option "failOnDataLoss" to "false".')

DATA_LOSS_HINT_SKIP = (
    'Some data may have been lost because they are not available in Kafka any more; either the '
    'data was aged out by Kafka or the topic may have been deleted before all the data in the '
    'topic was processed. If you want your streaming query to fail on such cases, set the source '
    'option "failOnDataLoss" to "true".')


class OptionError(ValueError):
    """A source option is missing, malformed or not allowed here. ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


class OffsetResolutionError(ValueError):
    """The options cannot be resolved to offsets on the topic as it is now."""

    def __init__(self, option: str | None, message: str) -> None:
        super().__init__(message)
        self.option = option


class DataLossError(RuntimeError):
    """Records the query needs are no longer in the log and failOnDataLoss is true."""


class FetchError(RuntimeError):
    """A task could not read its offset range."""


class SinkError(RuntimeError):
    """A sink task could not write its rows; the message names the row and the error."""
