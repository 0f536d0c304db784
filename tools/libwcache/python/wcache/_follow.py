# SPDX-License-Identifier: MIT
"""An engine that follows the daemon's versions (wcache.torch.follow).

    f = wcache.torch.follow(model, conn)        # attaches and binds now
    while serving:
        f.poll()                                # between steps: never blocks
        out = model(batch)

A trainer's update (conn.update_from, or wcctl update from disk) publishes
version N+1 and the daemon sends every lease holder a version notice.
poll() reads the notices already waiting on the connection (one
non-blocking read each: wc_notice_read), and on one newer than the
module's version attaches N+1 and re-binds the module's parameters and
persistent buffers to it (no copy: the module's tensors then point at
N+1's memory); only then is N's Model let go, so the module never runs
without weights, and N's memory goes with its last tensor (the daemon
frees version N when its last lease ends).

The re-bind is load_into's the first time; a version of the same layout
as the last one (every update that kept names, dtypes, shapes and
offsets: Model._same_layout) is re-bound from the plan that bind left
(torch._rebind: the slots and the served names, no module walk and no
name checks), unless the engine replaced a Parameter or a module since
(then load_into again). The cyclic garbage collector is paused during
the switch (its collections would scan the whole program for the few
hundred objects made). N's detach (unmapping 16 GB of pools and a
DETACH round trip: milliseconds) runs on a thread of the follower's
(background=True, the default) after the switch, so the engine's next
forward starts without waiting for it; released() waits for it, and
close() does too. The module
object and its submodules stay the same objects; its Parameters are new
ones over the new memory, with the attributes of those they replace
(load_into's rule), so code holding a Parameter object from before the
switch holds version N's tensor.

A switch that fails leaves the module on version N, bound and mapped, and
raises FollowError saying what to do: a re-attach the daemon refuses (it
went to sleep, another model) is retried at the next poll(); a version
whose tensors no longer fit the module (a layout change: names, dtypes or
shapes) is not retried, since only a module built for it can bind it; a
later version is tried again.

Cost: one attach (libwcache maps N+1's pools) and one re-bind (bench
figures: bench/py/follow_switch.py); nothing when no notice waits, but
one recv on the connection's socket.

Threads: call poll() and wait() from the thread that runs the module (the
switch replaces its Parameters between two of its steps); the
connection's lock serialises them with any other call on conn.
"""
import concurrent.futures
import select
import time
import warnings

from ._core import PendingModel, ReadOnlyWarning
from ._empty import no_gc
from . import errors


class FollowError(RuntimeError):
    """A switch to a new version failed; the module is still bound to the
    version it had (version), and the reason is the message."""

    def __init__(self, msg, version, refused):
        super().__init__(msg)
        self.version = version      # the version the module stays on
        self.refused = refused      # the version it could not take


