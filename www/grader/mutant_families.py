"""Mutants that look like learners' mistakes, for ./lab mutants (mutation.mjs), beside
cosmic-ray's operators. Two families, each a deterministic list made from a lab's
reference.py:

- sql (labs whose reference runs SQL: courier): each statement in a string literal
  of a `db.execute` call is parsed with sqlglot and changed one way at a time (a
  WHERE/ON conjunct or OR branch dropped, a comparison's strictness or direction
  flipped, an ORDER BY key dropped, reversed or swapped, a cfg parameter replaced
  by its default, a SET item changed or dropped, an ON CONFLICT clause changed, a
  LEFT JOIN made inner, a COALESCE replaced by one of its arguments). The mutant is
  the reference with that one statement rendered by sqlglot and, where the change
  drops or moves a `?`, its parameter tuple to match. Every statement is valid SQL
  on both databases: the lab's own check of SQLite-only forms (db_store.py
  sqlite_only) passes it, SQLite compiles it against schema.sql, and sqlglot
  reads it as PostgreSQL; a change that fails one of these is skipped and counted.
- learner (every lab): Python changes made with ast, each a mistake a learner
  makes: a cfg/policy field replaced by its default, a broader except, a commit or
  rollback or another call left out, a keyword argument left out, a guard's return
  left out or the guard dropped, another check left out (its body never or always
  run), two neighbouring statements swapped (a commit after the send), a return
  moved before a fence, an early return that skips a commit, a condition's operand dropped, a max/min reduced to one
  argument, a call to merge replaced by one of its arguments.

Output (stdout), JSON: {"generator", "reference_sha256", "families": {name:
[mutant]}, "controls": {name: source}, "skipped": {name: [[id, why]]}, "statements":
[the reference's statements as the sql control has them]} where a
mutant is {"id", "piece", "line", "what", "after", "source"}. An id names the
function, the operator and its occurrence there, so it stays the same while the
reference does. A family's control is the reference rewritten the family's way
with no change (sql: every statement rendered by sqlglot): it must pass the lab.

Run: .venv/bin/python www/grader/mutant_families.py LAB_ID
"""

import ast
import hashlib
import importlib.util
import json
import re
import sqlite3
import sys
import tomllib
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def lab_dir(lab):
    return REPO / "src" / lab.replace("-", "_")


# ---------------------------------------------------------------------------
# Defaults a learner would write in place of a field: the courier lab states cfg's
# in lab.md's table ("`lease_ms` (30000)"); lab 1 states none, and its example
# tests' policy is what a learner sees.

def defaults_of(lab):
    if lab == "courier":
        text = (lab_dir(lab) / "lab.md").read_text()
        row = next(line for line in text.splitlines() if line.startswith("| `cfg` |"))
        found = {k: v for k, v in re.findall(r"`(\w+)` \((\d+)", row)}
        if not found:
            raise SystemExit("lab.md's cfg row names no defaults")
        return "cfg", found
    toml = tomllib.loads((lab_dir(lab) / "examples" / "examples.toml").read_text())
    policy = toml["defaults"]["policy"]
    return "policy", {k: repr(v) for k, v in policy.items()}


# ---------------------------------------------------------------------------
# Source text edits: spans of ast nodes replaced in the reference's text.

class Text:
    def __init__(self, source):
        if not source.isascii():
            raise SystemExit("the reference is not ASCII: ast's offsets are bytes")
        self.source = source
        self.starts = [0]
        for line in source.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line, col):
        return self.starts[line - 1] + col

    def span(self, node):
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def segment(self, node):
        a, b = self.span(node)
        return self.source[a:b]

    def replace(self, edits):
        """edits: [((start, end), text)], not overlapping."""
        out = self.source
        for (a, b), text in sorted(edits, key=lambda e: e[0][0], reverse=True):
            out = out[:a] + text + out[b:]
        return out

    def line_of(self, node):
        return self.source.splitlines()[node.lineno - 1].strip()


