"""Runs test scripts inside the SkyRL venv, the one place tests reach SkyRL's own code.

SkyRL cannot share the project's venv (it pins its own transformers and peft, and its full dependencies are GPU-only),
so `make skyrl-venv` builds a separate one keyed by requirements-skyrl.lock, and `make test` points
MMRL_SKYRL_PYTHON at it. Without it the SkyRL tests fail, saying how to build it: they are never skipped.

Importing torch, transformers and SkyRL costs tens of seconds on a shared CPU, so one worker process per pytest run
imports them once and forks a fresh child for each script: every script still gets its own process (its own argv,
stdin, environment and SkyRL registries), but none pays the imports again.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements-skyrl.lock"

# What most scripts import; best effort, so a module this venv cannot import fails in the script that needs it.
_PREIMPORT = (
    "torch",
    "transformers",
    "pyarrow.parquet",
    "skyrl_gym",
    "skyrl.train.config",
    "skyrl.train.utils.utils",
    "skyrl.train.dataset",
    "skyrl.train.generators",
    "peft",
)

_WORKER = r"""
import importlib, json, os, sys, traceback
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as err:
        print(f"preimport {name}: {err!r}", file=sys.stderr, flush=True)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            os.environ.clear()
            os.environ.update(req["env"])
            for fd, path, flags in ((0, req["stdin"], os.O_RDONLY), (1, req["stdout"], os.O_WRONLY),
                                    (2, req["stderr"], os.O_WRONLY)):
                os.dup2(os.open(path, flags), fd)
            sys.stdin = open(0, closefd=False)
            sys.argv = ["-c", *req["args"]]
            exec(compile(req["script"], "<skyrl-test-script>", "exec"), {"__name__": "__main__"})
            rc = 0
        except SystemExit as exit_:
            rc = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, int) and exit_.code is not None:
                print(exit_.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)
"""


def venv_key(lock: Path = LOCK) -> str:
    """The Makefile's SKYRL_KEY: the lock's non-comment lines, hashed."""
    kept = [ln for ln in lock.read_text().splitlines(keepends=True) if not re.match(r"^ *#", ln)]
    return hashlib.sha256("".join(kept).encode()).hexdigest()[:12]


def skyrl_python() -> Path:
    """MMRL_SKYRL_PYTHON, or the venv `make skyrl-venv` builds for this checkout's lock; fails the test otherwise."""
    cache = Path(os.environ.get("MMRL_CACHE", Path.home() / ".cache/mmrl"))
    py = Path(os.environ.get("MMRL_SKYRL_PYTHON") or cache / f"skyrl-venv-{venv_key()}" / "bin" / "python")
    if not py.exists():
        pytest.fail(
            f"no SkyRL venv at {py}: run `make skyrl-venv` (make test builds it and sets MMRL_SKYRL_PYTHON), "
            "or point MMRL_SKYRL_PYTHON at a Python with skyrl==0.3.0 and skyrl-gym==0.4.0",
            pytrace=False,
        )
    return py


