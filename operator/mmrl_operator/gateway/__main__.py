"""`python -m mmrl_operator.gateway`: a ModelServer replica's gateway (the operator builds its arguments)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from aiohttp import web

from mmrl_api.adapter_digest import Limits
from mmrl_api.gateway_contract import ADMIN_KEY_DIR, ADMIN_KEY_ITEM, PORT, STORE, VLLM_API_KEY_ENV, VLLM_PORT
from mmrl_operator.gateway.app import Settings, build_app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mmrl_operator.gateway", description=__doc__)
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: every address)")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--upstream", default=f"http://127.0.0.1:{VLLM_PORT}", help="vLLM's base URL (loopback)")
    parser.add_argument("--store", default=STORE, help="the staged copies (an emptyDir vLLM mounts read-only)")
    parser.add_argument("--admin-key-file", default=f"{ADMIN_KEY_DIR}/{ADMIN_KEY_ITEM}")
    parser.add_argument(
        "--adapter-root", action="append", default=[], help="a directory adapters may be staged from (repeatable)"
    )
    parser.add_argument("--max-lora-rank", type=int, help="the server's --max-lora-rank (the adapter rules)")
    parser.add_argument("--max-request-bytes", type=int, default=64 << 20, help="largest client request body")
    parser.add_argument("--max-adapter-bytes", type=int, default=Limits().max_bytes, help="largest adapter")
    parser.add_argument("--max-adapter-files", type=int, default=Limits().max_files, help="most files in an adapter")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("MMRL_LOG_LEVEL", "INFO"), format="[%(asctime)s] %(name)s %(levelname)s %(message)s"
    )
    settings = Settings(
        upstream=args.upstream,
        store=Path(args.store),
        admin_key_file=Path(args.admin_key_file),
        adapter_roots=args.adapter_root,
        max_lora_rank=args.max_lora_rank,
        max_request_bytes=args.max_request_bytes,
        limits=Limits(max_files=args.max_adapter_files, max_bytes=args.max_adapter_bytes),
        vllm_api_key=os.environ.get(VLLM_API_KEY_ENV) or None,
    )
    web.run_app(build_app(settings), host=args.host, port=args.port, access_log=None, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
