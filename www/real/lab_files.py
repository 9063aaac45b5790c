"""Where the real run finds the courier lab's own files (src/courier): its schema,
and its reference solution (the fairness control, and the tests' known-good file).
"""

import os

COURIER_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src", "courier"))
SCHEMA_SQL = os.path.join(COURIER_DIR, "schema.sql")
REFERENCE = os.path.join(COURIER_DIR, "reference.py")