class Follower:
    """What wcache.torch.follow returns: poll() between steps, wait() to
    block until the next switch, close() to let the current version go.
    version: the version the module is bound to; model: its wcache.Model;
    switches: how many switches it made; times: the last switch's
    {"notice_ns", "attach_ns", "bind_ns", "detach_ns", "switch_ns",
    "rebind"} (monotonic_ns when poll() found the notice, then
    nanoseconds of the attach, of the re-bind, of the old version's
    detach, and of the whole switch; rebind: "plan" when the plan of the
    last bind was used, "load_into" when the module was bound anew). In
    the background, detach_ns is 0 until the detach ended (released())
    and switch_ns does not hold it."""

    def __init__(self, module, conn, model=None, name_map=None, strict=True, attach=None,
                 background=True):
        from .torch import _load_into, _rebind
        self._bind_new, self._rebind = _load_into, _rebind
        self.module = module
        self.conn = conn
        self.name_map = dict(name_map or {})
        self.strict = strict
        self.attach_kw = dict(attach or {})
        if isinstance(model, PendingModel):
            model = model.result()
        if model is None:
            model = conn.attach(**self.attach_kw)
            try:
                self._plan = self._bind(model)
            except BaseException:
                model.detach()
                raise
        else:
            self._plan = None       # bound by the caller: the first switch binds anew
        self.model = model
        self.version = model.version
        self.switches = 0
        self.times = {}
        self._background = background
        self._detacher = None   # the detach thread (an executor, made at the first switch)
        self._retired = None    # its last detach's Future
        self._noticed = 0       # the newest version a notice named
        self._refused = 0       # a version whose layout the module cannot bind
        self._t_notice = 0

    def fileno(self):
        """The connection's socket: readable when a notice waits (select,
        poll, asyncio's add_reader), then call poll()."""
        return self.conn.notice_fd()

    def pending(self):
        """The newest version a notice named that the module is not on
        yet (0: none), from the notices read so far."""
        v = self._noticed
        return v if v > self.version and v != self._refused else 0

    def _read(self):
        """Reads every notice waiting now (never blocks)."""
        while True:
            n = self.conn.read_notice()
            if n is None:
                return
            if n.kind == "version" and n.version > self._noticed:
                self._noticed = n.version
                self._t_notice = time.monotonic_ns()

    def poll(self):
        """Between steps: reads the waiting notices without blocking and,
        on a version newer than the module's, re-attaches and re-binds the
        module to it. True when the module switched; False when there was
        nothing to switch to. FollowError when a switch failed (the module
        is left on its version: see the module's doc)."""
        self._read()
        if not self.pending():
            return False
        return self._switch()

    def wait(self, timeout=None):
        """Blocks (on the connection's socket) until the module switched
        to a newer version: True, or False after timeout seconds (None:
        no bound). For loops and tests that wait on an update."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.poll():
                return True
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            select.select([self.fileno()], [], [], left)

    def _bind(self, model):
        """load_into (with the follower's name_map and strict) of model;
        the plan for the next re-bind."""
        return self._bind_new(self.module, model, self.strict, self.name_map, False)[1]

    def _switch(self):
        want = self.pending()
        self.released()             # the last switch's detach, if it still runs
        t0 = time.monotonic_ns()
        try:
            new = self.conn.attach(**self.attach_kw)
        except errors.Error as e:
            raise FollowError(
                "wcache.torch.follow: the daemon published version %d, but the re-attach "
                "failed (%s): the module stays on version %d; poll() tries again (wake the "
                "daemon if it sleeps)" % (want, e, self.version), self.version, want) from e
        t1 = time.monotonic_ns()
        if new.version <= self.version:     # an older one serves again (a reload)
            new.detach()
            self._noticed = 0
            return False
        why = None
        how = "plan"
        try:
            # the first attach warned of read-only memory; each version's
            # Model would again
            with warnings.catch_warnings(), no_gc():
                warnings.simplefilter("ignore", ReadOnlyWarning)
                plan = None
                if self._plan is not None and self.model._same_layout(new):
                    plan = self._rebind(self._plan, new)
                if plan is None:
                    how = "load_into"
                    plan = self._bind(new)
                self._plan = plan
        except Exception as e:
            why = str(e)
        if why is not None:
            # raised here, not in the except block: the LoadError's
            # traceback holds load_into's frame, and in it N+1's tensors,
            # whose lease an engine keeping the FollowError would hold
            self._refused = max(new.version, want)
            v = new.version
            new.detach()
            del new
            raise FollowError(
                "wcache.torch.follow: version %d does not fit the module (%s); the module "
                "stays on version %d, whose memory it keeps mapped (the daemon holds it, and "
                "takes no further update, until this engine lets it go: close() the follower "
                "and drop the module). Build a module for the new layout and bind it with "
                "load_into (or pass name_map= for renamed tensors)"
                % (v, why, self.version), self.version, v)
        t2 = time.monotonic_ns()
        old, self.model = self.model, new
        self.version = new.version
        self.switches += 1
        self.times = {"notice_ns": self._t_notice, "attach_ns": t1 - t0,
                      "bind_ns": t2 - t1, "detach_ns": 0, "switch_ns": 0, "rebind": how}
        # N ends with its last tensor (none in the module now): its DETACH
        # and unmapping, here or on the detach thread
        if self._background:
            self._detach_later(old)
            self.times["switch_ns"] = time.monotonic_ns() - t0
        else:
            old.detach()
            t3 = time.monotonic_ns()
            self.times.update(detach_ns=t3 - t2, switch_ns=t3 - t0)
        return True

    def _detach_later(self, old):
        """Hands old (a Model) to the detach thread, made the first time:
        a one-thread executor, whose thread concurrent.futures ends and
        joins at the interpreter's exit (before it finalises: a thread
        woken then would end under C frames, std::terminate in torch's)
        and when the follower closes."""
        if self._detacher is None:
            self._detacher = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="wcache-follow-detach")
        self._retired = self._detacher.submit(_detach, old, self.times)

    def released(self, timeout=None):
        """Waits for the last switch's detach of the old version (on the
        detach thread) to end: True when it did (or none runs), False
        after timeout seconds. A detach that failed warns here (the old
        version is then held until the process ends or its tensors go)."""
        f = self._retired
        if f is None:
            return True
        try:
            e = f.exception(timeout)
        except concurrent.futures.TimeoutError:
            return False
        self._retired = None
        if e is not None:
            warnings.warn("wcache.torch.follow: the old version's detach failed: %s" % e,
                          RuntimeWarning, stacklevel=2)
        return True

    def close(self):
        """Stops following (the old version's detach, if one runs, waited
        for); the module keeps its tensors (and with them the lease on its
        version) while it lives."""
        self.released()
        if self._detacher is not None:
            self._detacher.shutdown()       # its thread ended and joined
            self._detacher = None
        m, self.model, self._plan = self.model, None, None
        if m is not None:
            m.detach()

    def __repr__(self):
        return "<wcache.torch.Follower version %d, %d switch(es)>" % (self.version, self.switches)


def _detach(old, times):
    """The detach thread's job: old's detach, its time in the switch's
    times."""
    t = time.monotonic_ns()
    try:
        old.detach()
    finally:
        times["detach_ns"] = time.monotonic_ns() - t


def follow(module, conn, model=None, name_map=None, strict=True, background=True, **attach):
    """An engine's module that follows the daemon's versions: returns a
    Follower whose poll(), called between steps, re-binds the module in
    place to each new version the daemon announces (see wcache/_follow.py).

    model: the wcache.Model (or PendingModel) the module is bound to now;
    None attaches (conn.attach(**attach)) and binds it here. name_map and
    strict are load_into's, used at every switch. attach: conn.attach's
    arguments for the re-attaches (model_dir=, tp_size=, ...); the default
    takes whatever the daemon serves, which is the connection's model and
    rank (a daemon serves one). background: the old version's detach on
    a thread after each switch (True), or inside poll() (False)."""
    return Follower(module, conn, model=model, name_map=name_map, strict=strict, attach=attach,
                    background=background)
