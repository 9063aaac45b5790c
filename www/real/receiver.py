"""The webhook receiver of the courier lab's real run: an HTTP server that hands
each webhook the provider posts to the learner's on_webhook, on the run's
PostgreSQL; on loopback, or on a Unix socket the run made and hands it (the run's
own receiver is sandboxed, with no network).

    python receiver.py --solution FILE --dsn DSN [--listen-fd N] [--password-stdin]

Prints its URL on the first line of stdout (or "listening", with --listen-fd). A
webhook that on_webhook raises on (the database restarting, say) is answered 500,
so the provider sends it again; taken, it is answered 204. SIGTERM ends it.
"""

import argparse
import http.server
import json
import signal
import socket
import sys
import traceback

import labdb
import pieces

MAX_BODY_BYTES = 64 * 1024


def make_handler(solution, db):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            try:
                n = int(self.headers.get("Content-Length") or 0)
                if not 0 < n <= MAX_BODY_BYTES:
                    return self._answer(400)
                e = json.loads(self.rfile.read(n))
                event = pieces.Event(str(e["event_id"]), str(e["key"]), str(e["message_id"]), str(e["status"]))
            except (ValueError, KeyError, TypeError):
                return self._answer(400)
            try:
                solution.on_webhook(db, event)
            except Exception:
                # Not taken: the provider sends it again. The connection's
                # transaction, if the piece left one, is not carried over.
                traceback.print_exc(limit=3, file=sys.stderr)
                try:
                    db.rollback()
                except Exception:
                    pass
                return self._answer(500)
            self._answer(204)

        def _answer(self, status):
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    return Handler


class UnixHTTPServer(http.server.HTTPServer):
    """http.server on a listening Unix socket it is handed (the run made it, in its
    own folder, where the provider posts; the sandbox cannot create one there)."""

    address_family = socket.AF_UNIX

    def __init__(self, fd, handler):
        super().__init__(None, handler, bind_and_activate=False)
        self.socket.close()
        self.socket = socket.socket(fileno=fd)

    def get_request(self):
        conn, _ = self.socket.accept()
        return conn, ("unix", 0)  # BaseHTTPRequestHandler reads a (host, port)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--solution", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--listen-fd", type=int,
                   help="serve on this inherited, listening Unix socket (the run's, when sandboxed: no network)")
    p.add_argument("--password-stdin", action="store_true", help="the role's password is stdin's first line")
    a = p.parse_args(argv)
    dsn = labdb.dsn_with_password(a.dsn, sys.stdin.readline()) if a.password_stdin else a.dsn
    solution = pieces.load_solution(a.solution)
    db = labdb.Connection(dsn)
    if a.listen_fd is None:
        server = http.server.HTTPServer(("127.0.0.1", 0), make_handler(solution, db))
        url = f"http://127.0.0.1:{server.server_address[1]}/webhook"
    else:
        server = UnixHTTPServer(a.listen_fd, make_handler(solution, db))
        url = "listening"
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
