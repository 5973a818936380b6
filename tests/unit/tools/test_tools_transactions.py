"""``sundial transactions``: the pure parts (state names, Kafka's find-hanging filter) and the
command line's usage errors (exit 2), which are decided before any connection."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st
from kafka import TopicPartition

from sundial.cli import build_parser, main
from sundial.tools.common import EXIT_USAGE, ToolError
from sundial.tools.transactions import STATES, OpenTransaction, candidate_open_transactions, hanging, \
    hanging_rows, parse_states


# -- --state ------------------------------------------------------------------------------------
@pytest.mark.parametrize("given_names, expected", [
    (["ongoing"], ["Ongoing"]),
    (["ONGOING", "prepareabort"], ["Ongoing", "PrepareAbort"]),
    (["completecommit,CompleteAbort"], ["CompleteCommit", "CompleteAbort"]),
    (["Empty", "empty"], ["Empty"]),
    ([], []),
])
def test_states_match_in_any_case(given_names, expected):
    assert parse_states(given_names) == expected


@given(st.sampled_from(STATES), st.lists(st.booleans(), min_size=1, max_size=20))
def test_every_casing_of_every_state_is_accepted(state, uppers):
    mixed = "".join(c.upper() if uppers[i % len(uppers)] else c.lower() for i, c in enumerate(state))
    assert parse_states([mixed]) == [state]


def test_unknown_state_is_a_usage_error_listing_the_valid_ones():
    with pytest.raises(ToolError) as err:
        parse_states(["Ongoing", "running"])
    assert err.value.exit_code == EXIT_USAGE
    assert "'running'" in str(err.value)
    for state in STATES:
        assert state in str(err.value)


# -- find-hanging --------------------------------------------------------------------------------
def _producer(pid, start, last_ts, epoch=0, coordinator_epoch=-1):
    return SimpleNamespace(producer_id=pid, producer_epoch=epoch, last_sequence=0, last_timestamp=last_ts,
                           coordinator_epoch=coordinator_epoch, current_transaction_start_offset=start)


def test_candidates_are_open_transactions_idle_longer_than_the_timeout():
    now = 10_000_000
    states = {
        TopicPartition("t", 0): SimpleNamespace(active_producers=[
            _producer(1, 5, now - 60_001),          # open, idle 60.001 s: a candidate for a 1 min timeout
            _producer(2, -1, now - 999_999),        # no open transaction
            _producer(3, 7, now - 60_000),          # exactly the timeout: not longer
        ]),
        TopicPartition("t", 1): SimpleNamespace(active_producers=[_producer(4, 0, now - 120_000, 3, 2)]),
    }
    got = candidate_open_transactions(states, now, 60_000)
    assert got == [OpenTransaction("t", 0, 1, 0, -1, 5, now - 60_001), OpenTransaction("t", 1, 4, 3, 2, 0, now - 120_000)]
    assert hanging_rows(got, now) == [("t", 0, 1, 0, -1, 5, now - 60_001, 1), ("t", 1, 4, 3, 2, 0, now - 120_000, 2)]


def test_hanging_filter_is_kafkas():
    a = OpenTransaction("t", 0, 1, 0, 0, 5, 0)      # no transactional id listed: hanging
    b = OpenTransaction("t", 0, 2, 0, 0, 6, 0)      # id listed but not found by describe: hanging
    c = OpenTransaction("t", 0, 3, 0, 0, 7, 0)      # the coordinator's transaction covers t-0: not hanging
    d = OpenTransaction("t", 1, 3, 0, 0, 9, 0)      # same producer, t-1 not in its transaction: hanging
    e = OpenTransaction("t", 2, 4, 0, 0, 1, 0)      # id listed, transaction without partitions (Empty): hanging
    ids = {2: "two", 3: "three", 4: "four"}
    described = {"two": None, "three": [TopicPartition("t", 0)], "four": []}
    assert hanging([a, b, c, d, e], ids, described) == [a, b, d, e]


# -- the command line ----------------------------------------------------------------------------
def _run(capsys, *argv):
    try:
        code = main(["transactions", *argv])
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["list"], "--bootstrap-server is required"),
    (["--bootstrap-server", "127.0.0.1:1", "list", "--state", "running"], "unknown transaction state"),
    (["--bootstrap-server", "127.0.0.1:1", "find-hanging"], "--topic or --broker-id"),
    (["--bootstrap-server", "127.0.0.1:1", "find-hanging", "--partition", "0", "--broker-id", "1"],
     "--partition needs --topic"),
    (["--bootstrap-server", "127.0.0.1:1", "abort", "--topic", "t", "--partition", "0"], "--start-offset"),
    (["--bootstrap-server", "127.0.0.1:1", "abort", "--topic", "t", "--partition", "0", "--producer-id", "5",
      "--producer-epoch", "0"], "missing --coordinator-epoch"),
    (["--bootstrap-server", "127.0.0.1:1", "abort", "--topic", "t", "--partition", "0", "--start-offset", "3",
      "--producer-id", "5"], "not both"),
    (["--bootstrap-server", "127.0.0.1:1", "abort", "--partition", "0", "--start-offset", "3"], "--topic"),
    (["--bootstrap-server", "127.0.0.1:1", "describe"], "--transactional-id"),
    (["--bootstrap-server", "127.0.0.1:1", "describe-producers", "--topic", "t"], "--partition"),
    (["--bootstrap-server", "127.0.0.1:1"], "COMMAND"),
    (["--bootstrap-server", "127.0.0.1:1", "--list"], ""),          # the flag forms are gone: usage
    (["list", "--bootstrap-server", "kafka"], "port is missing"),
])
def test_usage_errors_exit_2(capsys, argv, needle):
    code, err = _run(capsys, *argv)
    assert code == EXIT_USAGE, err
    assert needle in err
    assert "Traceback" not in err


def test_connection_options_before_or_after_the_command():
    parser = build_parser()
    before = parser.parse_args(["transactions", "--bootstrap-server", "a:1", "--timeout-ms", "5", "list"])
    after = parser.parse_args(["transactions", "list", "--bootstrap-server", "b:2", "--timeout-ms", "6"])
    neither = parser.parse_args(["transactions", "--bootstrap-server", "c:3", "list"])
    assert (before.bootstrap_server, before.timeout_ms) == ("a:1", 5)
    assert (after.bootstrap_server, after.timeout_ms) == ("b:2", 6)
    assert neither.bootstrap_server == "c:3" and neither.timeout_ms == 15000


def _subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_sub_command_and_option_has_help():
    tool = _subcommands(build_parser())["transactions"]
    subs = _subcommands(tool)
    assert set(subs) == {"list", "describe", "describe-producers", "find-hanging", "abort"}
    for name, parser in [("transactions", tool), *subs.items()]:
        assert parser.description, name
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help and action.help.strip(), f"{name}: {action.option_strings} has no help"