def pieces(tree):
    """The module's top-level functions."""
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def walk_in_order(node):
    """ast.walk, in source order (so occurrences count top to bottom)."""
    found = [n for n in ast.walk(node) if hasattr(n, "lineno")]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset, -(n.end_lineno or 0), -(n.end_col_offset or 0)))


def is_db_call(node, name):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == name and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "db")


class Family:
    def __init__(self, name, text):
        self.name = name
        self.text = text
        self.mutants = []
        self.skipped = []
        self.counts = {}

    def next_id(self, piece, op):
        k = self.counts.get((piece, op), 0)
        self.counts[(piece, op)] = k + 1
        return f"{self.name}:{piece}:{op}:{k}"

    def add(self, piece, op, node, what, edits, after, **extra):
        mid = self.next_id(piece, op)
        source = self.text.replace(edits)
        try:
            compile(source, "reference.py", "exec")
        except SyntaxError as e:
            self.skipped.append([mid, f"not Python: {e}"])
            return
        if after is None:   # a change within one line: that line as it is now
            after = source.splitlines()[node.lineno - 1].strip()
        self.mutants.append({"id": mid, "piece": piece, "line": node.lineno,
                             "what": what, "after": after, "source": source, **extra})


# ---------------------------------------------------------------------------
# The SQL family.

def sql_checker(lab):
    """The lab's own check of SQLite-only forms (db_store.py sqlite_only), and a
    SQLite database with the lab's tables to compile statements against."""
    store = lab_dir(lab) / "db_store.py"
    # db_store imports a few names of the learner's side, which needs the page's
    # bridge; sqlite_only uses none of them.
    stub = types.ModuleType("delivery_lab_courier")
    for name in ("ROWS_CAP", "SQL_ERRORS", "SQL_RAW", "SQL_REF", "_keeps", "_loads", "_piece_worker"):
        setattr(stub, name, None)
    saved = sys.modules.get("delivery_lab_courier")
    sys.modules["delivery_lab_courier"] = stub
    try:
        spec = importlib.util.spec_from_file_location("courier_db_store", store)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["delivery_lab_courier"]
        else:
            sys.modules["delivery_lab_courier"] = saved
    schema = (lab_dir(lab) / "schema.sql").read_text()
    db = sqlite3.connect(":memory:")
    db.executescript(schema)
    return module.sqlite_only, db, schema


def schema_columns(schema):
    """{table: {column: (type, [values named in its comment])}} from schema.sql."""
    tables = {}
    current = None
    for line in schema.splitlines():
        m = re.match(r"CREATE TABLE (\w+)", line)
        if m:
            current = tables.setdefault(m.group(1), {})
            continue
        m = re.match(r"\s+(\w+)\s+(INTEGER|TEXT)\b[^-]*(?:--\s*(.*))?$", line)
        if m and current is not None:
            values = []
            if m.group(3) and "|" in m.group(3):
                values = [v.strip() for v in m.group(3).split("|")]
            current[m.group(1)] = (m.group(2), values)
        if line.startswith(");"):
            current = None
    return tables


PLACEHOLDER = re.compile(r":p(\d+)\b")


def numbered(sql):
    """The statement with its i-th `?` as :p<i> (outside strings and quoted names)."""
    out, i, quote = [], 0, None
    for c in sql:
        if quote:
            quote = None if c == quote else quote
            out.append(c)
        elif c in "'\"":
            quote = c
            out.append(c)
        elif c == "?":
            out.append(f":p{i}")
            i += 1
        else:
            out.append(c)
    return "".join(out), i


