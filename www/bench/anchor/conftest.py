"""Options and fixtures of the pytest anchor (README.md): which solution file to
grade, the run's seed, and the lab's time limit for the whole run."""

import contextlib
import importlib.util
import os
import pathlib
import signal
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
REFERENCE = REPO / "src" / "deliver_once" / "reference.py"
COURSE_SEED = 1042  # src/lab.rs: the seed a run uses unless told otherwise
TIME_LIMIT_S = 8.0  # the lab's limit for a whole run (src/deliver_once/mod.rs)


def pytest_addoption(parser):
    parser.addoption("--solution", default=os.environ.get("ANCHOR_SOLUTION"),
                     help="the learner's .py file to grade (or $ANCHOR_SOLUTION)")
    parser.addoption("--seed", type=int, default=COURSE_SEED,
                     help="the run's seed, mixed into the differential test's inputs")


def pytest_sessionstart(session):
    if not session.config.getoption("--solution"):
        raise pytest.UsageError("pass the file to grade: --solution PATH (or $ANCHOR_SOLUTION)")
    global _deadline
    _deadline = time.monotonic() + TIME_LIMIT_S


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def learner(request):
    """The learner's module. A file that fails to load (syntax error, an exception at
    import) errors every test, as in the real grader; pytest caches the error."""
    # No bytecode file for a file that is graded once.
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        with _limited():
            return _load("solution", request.config.getoption("--solution"))
    finally:
        sys.dont_write_bytecode = saved


@pytest.fixture(scope="session")
def reference():
    return _load("reference_solution", REFERENCE)


@pytest.fixture(scope="session")
def run_seed(request):
    return request.config.getoption("--seed")


_deadline = None  # the run's end on the monotonic clock (loading plus every test)


def _timeout(signum, frame):
    raise TimeoutError(f"the run reached the lab's limit of {TIME_LIMIT_S:g} s")


_armed = False


@contextlib.contextmanager
def _limited():
    global _armed
    if _armed:  # already inside a limited stretch: its alarm covers this one
        yield
        return
    left = _deadline - time.monotonic()
    if left <= 0:
        pytest.fail("Not run: the run had already reached its time limit.", pytrace=False)
    old = signal.signal(signal.SIGALRM, _timeout)
    signal.setitimer(signal.ITIMER_REAL, left)
    _armed = True
    try:
        yield
    finally:
        _armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(autouse=True)
def time_limit():
    """The lab's limit for the whole run, as in the real grader: an endless loop
    fails its test, and the tests after it fail at once without running."""
    with _limited():
        yield
