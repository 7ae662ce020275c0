"""What a credential looks like in a job spec, so that none is ever written into one.

A spec is readable by everyone who can read the job, lands in the operator's logs and events, and is copied
into a ConfigMap for the trainer; a credential must instead come from a Secret (`valueFrom.secretKeyRef`).
Two signs give a credential away: a name such as `HF_TOKEN`, `WANDB_API_KEY`, `DB_PASSWORD` or `DATABASE_URL`,
and a URL carrying a password (`postgres://user:pass@host/db`), whatever it is called. Names are matched as
words where a substring would be wrong (`TOKENIZERS_PARALLELISM` is not a token).
"""

from __future__ import annotations

from mmrl_api.rules import Rule

CREDENTIAL_NAME_RE = (
    r"(?i)(SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY"
    r"|TOKEN$|(^|_)TOKEN_|(^|_)KEY$|(^|_)PASS$|(^|_)DATABASE_URL$)"
)
# Character classes are spelled out: `\s` and `\w` mean Unicode to Python and pydantic, ASCII to RE2 (CEL).
URL_WITH_PASSWORD_RE = r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@ \t\n\r\f\v]*:[^/?#@ \t\n\r\f\v]*@"

NOT_A_CREDENTIAL_NAME = Rule(
    CREDENTIAL_NAME_RE,
    "must not look like a credential's name (…TOKEN, …_KEY, …_PASS, …PASSWORD, …SECRET, DATABASE_URL): "
    "pass credentials through trainer.env with valueFrom.secretKeyRef",
    must_match=False,
)
NO_URL_WITH_PASSWORD = Rule(
    URL_WITH_PASSWORD_RE,
    "must not be a URL carrying a password (scheme://user:password@host): pass it through trainer.env with "
    "valueFrom.secretKeyRef",
    must_match=False,
)