def sql_family(lab, text, tree, cfg_name, defaults):
    import sqlglot
    from sqlglot import exp

    fam = Family("sql", text)
    sqlite_only, sqlite_db, schema = sql_checker(lab)
    columns = schema_columns(schema)
    control_edits = []

    def render(stmt):
        return stmt.sql(dialect="sqlite")

    def check(sql_q, n_params):
        found = sqlite_only(sql_q)
        if found is not None:
            return f"the lab refuses it: {found[0]}"
        try:
            sqlite_db.execute("EXPLAIN " + sql_q, (None,) * n_params)
        except sqlite3.Error as e:
            return f"SQLite does not compile it: {e}"
        try:
            sqlglot.parse_one(sql_q, read="postgres")
        except sqlglot.errors.ParseError as e:
            return f"sqlglot does not read it as PostgreSQL: {str(e).splitlines()[0]}"
        return None

    for fn in pieces(tree):
        for call in walk_in_order(fn):
            if not (is_db_call(call, "execute") and call.args
                    and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
                continue
            literal = call.args[0]
            params = call.args[1] if len(call.args) > 1 else None
            if params is not None and not isinstance(params, ast.Tuple):
                raise SystemExit(f"line {call.lineno}: a parameter list that is not a tuple literal")
            elements = [text.segment(e) for e in params.elts] if params is not None else []
            marked, n = numbered(literal.value)
            if n != len(elements):
                raise SystemExit(f"line {call.lineno}: {n} placeholders, {len(elements)} parameters")
            original = sqlglot.parse_one(marked, read="sqlite")
            control_edits.append((text.span(literal), repr(PLACEHOLDER.sub("?", render(original)))))
            piece = fn.name

            def emit(op, what, stmt, elems=None, node=literal):
                """One mutant: this statement as `stmt`, the parameters `elems`
                (default: as they are, in the order the placeholders now come)."""
                what = PLACEHOLDER.sub("?", what)
                rendered = render(stmt)
                order = [int(m) for m in PLACEHOLDER.findall(rendered)]
                base = elems if elems is not None else elements
                new_elems = [base[i] for i in order]
                sql_q = PLACEHOLDER.sub("?", rendered)
                why = check(sql_q, len(new_elems))
                if why is not None:
                    fam.skipped.append([f"sql:{piece}:{op}:?", f"{what}: {why}"])
                    return
                edits = [(text.span(literal), repr(sql_q))]
                if params is not None and new_elems != elements:
                    tail = "," if len(new_elems) == 1 else ""
                    edits.append((text.span(params), "(" + ", ".join(new_elems) + tail + ")"))
                after = sql_q + ("  % (" + ", ".join(new_elems) + ")" if new_elems else "")
                fam.add(piece, op, node, what, edits, after, sql=sql_q)

            def variants(select):
                """For each node of the statement that `select` picks (in a fixed
                order), a fresh copy of the statement and that node in it."""
                for k, node in enumerate(list(original.walk(bfs=True))):
                    if select(node):
                        yield (k, *fresh(k))

            def fresh(k):
                stmt = original.copy()
                return stmt, list(stmt.walk(bfs=True))[k]

            def unparen(node):
                while isinstance(node.parent, exp.Paren):
                    node = node.parent
                return node

            # WHERE/ON conjuncts, and OR branches, dropped one at a time.
            for kind, op, joiner in ((exp.And, "drop-conjunct", exp.and_), (exp.Or, "drop-disjunct", exp.or_)):
                def top_chain(node, kind=kind):
                    return isinstance(node, kind) and not isinstance(unparen(node).parent, kind)
                for k, _, node in variants(top_chain):
                    parts = list(node.flatten())
                    for i in range(len(parts)):
                        s2, target = fresh(k)
                        keep = [p.copy() for j, p in enumerate(list(target.flatten())) if j != i]
                        target.replace(joiner(*keep, copy=False) if len(keep) > 1 else keep[0])
                        emit(op, f"drop `{parts[i].sql(dialect='sqlite')}` from `{node.sql(dialect='sqlite')}`"
                             , s2)
            # A WHERE or ON with one condition: the condition dropped.
            for _, stmt, node in variants(lambda x: isinstance(x, exp.Where) and not isinstance(x.this, (exp.And, exp.Or))):
                what = f"drop `WHERE {node.this.sql(dialect='sqlite')}`"
                node.pop()
                emit("drop-where", what, stmt)
            for _, stmt, node in variants(lambda x: isinstance(x, exp.Join) and x.args.get("on") is not None
                                       and not isinstance(x.args["on"], (exp.And, exp.Or))):
                what = f"ON `{node.args['on'].sql(dialect='sqlite')}` -> ON 1 = 1"
                node.set("on", exp.EQ(this=exp.Literal.number(1), expression=exp.Literal.number(1)))
                emit("drop-on", what, stmt)
            # Comparisons: strictness and direction.
            strict = {exp.LT: exp.LTE, exp.LTE: exp.LT, exp.GT: exp.GTE, exp.GTE: exp.GT}
            direction = {exp.LT: exp.GT, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.GTE: exp.LTE}
            for op, table in (("flip-strictness", strict), ("flip-direction", direction)):
                for _, stmt, node in variants(lambda x: type(x) in strict):
                    before = node.sql(dialect="sqlite")
                    new = table[type(node)](this=node.this.copy(), expression=node.expression.copy())
                    node.replace(new)
                    emit(op, f"`{before}` -> `{new.sql(dialect='sqlite')}`", stmt)
            # ORDER BY keys: dropped, reversed, swapped with the next.
            for k, _, node in variants(lambda x: isinstance(x, exp.Order)):
                keys = node.expressions
                for i in range(len(keys)):
                    key_sql = keys[i].this.sql(dialect="sqlite")
                    s2, o2 = fresh(k)
                    k2 = list(o2.expressions)
                    if len(k2) == 1:
                        o2.pop()
                    else:
                        o2.set("expressions", k2[:i] + k2[i + 1:])
                    emit("drop-order-key", f"drop ORDER BY key `{key_sql}`", s2)
                    s3, o3 = fresh(k)
                    k3 = o3.expressions[i]
                    desc = not k3.args.get("desc")
                    k3.set("desc", desc)
                    k3.set("nulls_first", not desc)   # SQLite's own for ASC and DESC
                    emit("reverse-order-key", f"ORDER BY key `{key_sql}` {'DESC' if desc else 'ASC'}", s3)
                    if i + 1 < len(keys):
                        s4, o4 = fresh(k)
                        k4 = list(o4.expressions)
                        k4[i], k4[i + 1] = k4[i + 1], k4[i]
                        o4.set("expressions", k4)
                        emit("swap-order-keys", f"ORDER BY keys `{key_sql}` and "
                             f"`{keys[i + 1].this.sql(dialect='sqlite')}` swapped", s4)
            # LEFT JOIN made inner.
            for _, stmt, node in variants(lambda x: isinstance(x, exp.Join) and x.args.get("side") == "LEFT"):
                what = f"LEFT JOIN {node.this.sql(dialect='sqlite')} -> JOIN"
                node.set("side", None)
                emit("inner-join", what, stmt)
            # COALESCE(a, b) replaced by each of its arguments.
            for k, _, node in variants(lambda x: isinstance(x, exp.Coalesce)):
                for j in range(1 + len(node.expressions)):
                    s2, target = fresh(k)
                    a2 = [target.this] + list(target.expressions)
                    before = target.sql(dialect="sqlite")
                    target.replace(a2[j].copy())
                    emit("coalesce-arg", f"`{before}` -> `{a2[j].sql(dialect='sqlite')}`", s2)
            # SET items: dropped (when there are others), an increment dropped, a
            # parameter replaced by 0 or by another parameter of the column's type, a
            # text value replaced by each other value the column's comment names.
            table_of = {}
            main = original.this if isinstance(original, (exp.Update, exp.Insert)) else None
            if isinstance(main, exp.Schema):
                main = main.this
            main_table = main.name if isinstance(main, exp.Table) else None
            for t in original.find_all(exp.Table):
                table_of[t.alias_or_name] = t.name

            def col_type(col):
                table = table_of.get(col.table) if col.table else main_table
                if table is None or table not in columns:
                    # unqualified in a SELECT: the one table of the statement that has it
                    owners = [t for t in set(table_of.values()) if col.name in columns.get(t, {})]
                    table = owners[0] if len(owners) == 1 else None
                return columns.get(table, {}).get(col.name) if table else None

            ptype = {}
            for node in original.walk():
                if isinstance(node, exp.EQ) or isinstance(node, tuple(strict)):
                    sides = [node.this, node.expression]
                    for a, b in (sides, sides[::-1]):
                        if isinstance(a, exp.Column) and isinstance(b, exp.Placeholder):
                            t = col_type(a)
                            if t:
                                ptype[int(b.name[1:])] = t[0]
            if isinstance(original, exp.Insert) and isinstance(original.this, exp.Schema):
                cols = original.this.expressions
                values = original.expression.expressions[0].expressions
                for c, v in zip(cols, values):
                    if isinstance(v, exp.Placeholder) and main_table in columns:
                        t = columns[main_table].get(c.name)
                        if t:
                            ptype[int(v.name[1:])] = t[0]

            def set_items(stmt):
                if isinstance(stmt, exp.Update):
                    return stmt, "expressions"
                conflict = stmt.args.get("conflict")
                if conflict is not None and conflict.expressions:
                    return conflict, "expressions"
                return None, None

            holder, key = set_items(original)
            if holder is not None:
                items = holder.args[key]
                for i, item in enumerate(items):
                    col, rhs = item.this, item.expression
                    label = item.sql(dialect="sqlite")

                    def with_item(new_rhs=None, drop=False, i=i):
                        s2 = original.copy()
                        h2, k2 = set_items(s2)
                        its = list(h2.args[k2])
                        if drop:
                            its.pop(i)
                        else:
                            its[i] = exp.EQ(this=its[i].this.copy(), expression=new_rhs)
                        h2.set(k2, its)
                        return s2

                    if len(items) > 1:
                        emit("drop-set", f"drop SET `{label}`", with_item(drop=True))
                    if isinstance(rhs, (exp.Add, exp.Sub)) and isinstance(rhs.this, exp.Column) \
                            and rhs.this.name == col.name:
                        emit("set-no-increment", f"SET `{label}` -> `{col.name} = {col.name}`",
                             with_item(rhs.this.copy()))
                    if isinstance(rhs, exp.Placeholder):
                        k = int(rhs.name[1:])
                        t = col_type(col) if isinstance(holder, exp.Update) else columns.get(main_table, {}).get(col.name)
                        if t and t[0] == "INTEGER":
                            emit("set-constant", f"SET `{label}` -> `{col.name} = 0`",
                                 with_item(exp.Literal.number(0)))
                        for j in sorted(ptype):
                            if j != k and t and ptype[j] == t[0]:
                                emit("set-other-param", f"SET `{label}` -> `{col.name} = ?` "
                                     f"bound to {elements[j]} (not {elements[k]})",
                                     with_item(exp.Placeholder(this=f"p{j}")))
                    if isinstance(rhs, exp.Literal) and rhs.is_string:
                        t = col_type(col)
                        for v in (t[1] if t else []):
                            if v != rhs.name:
                                emit("set-other-value", f"SET `{label}` -> `{col.name} = '{v}'`",
                                     with_item(exp.Literal.string(v)))
            # ON CONFLICT: DO UPDATE -> DO NOTHING; the clause dropped; a DO NOTHING's
            # target dropped. (A DO UPDATE with its target dropped is SQLite's alone:
            # the lab refuses it, so it is no mutant.)
            conflict = original.args.get("conflict") if isinstance(original, exp.Insert) else None
            if conflict is not None:
                action = conflict.args.get("action")
                if action is not None and action.name.upper() == "DO UPDATE":
                    s2 = original.copy()
                    c2 = s2.args["conflict"]
                    c2.set("action", exp.var("DO NOTHING"))
                    c2.set("expressions", None)
                    emit("conflict-do-nothing", "ON CONFLICT ... DO UPDATE -> DO NOTHING", s2)
                s3 = original.copy()
                s3.set("conflict", None)
                emit("drop-on-conflict", "drop the ON CONFLICT clause", s3)
                if conflict.args.get("conflict_keys") and action is not None and action.name.upper() == "DO NOTHING":
                    s4 = original.copy()
                    s4.args["conflict"].set("conflict_keys", None)
                    emit("drop-conflict-target", "drop the ON CONFLICT target", s4)
            # A parameter taken from cfg: its default in its place.
            for j, e in enumerate(params.elts if params is not None else []):
                for node in walk_in_order(e):
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                            and node.value.id == cfg_name and node.attr in defaults:
                        a, b = text.span(node)
                        ea, _ = text.span(e)
                        seg = elements[j]
                        new = seg[:a - ea] + defaults[node.attr] + seg[b - ea:]
                        emit("cfg-default", f"parameter `{seg}` -> `{new}`", original,
                             elements[:j] + [new] + elements[j + 1:], node=literal)
    control = text.replace(control_edits)
    fam.statements = [ast.literal_eval(t) for _, t in control_edits]
    return fam, control


# ---------------------------------------------------------------------------
# The learner family: Python changes.

def indent_of(text, node):
    line = text.source.splitlines()[node.lineno - 1]
    return line[:len(line) - len(line.lstrip())]


def statement_span(text, node):
    """The statement's whole lines, for removing or moving it."""
    a = text.starts[node.lineno - 1]
    b = text.starts[node.end_lineno]
    return a, b


def blocks(fn):
    """Every statement list in the function, with its owner."""
    for node in ast.walk(fn):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                yield stmts
        for h in getattr(node, "handlers", []) or []:
            yield h.body


def remove_stmt(text, block, stmt):
    """Edits that remove `stmt` from `block` (a `pass` in its place if it was alone)."""
    span = statement_span(text, stmt)
    if len(block) == 1:
        return [(span, indent_of(text, stmt) + "pass\n")]
    return [(span, "")]


def swappable(stmt):
    """A statement with a side effect that can change places: a call, or an
    assignment from one."""
    return isinstance(stmt, (ast.Expr, ast.Assign)) and any(isinstance(n, ast.Call) for n in ast.walk(stmt))


def independent(a, b):
    """Neither statement sets a name the other reads or sets."""
    def names(stmt, ctx):
        return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}
    sa, sb = names(a, ast.Store), names(b, ast.Store)
    return not (sa & (names(b, ast.Load) | sb) or sb & names(a, ast.Load))


