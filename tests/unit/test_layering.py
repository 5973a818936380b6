"""The import rules of docs/architecture.md and the broker-storage seam, checked by parsing every
module with ast (imports, attribute access and struct calls; never the source text).

Sundial installs under one name (``sundial.broker``, ``sundial.storage``, ...) while the
repository keeps a folder per layer; the rules speak of the layers, so an imported
``sundial.LAYER.x`` is read as ``LAYER.x`` (:func:`_layer_name`).
"""

import ast
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

STDLIB_NETWORK = {"socket", "asyncio", "uvloop", "ssl", "selectors", "http", "urllib"}

RULES = {
    # package: (forbidden top-level imports, extra third-party allowed)
    "config": ({"protocol", "storage", "broker", "pipeline", "records", "kafka", "structlog"} | STDLIB_NETWORK,
               set()),
    "protocol": ({"storage", "broker", "pipeline", "structlog"} | STDLIB_NETWORK, set()),
    "storage": ({"protocol", "broker", "pipeline", "kafka"} | STDLIB_NETWORK, set()),
    # the Spark source is a wire client: it never reaches into the broker's packages
    # (the record format package is shared with it, as Kafka's clients share theirs)
    "pipeline": ({"broker", "storage", "protocol", "config", "tools"}, set()),
    # the tools are clients and offline readers: never the Spark source
    "tools": ({"pipeline", "pyspark"}, set()),
}

#: The record format package sits at the bottom: the standard library and these only.
RECORDS_ALLOWED = {"crc32c", "cramjam"}
#: Every production package (and the operator scripts of benchmarks/ with the fuzz harness
#: they drive) stays within Kafka-sized rooms.
SIZED_PACKAGES = ("records", "storage", "protocol", "pipeline", "config", "broker", "tools", "sundial", "benchmarks")
SIZED_MODULES = ("pyspark_sundial.py", "tests/integration/connection_fuzz.py")
#: Past this many lines a module is named, with its reason, in docs/architecture.md's table.
LONG_MODULE_LINES = 800
#: Production packages: no import circle among their modules (one graph over all of them).
PRODUCTION_PACKAGES = ("records", "storage", "protocol", "config", "broker", "tools", "pipeline")
#: The installed namespace and the command line above the daemon and the tools.
NAMESPACE = "sundial"
#: Packages with no function-level import (optional dependencies aside).
ACYCLIC_PACKAGES = ("records", "storage", "protocol", "config", "broker", "tools")
#: What the tools may use of the daemon: the formats of the files they read or edit offline
#: (``dump-log`` decodes ``__consumer_offsets``; ``credentials``/``acls`` edit the stores),
#: never its runtime (server, connections, handlers, replica manager, coordinator).
TOOLS_MAY_IMPORT_FROM_BROKER = {"broker.groups.schema", "broker.groups.modern.records", "broker.sasl",
                                "broker.authorizer", "broker.logsetup"}


def test_broker_never_imports_the_spark_pipeline():
    offenders = [str(m.relative_to(ROOT)) for m in _modules("broker") if {"pipeline", "pyspark"} & _imports(m)]
    assert not offenders, offenders


