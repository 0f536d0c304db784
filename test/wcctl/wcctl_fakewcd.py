#!/usr/bin/env python3
# A stand-in for wcd in wcctl's tests (wcctl start --wcd PATH): takes the
# device's flock, logs progress lines, writes the ready file atomically as
# wcd does, and on SIGTERM removes .sock/.ready and exits 0. What a rank
# does is chosen per tp_rank through the environment:
#   FAKE_LOAD_S       seconds of "loading" before ready (default 0.3)
#   FAKE_FAIL         "TP:exit:CODE", "TP:kill" (SIGKILL itself), "TP:hang"
#                     (never ready), "TP:die_after_ready:CODE" (exits
#                     with CODE on SIGUSR1, once ready: --foreground tests)
#   FAKE_FAIL_AFTER   seconds into loading before the failure (default 0.2)
#   FAKE_IGNORE_TERM  set: ignore SIGTERM (only SIGKILL stops it)
#   FAKE_TERM_DIRTY   set: SIGTERM kills it (its files stay behind)
#   FAKE_TIME_DIR     where a dying rank writes its CLOCK_MONOTONIC ns
#                     (file exit-PID) just before it exits
import fcntl, os, signal, sys, time

args = sys.argv[1:]
opt = {}
i = 0
while i < len(args):
    if args[i].startswith('--') and i + 1 < len(args) and not args[i + 1].startswith('--'):
        opt[args[i]] = args[i + 1]
        i += 2
    else:
        opt[args[i]] = '1'
        i += 1
dev = opt['--device']
name = 'host-' + dev[5:] if dev.startswith('host:') else dev
prefix = os.path.join(opt['--runtime-dir'], name)
tp = int(opt.get('--tp-rank', '0'))
load_s = float(os.environ.get('FAKE_LOAD_S', '0.3'))
fail_after = float(os.environ.get('FAKE_FAIL_AFTER', '0.2'))
fail = os.environ.get('FAKE_FAIL', '')
mode = None
if fail and int(fail.split(':')[0]) == tp:
    mode = fail.split(':')[1:]
pid = os.getpid()


def log(msg):
    sys.stderr.write(time.strftime('%Y-%m-%dT%H:%M:%S') + '.000Z INFO  wcd: ' + msg + '\n')
    sys.stderr.flush()


def die(code=None, sig=None):
    tdir = os.environ.get('FAKE_TIME_DIR')
    if tdir:
        with open(os.path.join(tdir, 'exit-%d' % pid), 'w') as f:
            f.write('%d\n' % time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    if sig:
        os.kill(pid, sig)
    os._exit(code)


lockfd = os.open(prefix + '.lock', os.O_RDWR | os.O_CREAT, 0o600)
try:
    fcntl.flock(lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    log('error: device %s is owned by a running daemon' % name)
    sys.exit(1)
for s in ('.sock', '.ready'):
    try:
        os.unlink(prefix + s)
    except FileNotFoundError:
        pass

stop = False


def on_term(signo, frame):
    global stop
    stop = True


if os.environ.get('FAKE_IGNORE_TERM'):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif not os.environ.get('FAKE_TERM_DIRTY'):
    signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
if mode and mode[0] == 'die_after_ready':
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1, signal.SIGTERM])
log('loading %s on %s (tp_rank=%d)' % (opt.get('--model'), name, tp))
total = 4 << 30
t0 = time.monotonic()
while True:
    el = time.monotonic() - t0
    if mode and mode[0] in ('exit', 'kill') and el >= fail_after:
        log('error: simulated failure')
        if mode[0] == 'exit':
            die(code=int(mode[1]))
        die(sig=signal.SIGKILL)
    if stop:
        os._exit(0)
    if el >= load_s and not (mode and mode[0] == 'hang'):
        break
    log('progress: %d/%d bytes, %.2f GB/s' % (min(el / load_s, 1) * total, total, 12.5))
    time.sleep(0.05)

open(prefix + '.sock', 'w').close()
tmp = prefix + '.ready.tmp.%d' % pid
with open(tmp, 'w') as f:
    f.write('pid=%d\nsocket=%s.sock\ndevice=%s\nidentity=%s\nversion=1\n'
            'tensors=7\nbytes=%d\nload_seconds=%.3f\nmodel=%s\n'
            'tp_size=%s\ntp_rank=%d\npp_size=%s\npp_rank=%s\nstate=ready\n'
            % (pid, prefix, name, '0' * 32, total, time.monotonic() - t0,
               opt.get('--model'), opt.get('--tp-size', '1'), tp,
               opt.get('--pp-size', '1'), opt.get('--pp-rank', '0')))
os.rename(tmp, prefix + '.ready')
log('ready')
if mode and mode[0] == 'die_after_ready':
    if signal.sigwait([signal.SIGUSR1, signal.SIGTERM]) == signal.SIGUSR1:
        die(code=int(mode[1]))
    stop = True
while not stop:
    signal.pause()
for s in ('.sock', '.ready'):
    try:
        os.unlink(prefix + s)
    except FileNotFoundError:
        pass
log('stopped')
os._exit(0)
