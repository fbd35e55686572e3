"""A plain static host for the page's tests: Python's own http.server over a folder, on 127.0.0.1
at a free port, with no special headers (no COOP/COEP: as GitHub Pages or a university's web space
would serve). With --cors it stands in for a model host such as Hugging Face (Access-Control-Allow-
Origin: *). It prints "serving PORT", logs each GET as "GET PATH [RANGE]" on stdout, and stops by itself
after --exit-after seconds.

    python3 tests/e2e/static_host.py FOLDER [--cors] [--exit-after 600]
"""

import argparse
import functools
import http.server
import sys
import threading


class Handler(http.server.SimpleHTTPRequestHandler):
    cors = False

    def end_headers(self):
        if self.cors:
            self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()

    def do_GET(self):
        # A range asked for is logged after the path (this host ignores it: the whole file comes).
        asked = self.headers.get("Range")
        print(f"GET {self.path}{' ' + asked if asked else ''}", flush=True)
        super().do_GET()

    def log_message(self, format, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--cors", action="store_true")
    parser.add_argument("--exit-after", type=float, default=600)
    args = parser.parse_args()
    Handler.cors = args.cors
    handler = functools.partial(Handler, directory=args.folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    print(f"serving {server.server_address[1]}", flush=True)
    timer = threading.Timer(args.exit_after, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