def _layer_name(name: str) -> str:
    """``sundial.LAYER.rest`` → ``LAYER.rest``; any other name unchanged."""
    head, _, rest = name.partition(".")
    if head == NAMESPACE and rest.split(".")[0] in PRODUCTION_PACKAGES:
        return rest
    return name


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(_layer_name(alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == NAMESPACE:    # from sundial import records
                names.update(_layer_name(f"{NAMESPACE}.{alias.name}").split(".")[0] for alias in node.names)
            else:
                names.add(_layer_name(node.module).split(".")[0])
    return names


def _modules(package: str):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_imports_respect_layering(package):
    forbidden, _ = RULES[package]
    offenders = {}
    for module in _modules(package):
        bad = _imports(module) & forbidden
        if bad:
            offenders[str(module.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"layering violated: {offenders}"


def test_only_schema_codec_imports_kafka_protocol():
    offenders = []
    for module in _modules("protocol"):
        if module.name == "schema_codec.py":
            continue
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            mod = None
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                mod = node.module or ""
            elif isinstance(node, ast.Import):
                mod = ",".join(a.name for a in node.names)
            if mod and "kafka.protocol" in mod:
                offenders.append(str(module.relative_to(ROOT)))
    assert not offenders, offenders


# -- the record format package -----------------------------------------------------------------


def test_record_package_imports_only_the_standard_library_crc32c_and_cramjam():
    offenders = {}
    for module in _modules("records"):
        bad = {name for name in _imports(module)
               if name not in sys.stdlib_module_names and name not in RECORDS_ALLOWED and name != "records"}
        if bad:
            offenders[str(module.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"records/ must import nothing of Sundial or other third parties: {offenders}"


#: struct functions that take a format first.
STRUCT_CALLS = {"Struct", "pack", "pack_into", "unpack", "unpack_from", "iter_unpack", "calcsize"}


def test_the_v2_header_layout_is_written_in_one_python_module():
    """Only records/layout.py builds a struct over a v2 batch header, its producer fields or a part of
    it (the C accelerator walks records only): a struct call whose format spells one, read on the ast."""
    header_prefixes = (">qiib", ">hiqqqhii")      # the header, or its part before or after the CRC
    producer_fields = ">qhi"                          # producer id, epoch, base sequence
    assert _struct_formats(ROOT / "records" / "layout.py") & {">qiibIhiqqqhii", ">qhi"}
    offenders = []
    for package in ("records", "storage", "protocol", "broker", "pipeline"):
        for module in _modules(package):
            if module == ROOT / "records" / "layout.py":
                continue
            bad = [fmt for fmt in _struct_formats(module) if fmt.startswith(header_prefixes) or fmt == producer_fields]
            if bad:
                offenders.append(f"{module.relative_to(ROOT)}: {bad}")
    assert not offenders, offenders


def _struct_formats(module: pathlib.Path) -> set[str]:
    """The constant formats passed to struct calls (``struct.Struct(">q")``, ``Struct(">q")``, ...)."""
    formats = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in STRUCT_CALLS:
            formats.add(node.args[0].value)
    return formats


# -- rooms and circles -----------------------------------------------------------------------------


@pytest.mark.parametrize("package", SIZED_PACKAGES + SIZED_MODULES)
def test_a_module_past_800_lines_is_named_with_its_reason(package):
    modules = [ROOT / package] if package.endswith(".py") else _modules(package)
    sizes = {str(m.relative_to(ROOT)): len(m.read_text(encoding="utf-8").splitlines()) for m in modules}
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unexplained = {name: n for name, n in sizes.items() if n > LONG_MODULE_LINES and f"| `{name}` |" not in doc}
    assert not unexplained, f"name these in docs/architecture.md with the reason, or split them by concept: " \
                            f"{unexplained}"


def test_every_production_package_is_checked():
    """A new top-level package of production code joins the lists above."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks", NAMESPACE}
    assert packages <= set(PRODUCTION_PACKAGES), sorted(packages - set(PRODUCTION_PACKAGES))
    assert set(PRODUCTION_PACKAGES) <= set(SIZED_PACKAGES)


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(path: pathlib.Path) -> set[str]:
    """Modules of Sundial imported when ``path`` is imported (module level, TYPE_CHECKING blocks left out)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def resolve(module: str | None, level: int) -> str:
        if level == 0:
            return module or ""
        base = package.split(".")
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                out.update(_layer_name(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _layer_name(resolve(node.module, node.level))
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if _module_path(sub) is not None or _is_extension(sub):
                        out.add(sub)
                    else:
                        out.add(target)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {m for m in out if _module_path(m) is not None}


def _module_path(name: str) -> pathlib.Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_extension(name: str) -> bool:
    """A C extension module (its source next to the Python modules, built in place or not)."""
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".c").is_file() or any(base.parent.glob(base.name + ".*.so"))


def test_no_import_circle():
    graph = {_module_name(m): _runtime_imports(m) for package in PRODUCTION_PACKAGES for m in _modules(package)}
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            circle = dfs(node)
            assert circle is None, " -> ".join(circle)


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        names = ast.unparse(handler.type) if handler.type is not None else ""
        if "ImportError" in names or "ModuleNotFoundError" in names:
            return True
    return False


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_function_level_imports_except_optional_dependencies(package):
    offenders = []

    def visit(node, in_function: bool, optional: bool, module: pathlib.Path) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function and not optional:
                offenders.append(f"{module.relative_to(ROOT)}:{child.lineno}")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                  optional or (isinstance(child, ast.Try) and _catches_import_error(child)), module)

    for module in _modules(package):
        visit(ast.parse(module.read_text(encoding="utf-8")), False, False, module)
    assert not offenders, offenders


# -- dispatch, the daemon and its tools --------------------------------------------------------------------


def _all_imported_names(path: pathlib.Path) -> set[str]:
    """Every module named by an import anywhere in ``path`` (full dotted names, relative ones resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(_layer_name(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            target = _layer_name(target)
            for alias in node.names:
                sub = _layer_name(f"{target}.{alias.name}")
                out.add(sub if _module_path(sub) is not None else target)
    return out


@pytest.mark.parametrize("package", PRODUCTION_PACKAGES)
def test_no_importlib_dispatch(package):
    """Handlers, tools and codecs are imported by name in the source, never looked up by a string."""
    offenders = []
    for module in _modules(package):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom)
                                                        and node.module else [])
                if any(n == "importlib" or n.startswith("importlib.") for n in names):
                    offenders.append(f"{module.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Name) and node.id == "__import__":
                offenders.append(f"{module.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_the_handler_table_is_static_and_complete():
    """Every handler module is imported by broker/dispatch.py, and every handler is in its table."""
    from sundial.broker import dispatch

    handlers_dir = ROOT / "broker" / "handlers"
    modules = {p.stem for p in handlers_dir.glob("*.py") if p.stem != "__init__"}
    imported = {n.rpartition(".")[2] for n in _all_imported_names(ROOT / "broker" / "dispatch.py")
                if n.startswith("broker.handlers.")}
    assert modules <= imported, sorted(modules - imported)
    routed = {r.handler for r in dispatch.ROUTES} | {r.begin for r in dispatch.ROUTES if r.begin}
    for stem in sorted(modules):
        tree = ast.parse((handlers_dir / f"{stem}.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef)) and node.name.startswith(
                    ("handle_", "begin_")):
                fn = getattr(getattr(dispatch, stem), node.name)
                assert fn in routed, f"broker/handlers/{stem}.py:{node.name} has no row in dispatch.ROUTES"


def test_the_daemon_never_imports_the_tools():
    """The ``sundial`` command (``sundial/cli.py``) sits above both; the daemon knows nothing of the tools."""
    offenders = [str(m.relative_to(ROOT)) for m in _modules("broker")
                 if any(n.split(".")[0] in ("tools", NAMESPACE) for n in _all_imported_names(m))]
    assert not offenders, offenders


def test_only_the_command_line_lives_in_the_namespace_folder():
    """``sundial/`` holds the namespace's own modules only; every layer keeps its folder."""
    assert {m.name for m in _modules(NAMESPACE)} == {"__init__.py", "__main__.py", "cli.py"}


def test_the_tools_use_only_the_daemons_file_formats():
    offenders = {}
    for module in _modules("tools"):
        bad = {n for n in _all_imported_names(module)
               if n.split(".")[0] == "broker" and n not in TOOLS_MAY_IMPORT_FROM_BROKER}
        if bad:
            offenders[str(module.relative_to(ROOT))] = sorted(bad)
    assert not offenders, offenders


# -- the seam between the broker and storage ---------------------------------------------------------------
#
# docs/architecture.md, "The broker-storage seam": the broker touches partition logs only through the
# ReplicaManager and the documented PartitionLog API, handlers hold no partition log and read no record
# bytes, and nothing in broker/ reads a storage class's private state. Checked on attribute access and
# imports, by walking the ast of every broker module.

#: What broker/ may use of a ``PartitionLog`` (docs/architecture.md, "Partition log").
PARTITION_LOG_API = frozenset({
    "append", "append_as_follower", "append_txn_marker", "read", "batches_from",
    "begin_append", "begin_txn_marker", "finish_append",
    "log_start_offset", "log_end_offset", "high_watermark", "last_stable_offset", "config", "closed",
    "ongoing_transactions", "collect_aborted_transactions", "transaction_summary",
    "describe_producers", "describe_producer",
    "fetch_offset_by_timestamp", "max_timestamp_offset", "legacy_offsets_before", "record_timestamp_at",
    "delete_records", "truncate_to", "delete_old_segments", "remove_expired_producers",
    "prepare_flush", "mark_flushed", "maybe_flush_due", "flush", "close",
    "cleaning_job", "replace_segments", "summary", "segments_info",
})
#: What broker/ may use of the ``LogManager`` (docs/architecture.md, "Partition log").
LOG_MANAGER_API = frozenset({
    "startup", "shutdown", "close_without_marker", "checkpoint", "checkpoint_contents", "write_checkpoint",
    "topic", "topics", "topic_by_id", "create_topic", "delete_topic", "alter_topic_config", "create_partitions",
    "prepare_create_topic", "finish_create_topic", "abandon_create_topic", "prepare_delete_topic",
    "finish_delete_topic", "get_log", "is_open", "start_open", "finish_open", "open_logs", "all_partitions",
    "replica_placements", "log_dirs", "run_retention", "take_rename_jobs", "renamed", "take_expired_files",
    "delete_expired_files", "flush_all",
    "begin_move", "move_future_job", "move_copy_job", "start_swap", "end_move",
})
#: Calls that hand out a ``PartitionLog``.
LOG_GETTERS = frozenset({"log_for", "get_log", "finish_open"})
#: The attribute through which broker objects hold the ``LogManager`` (``broker.logs``, ``rm.logs``).
LOG_MANAGER_ATTRIBUTE = "logs"
#: Handlers that still read a partition log's documented offsets themselves instead of asking the
#: ReplicaManager (the list can only shrink).
KNOWN_HANDLERS_HOLDING_A_LOG: set[str] = set()
#: Handlers that still read record bytes themselves; Produce's request-level checks are
#: ``ReplicaManager.produce_records_error`` and ``carries_transactional_batch`` (the list can only shrink).
KNOWN_HANDLERS_READING_BYTES: set[str] = set()


def _is_call_to(node, names) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names


def _storage_handles(tree: ast.AST):
    """The expressions (``ast.unparse`` text) bound in ``tree`` to a partition log and to the log
    manager: assignment targets of a log getter call (either branch of a conditional expression) or of
    ``X.logs``, and the last name of ``for ..., log in X.open_logs()``."""
    logs: set[str] = set()
    managers: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            values = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            for v in values:
                for target in targets:
                    if not isinstance(target, (ast.Name, ast.Attribute)):
                        continue
                    if _is_call_to(v, LOG_GETTERS):
                        logs.add(ast.unparse(target))
                    elif isinstance(v, ast.Attribute) and v.attr == LOG_MANAGER_ATTRIBUTE:
                        managers.add(ast.unparse(target))
        elif isinstance(node, (ast.For, ast.comprehension)) and _is_call_to(node.iter, {"open_logs"}):
            if isinstance(node.target, ast.Tuple) and isinstance(node.target.elts[-1], ast.Name):
                logs.add(node.target.elts[-1].id)
    return logs, managers


def _storage_uses(module: pathlib.Path):
    """``(kind, attribute, line)`` for every attribute used on a partition log (``"log"``) or on the
    log manager (``"manager"``) in ``module``."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    logs, managers = _storage_handles(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        text = ast.unparse(owner)
        if _is_call_to(owner, LOG_GETTERS) or (text in logs and isinstance(owner, (ast.Name, ast.Attribute))):
            yield "log", node.attr, node.lineno
        elif (isinstance(owner, ast.Attribute) and owner.attr == LOG_MANAGER_ATTRIBUTE) or text in managers:
            yield "manager", node.attr, node.lineno


def test_the_broker_uses_only_the_documented_storage_api():
    offenders = []
    for module in _modules("broker"):
        for kind, attr, line in _storage_uses(module):
            allowed = PARTITION_LOG_API if kind == "log" else LOG_MANAGER_API
            if attr not in allowed:
                offenders.append(f"{module.relative_to(ROOT)}:{line} {kind}.{attr}")
    assert not offenders, f"outside the documented PartitionLog/LogManager API: {offenders}"


def test_the_documented_storage_api_is_in_the_architecture_doc():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc[doc.index("### Partition log"):doc.index("## Protocol contract")]
    missing = sorted(name for name in PARTITION_LOG_API | LOG_MANAGER_API
                     if not re.search(rf"\b{name}\b", section))
    assert not missing, missing


def _log_getter_results_used(module: pathlib.Path) -> list[int]:
    """Lines where a log getter's result is kept or used for more than ``is None``/``is not None``."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    existence_checks = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) \
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None:
            existence_checks.add(id(node.left))
    return [node.lineno for node in ast.walk(tree)
            if _is_call_to(node, LOG_GETTERS) and id(node) not in existence_checks]


def _found_in_handlers(find) -> dict[str, list]:
    """``find(module)`` for every module of broker/handlers, by path, where it finds something."""
    found = {}
    for module in _modules("broker/handlers"):
        hits = find(module)
        if hits:
            found[str(module.relative_to(ROOT))] = hits
    return found


def _assert_only_known(found: dict[str, list], known: set[str], known_name: str, offence: str, gone: str) -> None:
    """Nothing ``found`` outside the ``known`` exceptions, and no exception left that is not needed."""
    new = {name: hits for name, hits in found.items() if name not in known}
    assert not new, f"{offence}: {new}"
    stale = known - set(found)
    assert not stale, f"{gone}, remove from {known_name}: {sorted(stale)}"


def test_handlers_hold_no_partition_log():
    """A handler asks the ReplicaManager for plain answers (``delete_records``, ``list_offset``,
    ``offset_for_leader_epoch``, ``describe_producers``, ...); it may ask whether a partition exists
    (``rm.log_for(t, p) is None``) but never keeps or uses the log."""
    holding = _found_in_handlers(_log_getter_results_used)
    _assert_only_known(holding, KNOWN_HANDLERS_HOLDING_A_LOG, "KNOWN_HANDLERS_HOLDING_A_LOG",
                       "handlers holding a partition log (ask the ReplicaManager)", "no longer holding a log")


def _record_layout_names() -> set[str]:
    """The byte positions, masks, sizes and header structs of :mod:`records.layout`."""
    from sundial.records import layout
    return {name for name, value in vars(layout).items() if not name.startswith("_") and (
        type(value).__name__ == "Struct" or name.endswith(("_OFFSET", "_MASK", "_OVERHEAD", "_SIZE")))}


def _reads_record_bytes(module: pathlib.Path, layout_names: set[str]) -> list[str]:
    """What in ``module`` reads record bytes: a byte-layout name of records.layout, ``struct``, or an
    ``unpack``/``unpack_from``/``int.from_bytes`` call."""
    found = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and _layer_name(node.module).startswith("records."):
            found += [f"{node.lineno}:{a.name}" for a in node.names if a.name in layout_names]
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}:{a.name}" for a in node.names if a.name == "struct"]
        elif isinstance(node, ast.ImportFrom) and node.module == "struct":
            found.append(f"{node.lineno}:struct")
        elif _is_call_to(node, {"unpack", "unpack_from", "iter_unpack", "from_bytes"}):
            found.append(f"{node.lineno}:{node.func.attr}")
    return found


def test_no_handler_reads_record_bytes():
    """Record bytes are read by records/ and storage/ (behind the ReplicaManager), never by a handler."""
    layout_names = _record_layout_names()
    assert {"V2_HEADER", "ATTRIBUTES_OFFSET", "TRANSACTIONAL_FLAG_MASK"} <= layout_names
    readers = _found_in_handlers(lambda module: _reads_record_bytes(module, layout_names))
    _assert_only_known(readers, KNOWN_HANDLERS_READING_BYTES, "KNOWN_HANDLERS_READING_BYTES",
                       "handlers reading record bytes (use the ReplicaManager)", "no longer reading bytes")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _class_private_names(tree: ast.AST) -> set[str]:
    """Private names the classes of ``tree`` define: ``self._x`` they assign, ``_x`` methods, slots."""
    names: set[str] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(node.name):
                names.add(node.name)
        for node in cls.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                    for t in node.targets):
                names.update(c.value for c in ast.walk(node.value)
                             if isinstance(c, ast.Constant) and isinstance(c.value, str) and _private(c.value))
    return names


def test_the_broker_reads_no_private_state_of_storage_classes():
    """``x._name`` in broker/, with ``x`` not ``self``/``cls``, where ``_name`` is private to a storage
    class (and to no class of the reading module)."""
    storage_private: set[str] = set()
    for module in _modules("storage"):
        storage_private |= _class_private_names(ast.parse(module.read_text(encoding="utf-8")))
    assert {"_segments", "_producers", "_leo"} <= storage_private
    offenders = []
    for module in _modules("broker"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        own = _class_private_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in storage_private and node.attr not in own \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                offenders.append(f"{module.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not offenders, offenders
