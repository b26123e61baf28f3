"""The environment a command reads besides its settings, checked in one line before anything is written:
HF_ENDPOINT (huggingface_hub and the offline probe read it in every command) and, for a run logging to W&B
online, an API key (W&B would fail on its absence after the model loaded, or wait on a login prompt).
"""

from __future__ import annotations

import netrc
import os
from urllib.parse import urlparse

from gspo.conf.errors import GspoError
from gspo.vocab.choices import Wandb

WANDB_HOST = "api.wandb.ai"


def check_hf_endpoint() -> None:
    """HF_ENDPOINT, when set, is an http(s) URL with a host (a mirror's, e.g. https://hf-mirror.com)."""
    given = os.environ.get("HF_ENDPOINT")
    if given is None:  # an empty one is huggingface_hub's endpoint too (it reads the variable as set): checked
        return
    try:
        url = urlparse(given)
        url.port  # noqa: B018 - raises on a port that is no number
        ok = url.scheme in ("http", "https") and bool(url.hostname) and not any(c.isspace() for c in given)
    except ValueError:
        ok = False
    if not ok:
        raise GspoError(f"HF_ENDPOINT={given!r} is not an http(s) URL with a host (e.g. https://huggingface.co or a "
                        "mirror's https://hf-mirror.com): fix it, or unset it for the Hugging Face hub")


def wandb_key_available() -> bool:
    """Whether W&B can log in without asking: WANDB_API_KEY, or a netrc login for its host (WANDB_BASE_URL's)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "")).hostname or WANDB_HOST
    try:
        return bool(netrc.netrc().authenticators(host))
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def check_wandb_online(setting: str) -> None:
    """logger.wandb=online needs an API key: one line before a run folder is written, not W&B's error (or its login
    prompt, which a job cannot answer) after the model loaded."""
    if setting == Wandb.ONLINE and not wandb_key_available():
        raise GspoError("logger.wandb=online but no W&B API key is set (WANDB_API_KEY, or `wandb login`, which writes "
                        "~/.netrc): log in, or use logger.wandb=offline (synced later with `wandb sync`) or auto")
