"""A replica's gateway as the operator meets it, for cluster tests on kwok pods (which run no container): the admin
API of `mmrl_api.gateway_contract` (list, load, unload), keyed by the server's admin key, holding in memory whatever
it is told to load. It stages and checks nothing; the real gateway's contract with the operator and with vLLM is
tested in tests/unit/operator/test_gateway_admin.py and tests/e2e (test_gateway_vllm.py, test_shared_serving.py).

``python tests/support/fake_gateway.py KEY_FILE`` serves on every interface at the gateway's port (run it in the
pod's network namespace: the apiserver's pod proxy dials the pod's IP)."""

from __future__ import annotations

import hmac
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mmrl_api.gateway_contract import ADAPTERS, ADMIN_KEY_HEADER, LOAD, PORT, UNLOAD, Listing, LoadRequest

HELD: dict[str, str] = {}  # name -> digest


class Handler(BaseHTTPRequestHandler):
    key = ""

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _admitted(self) -> bool:
        if hmac.compare_digest(self.headers.get(ADMIN_KEY_HEADER, ""), self.key):
            return True
        self._send(401, {"message": "no or wrong admin key"})
        return False

    def do_GET(self) -> None:
        if self.path != ADAPTERS:
            return self._send(404, {"message": "not found"})
        if not self._admitted():
            return None
        held = {name: {"digest": digest, "loaded": True} for name, digest in HELD.items()}
        listing = Listing.model_validate({"adapters": held, "vllm": {n: "" for n in HELD}, "staged": []})
        return self._send(200, listing.model_dump(by_alias=True))

    def do_POST(self) -> None:
        if self.path not in (LOAD, UNLOAD):
            return self._send(404, {"message": "not found"})
        if not self._admitted():
            return None
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == LOAD:
            ask = LoadRequest.model_validate(body)
            HELD[ask.name] = ask.digest
        else:
            HELD.pop(str(body.get("name")), None)
        return self._send(200, {"ok": True})

    def log_message(self, format: str, *args: Any) -> None:
        print(f"{self.command} {self.path} -> {args[1] if len(args) > 1 else ''}", flush=True)


def main(argv: list[str]) -> int:
    Handler.key = Path(argv[1]).read_text().strip()
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    print(f"fake gateway on {PORT}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