class _Worker:
    def __init__(self, python: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="mmrl-skyrl-"))
        self.log = self.dir / "worker.log"
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [str(python), "-c", _WORKER, *_PREIMPORT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
                start_new_session=True,
            )
        self.count = 0
        self.ready = False

    def reply(self, timeout: float) -> dict:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            why = f"timed out after {timeout:.0f} s" if not ready else "exited"
            raise RuntimeError(f"SkyRL worker {why}; its log:\n{self.log.read_text()[-3000:]}")
        return json.loads(line)

    def run(self, script: str, args: tuple[str, ...], stdin: str, timeout: float) -> subprocess.CompletedProcess[str]:
        self.count += 1
        files = {k: self.dir / f"{self.count}.{k}" for k in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(stdin)
        for k in ("stdout", "stderr"):
            files[k].touch()
        req = {"script": script, "args": list(args), "env": dict(os.environ), **{k: str(p) for k, p in files.items()}}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        rc = self.reply(timeout)["rc"]
        out, err = files["stdout"].read_text(), files["stderr"].read_text()
        return subprocess.CompletedProcess(["skyrl-python", "-c", "<script>", *args], rc, out, err)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


_lock = threading.Lock()
_worker: _Worker | None = None


def _stop_worker() -> None:
    if _worker is not None:
        _worker.stop()


atexit.register(_stop_worker)


def start_worker() -> None:
    """Starts the worker's imports without waiting for them, so they overlap the tests that run first."""
    global _worker
    with _lock:
        if _worker is None or _worker.proc.poll() is not None:
            _worker = _Worker(skyrl_python())


def run_skyrl(
    script: str, *args: str, stdin: str = "", timeout: float = 300, fresh: bool = False
) -> subprocess.CompletedProcess[str]:
    """Runs `script` as `python -c script *args` in the SkyRL venv (this checkout's sources importable); its
    stdout, stderr and exit status come back as a CompletedProcess. The worker's first call includes its imports.

    `fresh=True` runs a new interpreter instead of a fork of the worker: for scripts that set environment variables
    SkyRL reads when its modules are imported (skyrl.env_vars), which the worker has already imported."""
    if fresh:
        return subprocess.run(
            [str(skyrl_python()), "-c", script, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )
    start_worker()
    with _lock:
        assert _worker is not None
        if not _worker.ready:
            _worker.reply(timeout)
            _worker.ready = True
        return _worker.run(script, args, stdin, timeout)


def last_json(run: subprocess.CompletedProcess[str]):
    """The JSON document a script printed last, after asserting that it succeeded."""
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


# A multi-turn generator test script's inference engine: SkyRL's RemoteInferenceClient with its HTTP answers scripted.
# The render endpoint applies the tokenizer's chat template (no image features) and records, per render, the replies
# and the images the conversation holds (`renders`); the generate endpoint answers `script[turn]` at the episode's
# turn, whatever the row. The script defines `tokenizer` and `script` first.
SCRIPTED_ENGINE = r"""
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient

assistant = tokenizer.convert_tokens_to_ids("assistant")
renders = []


class ScriptedVLLM(RemoteInferenceClient):
    async def _post(self, url, json, headers=None):
        if url.endswith("/v1/chat/completions/render"):
            messages = json["messages"]
            images = sum(1 for m in messages if isinstance(m["content"], list)
                         for p in m["content"] if p["type"] == "image_url")
            renders.append([sum(1 for m in messages if m["role"] == "assistant"), images])
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
            return {"token_ids": list(ids), "features": None}
        if url.endswith("/inference/v1/generate"):
            turn = json["token_ids"].count(assistant) - 1  # replies so far: the prompt ends in "assistant"
            ids = tokenizer.encode(script[turn], add_special_tokens=False) + [tokenizer.eos_token_id]
            lp = json["sampling_params"].get("logprobs")
            logprobs = {"content": [{"logprob": -0.5} for _ in ids]} if lp is not None else None
            return {"choices": [{"token_ids": ids, "finish_reason": "stop", "logprobs": logprobs}]}
        raise AssertionError(f"unexpected call {url}")

    async def finish_session(self, session_id):
        pass
"""


# The rollout half of a generator test script, as RayPPOTrainer.train runs it: SkyRL's PromptDataset over `parquet`,
# collated and expanded by prepare_generator_input, then the generator BasePPOExp.get_generator picks for `cfg`,
# generating through the script's `ScriptedVLLM` client. The script defines cfg, tokenizer, parquet and ScriptedVLLM
# (SCRIPTED_ENGINE's, say) and registers its environment first; this leaves `generator`, `generator_input` and `out`
# defined.
SCRIPTED_ROLLOUT = r"""
import asyncio
from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend
from skyrl.train.dataset import PromptDataset
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.generators.utils import prepare_generator_input

dataset = PromptDataset([parquet], tokenizer, max_prompt_length=cfg.trainer.max_prompt_length, num_workers=1)
batch = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
generator_input, uids = prepare_generator_input(
    batch,
    cfg.generator.n_samples_per_prompt,
    get_sampling_params_for_backend(cfg.generator.inference_engine.backend, cfg.generator.sampling_params),
    cfg.environment.env_class,
    "train",
    1,
)
engine_url = globals().get("engine_url", "http://scripted-vllm")  # a real vLLM's, where the script has one
client = ScriptedVLLM(proxy_url=engine_url, server_urls=[engine_url], data_parallel_size=1,
                      model_name=cfg.trainer.policy.model.path, tokenizer=tokenizer)
exp = BasePPOExp.__new__(BasePPOExp)  # __init__ starts Ray and the engines; get_generator needs neither
generator = exp.get_generator(cfg, tokenizer, client)
out = asyncio.run(generator.generate(generator_input, disable_tqdm=True))
"""


# A multi-turn generator test's episodes, played by SkyRL: the script defines `tokenizer`, `script` (SCRIPTED_ENGINE),
# `cfg` and `parquet` (SCRIPTED_ROLLOUT) and `registration`, the skyrl_gym.envs.register arguments of its environment.
# Besides SCRIPTED_ROLLOUT's names this leaves `rewards` (each episode's total) and `turns` (its replies) defined.
SCRIPTED_EPISODES = (
    SCRIPTED_ENGINE
    + r"""
import skyrl_gym
skyrl_gym.envs.register(**registration)  # as our SkyRL entry task does
"""
    + SCRIPTED_ROLLOUT
    + r"""
rewards = [sum(r) if isinstance(r, list) else r for r in out["rewards"]]
turns = [sum(1 for a, b in zip([0] + m, m) if a == 0 and b == 1) for m in out["loss_masks"]]
"""
)
