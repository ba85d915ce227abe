"""Error replies, in Disque's exact words (one place for each)."""

from __future__ import annotations

from typing import Final


class ReplyError(Exception):
    """Raised inside a command to abort it with an error reply (text without '-')."""

    __slots__ = ("msg",)

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg


SYNTAX: Final = "ERR syntax error"
NACK_DELAY: Final = "ERR Invalid DELAY: expected seconds >= 0"
NOT_INTEGER: Final = "ERR value is not an integer or out of range"
TIMEOUT_INVALID: Final = "ERR timeout is not an integer or out of range"
TIMEOUT_NEGATIVE: Final = "ERR timeout is negative"
BADID: Final = "BADID Invalid Job ID format."
NOJOB: Final = "NOJOB Job not known in the context of this node."
PAUSED: Final = "PAUSED Queue paused in input, try later"
NOREPL: Final = "NOREPL Not enough reachable nodes for the requested replication level"
LEAVING: Final = "LEAVING This node is leaving the cluster, please connect to a different one"
MAXLEN: Final = "MAXLEN Queue is already longer than the specified MAXLEN count"
OOM: Final = "OOM command not allowed when used memory > 'maxmemory'."
NOAUTH: Final = "NOAUTH Authentication required."
INVALID_PASSWORD: Final = "ERR invalid password"
AUTH_NOT_SET: Final = "ERR Client sent AUTH, but no password is set"
WRONGPASS: Final = "WRONGPASS invalid username-password pair or user is disabled."
RETRY0_REPLICATE: Final = (  # sic: two spaces, as Disque sends it
    "ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"
)
DELAY_GE_TTL: Final = "ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"
REPLICATE_RANGE: Final = "ERR REPLICATE must be between 1 and 65535"
TTL_RANGE: Final = "ERR TTL must be a number > 0"
RETRY_RANGE: Final = "ERR RETRY time must be a non negative number"
DELAY_RANGE: Final = "ERR DELAY time must be a non negative number"
MAXLEN_RANGE: Final = "ERR MAXLEN must be a positive number"
COUNT_RANGE: Final = "ERR COUNT must be a number greater than zero"
OUT_OF_RANGE: Final = "ERR value is out of range"
BAD_CURSOR: Final = "ERR invalid cursor or option name"
BAD_STATE: Final = "ERR Invalid job state name"
BAD_REPLY_TYPE: Final = "ERR Invalid REPLY type, try ID or ALL"
# disquepy extensions (ADDJOB IDEMPOTENT, GETJOB TOKEN)
IDEM_RANGE: Final = "ERR IDEMPOTENT key must be 1 to 256 bytes"
IDEM_BUSY: Final = (
    "TRYAGAIN The job added with this IDEMPOTENT key is still being replicated, try again later"
)
QGET_COUNT_RANGE: Final = "ERR COUNT must be 1 to 10000"
EV_IDEM_BUSY: Final = (
    "TRYAGAIN The event added with this IDEMPOTENT key is still being replicated, try again "
    "later"
)
TOKEN_RANGE: Final = "ERR TOKEN must be 1 to 256 bytes"
TOOLATE: Final = (
    "TOOLATE Half of job TTL already elapsed, you are no longer allowed to postpone the "
    "next delivery."
)


def unknown_command(name: bytes) -> str:
    return f"ERR unknown command '{name.decode('utf-8', 'replace')}'"


def noperm(user: str, name: str) -> str:
    """Redis's refusal of a command the user's ACL rules do not allow."""
    return f"NOPERM User {user} has no permissions to run the '{name}' command"


def noperm_queue(user: str, what: str) -> str:
    """A queue (or ``job <id>``, whose queue this node does not know) outside the
    user's queue patterns."""
    if what.startswith("job "):
        return (f"NOPERM User {user} has no permissions to change {what}: this node does "
                "not know the job, so neither its queue")
    return f"NOPERM User {user} has no permissions to access the '{what}' queue"


def body_too_big(size: int, limit: int) -> str:
    """ADDJOB of a body over job-max-body-size (disquepy)."""
    return (f"ERR job body too big: {size} bytes, over job-max-body-size ({limit} bytes; "
            f"CONFIG SET job-max-body-size raises it)")


def too_large(option: str, limit: int) -> str:
    """A TTL, RETRY or DELAY C Disque would wrap at 32 bits: refused (it could be
    neither replicated nor reloaded), saying so."""
    return f"ERR {option} is too large: it must be less than {limit} seconds"


def wrong_arity(name: str) -> str:
    return f"ERR wrong number of arguments for '{name}' command"
# consumer groups (bananaq's commands, core/groups.py)
EXPIRE_RANGE: Final = "ERR expireSeconds must be a number of seconds greater than zero"
EX_RANGE: Final = "ERR EX must be a non negative number of seconds"
NOTIFY_TIMEOUT: Final = "ERR timeout must be a non negative number of seconds"
BAD_EVENT_ID: Final = "BADID Invalid event ID format."
MAXDELIVERIES_RANGE: Final = "ERR MAXDELIVERIES must be between 1 and 65535"