def learner_family(lab, text, tree, cfg_name, defaults):
    fam = Family("learner", text)
    module_fns = {f.name: f for f in pieces(tree)}
    in_execute_params = set()
    for call in ast.walk(tree):
        if is_db_call(call, "execute") and len(call.args) > 1:
            in_execute_params.update(id(n) for n in ast.walk(call.args[1]))

    def returns_a_parameter(fn):
        """merge-like: every return gives back one of its parameters by name."""
        names = {a.arg for a in fn.args.args}
        rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
        return rets and all(isinstance(r.value, ast.Name) and r.value.id in names for r in rets)

    for fn in pieces(tree):
        piece = fn.name
        for node in walk_in_order(fn):
            # A cfg/policy field replaced by its default (fields in a db.execute's
            # parameters are the sql family's).
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == cfg_name and node.attr in defaults \
                    and isinstance(node.ctx, ast.Load) and id(node) not in in_execute_params:
                fam.add(piece, "field-default", node, f"`{text.segment(node)}` -> `{defaults[node.attr]}`",
                        [(text.span(node), defaults[node.attr])], None)
            # A broader except.
            if isinstance(node, ast.ExceptHandler) and isinstance(node.type, ast.Name) \
                    and node.type.id == "Exception":
                fam.add(piece, "broader-except", node, "`except Exception:` -> `except BaseException:`",
                        [(text.span(node.type), "BaseException")], None)
                a = text.offset(node.lineno, node.col_offset)
                b = text.offset(node.type.end_lineno, node.type.end_col_offset)
                fam.add(piece, "bare-except", node, "`except Exception:` -> `except:`",
                        [((a, b), "except")], None)
            # A keyword argument left out.
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg is None:
                        continue
                    a, b = text.span(kw)
                    src = text.source
                    # with the comma before it
                    a2 = src.rindex(",", 0, a)
                    fam.add(piece, "drop-keyword", node, f"drop `{text.segment(kw)}` from `{text.segment(node)}`",
                            [((a2, b), "")], None)
                # max/min of two reduced to one argument
                if isinstance(node.func, ast.Name) and node.func.id in ("max", "min") and len(node.args) == 2:
                    for arg in node.args:
                        fam.add(piece, "minmax-arg", node, f"`{text.segment(node)}` -> `{text.segment(arg)}`",
                                [(text.span(node), text.segment(arg))], None)
                # a merge-like helper bypassed: its call replaced by one argument
                if isinstance(node.func, ast.Name) and node.func.id in module_fns \
                        and returns_a_parameter(module_fns[node.func.id]) and node.func.id != piece:
                    for arg in node.args:
                        fam.add(piece, "bypass-helper", node, f"`{text.segment(node)}` -> `{text.segment(arg)}`",
                                [(text.span(node), text.segment(arg))], None)
            # A condition's operand dropped (`a or b` -> `a`).
            if isinstance(node, ast.BoolOp):
                for i, v in enumerate(node.values):
                    rest = [text.segment(x) for j, x in enumerate(node.values) if j != i]
                    joined = (" or " if isinstance(node.op, ast.Or) else " and ").join(rest)
                    if len(rest) > 1:
                        joined = f"({joined})"
                    fam.add(piece, "drop-operand", node, f"drop `{text.segment(v)}` from `{text.segment(node)}`",
                            [(text.span(node), joined)], None)

        for block in blocks(fn):
            for idx, stmt in enumerate(block):
                # A commit or rollback left out of one path; any other call statement
                # (a write, a cleanup) left out.
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                    call = stmt.value
                    what = f"drop `{text.line_of(stmt)}` (line {stmt.lineno})"
                    if is_db_call(call, "commit") or is_db_call(call, "rollback"):
                        op = f"drop-{call.func.attr}"
                    else:
                        op = "drop-call"
                        if is_db_call(call, "execute") and isinstance(call.args[0], ast.Constant):
                            what = f"drop the statement `{' '.join(call.args[0].value.split())[:70]}...` (line {stmt.lineno})"
                    fam.add(piece, op, stmt, what,
                            remove_stmt(text, block, stmt), "(removed)")
                # Two neighbouring statements with side effects swapped (a commit after
                # the send, say), when neither touches a name the other sets.
                if idx + 1 < len(block) and all(swappable(s) for s in block[idx:idx + 2]) \
                        and independent(block[idx], block[idx + 1]):
                    nxt = block[idx + 1]
                    a, b = statement_span(text, stmt)
                    c, d = statement_span(text, nxt)
                    fam.add(piece, "swap-statements", stmt,
                            f"`{text.line_of(stmt)}` (line {stmt.lineno}) and `{text.line_of(nxt)}` (line {nxt.lineno}) swapped",
                            [((a, d), text.source[c:d] + text.source[a:b])], "(swapped)")
                if isinstance(stmt, ast.If) and not stmt.orelse:
                    body = stmt.body
                    guard = isinstance(body[-1], ast.Return)
                    if not guard:
                        # A check left out: its body never runs, or always runs.
                        fam.add(piece, "if-never", stmt, f"drop `if {text.segment(stmt.test)}:` and its body",
                                remove_stmt(text, block, stmt), "(removed)")
                        a, b = statement_span(text, stmt)
                        ind = indent_of(text, stmt)
                        body_text = "".join(
                            line[4:] if line.startswith(ind + "    ") else line
                            for line in text.source[text.starts[body[0].lineno - 1]:b].splitlines(keepends=True))
                        fam.add(piece, "if-always", stmt, f"`if {text.segment(stmt.test)}:` dropped, its body always runs",
                                [((a, b), body_text)], "(rewritten)")
                    if guard:
                        # The guard's return left out: the code goes on after it.
                        fam.add(piece, "guard-no-return", stmt,
                                f"drop `{text.line_of(body[-1])}` from `if {text.segment(stmt.test)}:`",
                                remove_stmt(text, body, body[-1]), "(removed)")
                        # The guard dropped.
                        fam.add(piece, "drop-guard", stmt, f"drop `if {text.segment(stmt.test)}:` and its body",
                                [(statement_span(text, stmt), "")] if len(block) > 1 else
                                [(statement_span(text, stmt), indent_of(text, stmt) + "pass\n")], "(removed)")
                    fence = "rowcount" in text.segment(stmt.test)
                    # A return moved before a fence: the block's final return (and the
                    # commit just before it) moved up to before the check.
                    if guard and fence and isinstance(block[-1], ast.Return) and block[-1] is not stmt:
                        tail = [block[-1]]
                        if len(block) >= 2 and isinstance(block[-2], ast.Expr) and is_db_call(block[-2].value, "commit") \
                                and block[-2] is not stmt:
                            tail = [block[-2], block[-1]]
                        a, _ = statement_span(text, tail[0])
                        _, b = statement_span(text, tail[-1])
                        moved = text.source[a:b]
                        s_a, _ = statement_span(text, stmt)
                        fam.add(piece, "return-before-fence", stmt,
                                f"`{' ; '.join(text.line_of(t) for t in tail)}` moved before `if {text.segment(stmt.test)}:`",
                                [((a, b), ""), ((s_a, s_a), moved)], "(moved)")
                    # An early return that skips the commit: `if C: body` before a commit
                    # becomes `if not C: return R` with the body after it.
                    if not guard and not any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
                        later_commit = any(isinstance(s, ast.Expr) and is_db_call(s.value, "commit")
                                           for s in block[idx + 1:])
                        final = block[-1] if isinstance(block[-1], ast.Return) else None
                        if later_commit and final is not None:
                            ind = indent_of(text, stmt)
                            value = text.segment(final.value) if final.value is not None else "None"
                            a, b = statement_span(text, stmt)
                            body_text = "".join(
                                line[4:] if line.startswith(ind + "    ") else line
                                for line in text.source[text.starts[body[0].lineno - 1]:b].splitlines(keepends=True))
                            new = f"{ind}if not ({text.segment(stmt.test)}):\n{ind}    return {value}\n{body_text}"
                            fam.add(piece, "early-return-skips-commit", stmt,
                                    f"`if {text.segment(stmt.test)}:` -> `if not (...): return {value}` "
                                    "before the commit", [((a, b), new)], "(rewritten)")
    return fam


