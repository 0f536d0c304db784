# SPDX-License-Identifier: MIT
"""The exceptions: one class per fixed errno meaning of wcache.h.

Every one is a wcache.Error (an OSError) carrying .errno and the library's
sentence (str(e), also .strerror), which says what happened, the value and
what to do next.
"""
import errno as _errno
import re


class Error(OSError):
    """A libwcache call failed; .errno is the code, str(e) the sentence."""

    def __init__(self, code, msg):
        OSError.__init__(self, code, msg)
        self.msg = msg

    def __str__(self):
        return self.msg


class NoDaemon(Error):
    """connect(): no daemon serves the device (ENOENT), or a stale socket
    (ECONNREFUSED). A later call's ENOENT (a model directory or rules file
    that does not exist) is a plain Error."""


class Refused(Error):
    """The daemon refused this process (EACCES: uid not allowed)."""


class IdentityMismatch(Error):
    """The daemon serves another model or layout (ESTALE).

    .fields maps each differing field to (daemon value, engine value)."""

    def __init__(self, code, msg):
        Error.__init__(self, code, msg)
        self.fields = {}
        m = re.search(r"differ \([^)]*\): (.*)\. Start a daemon", msg, re.S)
        for part in (m.group(1).split("; ") if m else []):
            field, sep, rest = part.partition(": daemon=")
            daemon, sep2, engine = rest.rpartition(" engine=")
            if sep and sep2:
                self.fields[field] = (daemon, engine)


class TryAgain(Error):
    """The daemon cannot serve now (EAGAIN): at its client limit, or asleep."""


class DaemonSleeping(TryAgain):
    """The daemon sleeps or is waking (EAGAIN): wake it first (conn.wake())."""


class Busy(Error):
    """Refused while engines hold leases (EBUSY), e.g. sleep while attached."""


class DaemonGone(Error):
    """The daemon closed the connection: it exited (EPIPE)."""


class ReadOnly(Error):
    """A read-write attach the backend refuses (EROFS)."""


class Timeout(Error):
    """No reply within the request timeout (ETIMEDOUT)."""


class ProtocolMismatch(Error):
    """The daemon speaks another protocol version (EPROTONOSUPPORT)."""


class BadReply(Error):
    """A malformed or unexpected reply from the daemon (EBADMSG)."""


class HashMismatch(Error):
    """verify(): a tensor's bytes do not match its hash (EILSEQ)."""


class NoHashes(Error):
    """verify(): the daemon did not hash (wcd --no-hash) (ENODATA)."""


class OutOfOrder(Error):
    """A request out of order, or a bad argument (EINVAL)."""


class NotImplementedByDaemon(Error):
    """The daemon does not implement the request (ENOSYS)."""


class NotServed(Error):
    """wcache.transformers.from_pretrained(fallback="error"): no daemon
    serves that model on that device (none runs, another model or layout,
    asleep, a kwarg it cannot honour zero-copy); str(e) says which, and
    __cause__ is the wcache error behind it where there is one."""


class FallbackWarning(UserWarning):
    """wcache.transformers.from_pretrained loaded with transformers' own
    from_pretrained (a copy from disk) because no daemon serves the model
    there; the message says why."""


_BY_CODE = {
    _errno.ENOENT: NoDaemon,
    _errno.ECONNREFUSED: NoDaemon,
    _errno.EACCES: Refused,
    _errno.ESTALE: IdentityMismatch,
    _errno.EAGAIN: TryAgain,
    _errno.EBUSY: Busy,
    _errno.EPIPE: DaemonGone,
    _errno.ECONNRESET: DaemonGone,
    _errno.EROFS: ReadOnly,
    _errno.ETIMEDOUT: Timeout,
    _errno.EPROTONOSUPPORT: ProtocolMismatch,
    _errno.EBADMSG: BadReply,
    _errno.EILSEQ: HashMismatch,
    _errno.ENODATA: NoHashes,
    _errno.EINVAL: OutOfOrder,
    _errno.ENOSYS: NotImplementedByDaemon,
}


def from_code(code, msg, connecting=False):
    """The exception for a libwcache error (code positive, msg its sentence).
    NoDaemon only for connect's errors (connecting): ENOENT from a later
    call is a file the engine named (a model directory, a rules file, an
    update's directory) that does not exist, with the daemon there."""
    cls = _BY_CODE.get(code, Error)
    if cls is NoDaemon and not connecting:
        cls = Error
    low = (msg or "").lower()
    if cls is TryAgain and ("sleep" in low or "waking" in low):
        cls = DaemonSleeping
    return cls(code, msg or _errno.errorcode.get(code, str(code)))
