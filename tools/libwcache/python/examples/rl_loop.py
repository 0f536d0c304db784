# SPDX-License-Identifier: MIT
"""An RL loop on one GPU with wcache: a trainer process and an engine
process around one wcd, no disk between them (the package README's "An RL
loop on one GPU" shows the loop below; test/py/test_rl_loop.py runs this
file on the host backend, test/py/test_gpu_rl_loop.py on a GPU).

    wcctl start --model DIR --device 0
    python3 rl_loop.py DIR --device 0 --steps 3

The engine generates; the trainer trains a step on what it generated and
pushes its weights as the next version (wcache.torch.update_from); the
engine follows (wcache.torch.follow re-binds its module to the new version
between two steps, no copy) and generates again. At the end the engine's
tokens are compared with the trainer's own, from its own weights: "equal"
means the engine served exactly the trainer's bytes.

The models are transformers' AutoModelForCausalLM (bfloat16) unless
--build MODULE:FUNCTION names another builder: FUNCTION(model_dir, empty,
device) returns the module, on the meta device when empty (for load_into),
else with the checkpoint's weights, trainable. The loss is a stand-in for
an RL objective (the rollout's own tokens as targets, so the step moves
the weights); what matters here is the flow of the weights.
"""
import argparse
import importlib
import multiprocessing
import time

import torch

import wcache
import wcache.torch

PROMPT = [[1, 17, 300, 42, 7]]


def build(args, empty):
    """The module of args.model_dir: empty (parameters on meta) for the
    engine, with its weights for the trainer."""
    if args.build:
        mod, fn = args.build.split(":")
        return getattr(importlib.import_module(mod), fn)(args.model_dir, empty, args.torch_device)
    import transformers
    if empty:
        return wcache.torch.empty_pretrained(args.model_dir, dtype=torch.bfloat16,
                                             buffers_device=args.torch_device,
                                             attn_implementation="sdpa").eval()
    return transformers.AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").to(args.torch_device)


# --- the loop (the package README's block, line for line) ---
def generate(model, n):
    """n greedy tokens after PROMPT (a whole forward per token: no cache)."""
    ids = torch.tensor(PROMPT, device=next(model.parameters()).device)
    with torch.no_grad():
        for _ in range(n):
            out = model(ids)
            logits = getattr(out, "logits", out)       # transformers' output, or a tensor
            ids = torch.cat([ids, logits[:, -1:].argmax(-1)], 1)
    return ids


def engine(args, pipe):
    conn = wcache.connect(device=args.device, runtime_dir=args.runtime_dir)
    model = build(args, empty=True)                    # parameters on meta
    f = wcache.torch.follow(model, conn)               # attach + load_into: served memory
    for step in range(args.steps):
        pipe.send((f.version, generate(model, args.tokens).tolist()))   # generate
        version = pipe.recv()                          # the trainer published it
        f.wait(timeout=60)                             # follow: re-bind between steps
        assert f.version == version, (f.version, version)
        pipe.send(f.times["switch_ns"])
    pipe.send((f.version, generate(model, args.tokens).tolist()))   # generate again


def trainer(args, pipe):
    conn = wcache.connect(device=args.device, runtime_dir=args.runtime_dir)
    model = build(args, empty=False)                   # its own weights, trainable
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        version, ids = pipe.recv()                     # the engine's rollout
        ids = torch.tensor(ids, device=args.torch_device)
        out = model(ids[:, :-1])
        logits = getattr(out, "logits", out)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()                                # a step on what the engine generated
        opt.step()
        opt.zero_grad()
        r = wcache.torch.update_from(conn, model)      # version N+1 from memory, no disk
        pipe.send(r.version)
        print("step %d: rollout of version %d, loss %.4f, version %d published in %.1f ms, "
              "the engine switched in %.2f ms" % (step, version, loss.item(), r.version,
                                                   r.seconds * 1e3, pipe.recv() / 1e6), flush=True)
    version, ids = pipe.recv()
    mine = generate(model, args.tokens).tolist()
    print("generated again on version %d: %s; the trainer's own: %s" % (
        version, "equal" if ids == mine else "DIFFERENT", mine), flush=True)
    return ids == mine
# --- end of the loop ---


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--device", default="0", help="the wcd's device: 0, host:NAME, ...")
    p.add_argument("--runtime-dir", default=None)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--build", default=None, help="MODULE:FUNCTION(model_dir, empty, device)")
    args = p.parse_args()
    args.torch_device = "cpu" if args.device.startswith("host") else "cuda:%s" % args.device
    ctx = multiprocessing.get_context("spawn")         # CUDA in both: spawn, never fork
    ours, theirs = ctx.Pipe()
    eng = ctx.Process(target=engine, args=(args, theirs))
    t0 = time.monotonic()
    eng.start()
    try:
        same = trainer(args, ours)
    finally:
        eng.join(120)
    print("%d steps in %.1f s; engine exit %s" % (args.steps, time.monotonic() - t0, eng.exitcode))
    raise SystemExit(0 if same and eng.exitcode == 0 else 1)


if __name__ == "__main__":
    main()