# ---------------------------------------------------------------------------

def generate(lab):
    reference = (lab_dir(lab) / "reference.py").read_text()
    text = Text(reference)
    tree = ast.parse(reference)
    cfg_name, defaults = defaults_of(lab)
    families, controls, skipped, statements = {}, {}, {}, []
    seen = {reference}
    uses_sql = any(is_db_call(n, "execute") for n in ast.walk(tree))
    made = []
    generator = "ast"
    if uses_sql:
        import sqlglot
        generator = f"sqlglot {sqlglot.__version__}, ast"
        fam, control = sql_family(lab, text, tree, cfg_name, defaults)
        made.append(fam)
        controls["sql"] = control
        statements = fam.statements
    made.append(learner_family(lab, text, tree, cfg_name, defaults))
    for fam in made:
        kept = []
        for m in fam.mutants:
            # One mutant per source text: the first family and operator that made it.
            if m["source"] in seen:
                continue
            seen.add(m["source"])
            kept.append(m)
        families[fam.name] = kept
        skipped[fam.name] = fam.skipped
    return {
        "generator": generator,
        "reference_sha256": hashlib.sha256(reference.encode()).hexdigest(),
        "families": families,
        "controls": controls,
        "skipped": skipped,
        "statements": statements,
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: mutant_families.py LAB_ID")
    json.dump(generate(sys.argv[1]), sys.stdout)
