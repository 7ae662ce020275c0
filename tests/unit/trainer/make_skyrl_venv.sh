#!/usr/bin/env bash
# Builds the throwaway venv that lets tests/unit/trainer/test_skyrl_overrides.py validate our overrides with SkyRL's
# own SkyRLTrainConfig + validate_cfg, load our parquet with SkyRL's PromptDataset and run our reward as a real
# skyrl-gym environment (no GPU needed for any of it).
# SkyRL targets Python 3.12; on 3.11 the test shims typing.TypedDict. --no-deps keeps vLLM/flash-attn out; the
# listed packages are what `skyrl.train.config` and `skyrl_gym` import. ~5 GB (torch), cached under MMRL_CACHE.
set -euo pipefail
CACHE=${MMRL_CACHE:-$HOME/.cache/mmrl}
VENV=${1:-$CACHE/skyrl-venv}
UV=${UV:-$(command -v uv || echo "$CACHE"/venv-*/bin/uv)}
export UV_CACHE_DIR=${UV_CACHE_DIR:-$CACHE/uv}
"$UV" venv -q --python "${PYTHON:-python3}" "$VENV"
"$UV" pip install -q --python "$VENV/bin/python" --no-deps skyrl==0.3.0 skyrl-gym==0.4.0
"$UV" pip install -q --python "$VENV/bin/python" omegaconf pyyaml pandas requests loguru pydantic aiohttp pillow \
  typing_extensions jaxtyping multiprocess torchdata \
  "transformers>=5.6.1,<=5.8.0" "datasets>=4.0.0" torch==2.15.0 ray==2.60.0
"$VENV/bin/python" -c "import typing, typing_extensions; typing.TypedDict = typing_extensions.TypedDict; \
from skyrl.train.config import SkyRLTrainConfig; import skyrl_gym; print('skyrl venv ready:', '$VENV')"
