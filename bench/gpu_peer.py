#!/usr/bin/env python3
"""PyTorch-Python peer of one cell of the GPU benchmark (bench/gpu_peers.py starts it).

    python bench/gpu_peer.py EXPERIMENT.toml [--compile] [--data device|host] [--bf16 masters|autocast]
        [--warmup N]

Reads the experiment file gpu_peers.py wrote for Strata's run of the same cell and trains what it
describes on one device, the way a PyTorch user would: the same layers as Strata's model plugin
(and the same initialization, drawn from the same seeded generator in the same order), the same
data in the same visiting order, the same global batch and micro-batches, AdamW with the same
hyperparameters and kernels (`[optimizer] fused`: torch.optim.AdamW(fused=True), else
foreach=True: Strata's multi-tensor path), the same clipping. Prints one JSON line.

Models (Strata's option names, read from [model]):
  mlp    Flatten, Linear + ReLU per hidden width, Linear head (pytorch_peer.mlp_units)
  cnn    conv 3x3 + GroupNorm + ReLU + max-pool 2 per block, FC + ReLU, head (pytorch_peer.cnn_units)
  vit    models/vit/vit.cpp op for op: Conv2d patch embedding, class token, position embedding,
         pre-norm blocks (qkv Linear, SDPA, proj, GELU MLP), final LayerNorm, class-token or mean
         pooling; timm's initialization as Strata draws it (trunc-normal 0.02 by inverse CDF)
  llama  transformers' LlamaForCausalLM (SDPA attention, no cache), shapes from Strata's preset
         and options; weights drawn N(0, 0.02) from the seeded CPU generator in Strata's order
Data: Strata's `synthetic` dataset regenerated (pytorch_peer.synthetic_train), or the `text`
dataset's file read byte by byte (the byte tokenizer) and cut into Strata's windows.

Precision: float32 throughout when [precision] param_dtype is float32 (PyTorch's default TF32
settings, as Strata leaves them: no TF32 matmuls, TF32 cuDNN convolutions). With bfloat16:
  masters   (default) what Strata does: bfloat16 parameters and activations, every bfloat16
            gradient added into a float32 gradient as soon as autograd has it (a
            post-accumulate-grad hook; so micro-batches accumulate in float32), clipping and AdamW
            on float32 masters, masters copied back into the bfloat16 parameters after the step
  autocast  float32 parameters, gradients and AdamW; forward and loss under
            torch.autocast(bfloat16) (PyTorch's usual mixed precision; different memory and casts)
The logits are cast to float32 for the loss on both sides (Strata's Precision::output).

Data placement (--data): `device` (default) keeps the training set on the device and gathers each
micro-batch there (the peer's best case: no host-to-device copy); `host` keeps it on the host,
gathers each micro-batch there, pins it and copies it with non_blocking=True (Strata's way, minus
its loader thread, which reads one micro-batch ahead). Memory figures leave the resident dataset
out, as Strata's do (its dataset lives on the host).

Timed span of a step (Strata's `step_time_s`): fetch the micro-batches, forward, loss, backward,
clipping, optimizer step, gradient reset. On CUDA between two CUDA events recorded on the current
stream around the span (Strata's StepStats does the same); on the CPU on the host clock. The loss
stays on the device and is read at Strata's log steps (1, every [log] every, the last), outside
the span. `step_time_s` is the median over all steps, the first ones included (compilation too,
with --compile), as Strata's is; `step_time_after_warmup_s` leaves out the first --warmup steps.

Memory (CUDA): the caching allocator's peaks over the training steps (reset after setup, as Strata
does): `peak_tensor_bytes` = max_memory_allocated, `peak_bytes` = max_memory_reserved, each minus
what the resident dataset takes (`data_bytes`, `data_reserved_bytes`). On the CPU: peak RSS only.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_peer  # noqa: E402  (Strata's synthetic data, sampler order, mlp and cnn units)

# Strata's llama presets (models/llama/llama_config.cpp, preset_config), fields left to derive: 0.
LLAMA_PRESETS = {
    "": dict(hidden_size=256, num_layers=4, num_heads=4),
    "debug": dict(hidden_size=64, intermediate_size=172, num_layers=2, num_heads=4, num_kv_heads=2),
    "tinyllama-1.1b": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_layers=22, num_heads=32,
                           num_kv_heads=4, rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=2048),
}
LLAMA_DEFAULTS = dict(vocab_size=0, hidden_size=0, intermediate_size=0, num_layers=0, num_heads=0, num_kv_heads=0,
                      head_dim=0, rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=2048)
INIT_STD = 0.02  # Strata's vit and llama kInitStd


class PeerError(Exception):
    """A setting this peer cannot mirror: the message names it."""


def known(section, name, allowed):
    unknown = sorted(set(section) - set(allowed))
    if unknown:
        raise PeerError("[%s] sets %s, which gpu_peer.py does not mirror (it mirrors %s)" % (
            name, ", ".join(unknown), ", ".join(sorted(allowed))))


# ---------------------------------------------------------------------------------------------- vit


def trunc_normal_(t, std):
    """Strata's trunc_normal_ (models/vit/vit.cpp): N(0, std) cut at +-2 std by inverse CDF."""
    lo = 0.5 * (1.0 + math.erf(-2.0 / math.sqrt(2.0)))
    with torch.no_grad():
        t.uniform_(2 * lo - 1, 1 - 2 * lo).erfinv_().mul_(std * math.sqrt(2.0)).clamp_(-2 * std, 2 * std)
    return t


def vit_linear(i, o):
    linear = nn.Linear(i, o)  # PyTorch's default initialization first: it draws, as LibTorch's does
    trunc_normal_(linear.weight, INIT_STD)
    nn.init.zeros_(linear.bias)
    return linear


class VitEmbed(nn.Module):
    def __init__(self, channels, patch, dim, tokens, cls):
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if cls else None
        self.pos_embed = nn.Parameter(trunc_normal_(torch.empty(1, tokens, dim), INIT_STD))

    def forward(self, images):
        x = self.proj(images).flatten(2).transpose(1, 2)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.size(0), 1, x.size(2)), x], 1)
        return x + self.pos_embed


class VitBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = vit_linear(dim, 3 * dim)
        self.proj = vit_linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = vit_linear(dim, hidden)
        self.fc2 = vit_linear(hidden, dim)

    def forward(self, x):
        n, t, dim = x.shape
        qkv = self.qkv(self.norm1(x)).view(n, t, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        y = x + self.proj(attended.transpose(1, 2).reshape(n, t, dim))
        return y + self.fc2(F.gelu(self.fc1(self.norm2(y))))


class VitHead(nn.Module):
    def __init__(self, dim, classes, cls):
        super().__init__()
        self.cls = cls
        self.norm = nn.LayerNorm(dim)
        self.linear = vit_linear(dim, classes)

    def forward(self, x):
        y = self.norm(x)
        return self.linear(y[:, 0] if self.cls else y.mean(1))


def vit_model(o, shape, classes):
    known(o, "model", {"name", "patch_size", "dim", "depth", "heads", "mlp_ratio", "pooling", "fused_ops"})
    p, dim, depth, heads = o.get("patch_size", 4), o.get("dim", 192), o.get("depth", 6), o.get("heads", 3)
    hidden = int(round(dim * o.get("mlp_ratio", 4.0)))
    cls = o.get("pooling", "cls") == "cls"
    c, h, w = shape
    tokens = (h // p) * (w // p) + (1 if cls else 0)
    units = [VitEmbed(c, p, dim, tokens, cls)] + [VitBlock(dim, heads, hidden) for _ in range(depth)]
    units.append(VitHead(dim, classes, cls))
    return nn.Sequential(*units)


# -------------------------------------------------------------------------------------------- llama


def llama_config(o, data_vocab, seq_len):
    """Strata's resolve_config for a preset and explicit options (config_from is not mirrored)."""
    # loss_chunk_tokens and fused_ops are how Strata computes (lm_head fused with the loss; its own
    # kernels), not shapes: the peer runs transformers' ops, the logits, then the loss.
    known(o, "model", {"name", "preset", "task", "loss_chunk_tokens", "fused_ops"}
          | set(LLAMA_DEFAULTS) - {"max_position_embeddings"})
    preset = o.get("preset", "")
    if preset not in LLAMA_PRESETS:
        raise PeerError("[model] preset %r is not mirrored (known: %s)" % (preset, ", ".join(map(repr, LLAMA_PRESETS))))
    if o.get("task", "causal_lm") != "causal_lm":
        raise PeerError("[model] task %r: the peer trains causal_lm only" % o["task"])
    c = dict(LLAMA_DEFAULTS, **LLAMA_PRESETS[preset])
    for k in LLAMA_DEFAULTS:
        if o.get(k):
            c[k] = o[k]
    if not c["head_dim"]:
        c["head_dim"] = c["hidden_size"] // c["num_heads"]
    if not c["num_kv_heads"]:
        c["num_kv_heads"] = c["num_heads"]
    if not c["intermediate_size"]:
        c["intermediate_size"] = (8 * c["hidden_size"] // 3 + 63) // 64 * 64
    if not c["vocab_size"]:
        c["vocab_size"] = data_vocab
    c["max_position_embeddings"] = max(c["max_position_embeddings"], seq_len)
    return c


def llama_model(c, seed, device):
    """LlamaForCausalLM with Strata's shapes, its weights drawn as Strata's llama plugin draws them:
    N(0, 0.02) from the CPU generator seeded with [train] seed, in unit order (embed; per block
    q, k, v, o, gate, up, down; lm_head), norms at 1."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                         intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_layers"],
                         num_attention_heads=c["num_heads"], num_key_value_heads=c["num_kv_heads"],
                         head_dim=c["head_dim"], rope_theta=c["rope_theta"], rms_norm_eps=c["rms_norm_eps"],
                         max_position_embeddings=c["max_position_embeddings"], tie_word_embeddings=False,
                         attention_bias=False, mlp_bias=False, hidden_act="silu", attention_dropout=0.0,
                         use_cache=False)
    config._attn_implementation = "sdpa"
    with torch.device(device):  # transformers' own initialization is overwritten below
        model = LlamaForCausalLM(config)
    if model.config._attn_implementation != "sdpa":
        raise PeerError("transformers chose attention %r, not sdpa" % model.config._attn_implementation)
    # transformers 4 reads rope_theta as such, 5 moves it into rope_parameters: check what it built.
    d = c["head_dim"]
    expected = torch.pow(c["rope_theta"], torch.arange(0, d, 2).float() / d).reciprocal()
    built = model.model.rotary_emb.inv_freq.float().cpu()
    if built.shape != expected.shape or not torch.allclose(built, expected, rtol=1e-6, atol=0):
        raise PeerError("transformers built rotary frequencies other than Strata's for rope_theta %g" % c["rope_theta"])
    model.train()
    names = ["model.embed_tokens.weight"]
    for i in range(c["num_layers"]):
        names += ["model.layers.%d.self_attn.%s.weight" % (i, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
        names += ["model.layers.%d.mlp.%s.weight" % (i, p) for p in ("gate_proj", "up_proj", "down_proj")]
    names.append("lm_head.weight")
    params = dict(model.named_parameters())
    torch.manual_seed(seed)
    with torch.no_grad():
        for name in names:
            params[name].copy_(torch.empty(params[name].shape).normal_(0, INIT_STD))
        for name, p in params.items():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
    return model


class LlamaLogits(nn.Module):
    """input_ids -> logits, without transformers' cache or its label shift (Strata's targets are
    already the next tokens)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


# --------------------------------------------------------------------------------------------- data


def text_windows(o, seq_len):
    """The `text` dataset with the byte tokenizer: the file's bytes as ids, cut into consecutive
    windows of seq_len + 1; the last eval_fraction of them (at least one) held out."""
    known(o, "dataset", {"name", "path", "tokenizer", "seq_len", "eval_fraction"})
    if o.get("tokenizer", "byte") != "byte":
        raise PeerError("[dataset] tokenizer %r: the peer reads bytes only" % o["tokenizer"])
    with open(o["path"], "rb") as f:
        raw = f.read()
    window = seq_len + 1
    count = len(raw) // window
    fraction = o.get("eval_fraction", 0.1)
    eval_windows = min(max(int(math.floor(count * fraction + 0.5)), 1), count - 1)  # std::llround, clamped
    tokens = torch.frombuffer(bytearray(raw[:count * window]), dtype=torch.uint8).to(torch.int64)
    return tokens.view(count, window)[:count - eval_windows].clone()


def load_data(e):
    """(inputs, targets or None, vocab) of the training split: targets None for text windows."""
    d = dict(e["dataset"])
    seed = e["train"].get("seed", 0)
    if d["name"] == "synthetic":
        known(d, "dataset", {"name", "train_size", "eval_size", "input_shape", "num_classes", "noise", "seed"})
        if d.get("seed", -1) != -1:
            seed = d["seed"]
        inputs, targets = pytorch_peer.synthetic_train(d.get("train_size", 4096), d.get("input_shape", [1, 28, 28]),
                                                       d.get("num_classes", 10), d.get("noise", 1.0), seed)
        return inputs, targets, 0
    if d["name"] == "text":
        return text_windows(d, d.get("seq_len", 128)), None, 256
    raise PeerError("[dataset] name %r is not mirrored (synthetic and text are)" % d["name"])


# --------------------------------------------------------------------------------------------- main


def rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", help="the experiment file gpu_peers.py wrote for Strata")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default mode)")
    ap.add_argument("--data", choices=["device", "host"], default="device")
    ap.add_argument("--bf16", choices=["masters", "autocast"], default="masters",
                    help="with [precision] param_dtype = bfloat16: how the peer trains in bfloat16")
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of step_time_after_warmup_s")
    args = ap.parse_args()

    with open(args.experiment, "rb") as f:
        e = tomllib.load(f)
    t, opt, model_opts = e["train"], e.get("optimizer", {}), e["model"]
    precision = e.get("precision", {})
    known(t, "train", {"steps", "global_batch_size", "micro_batches", "device", "seed", "clip_grad_norm", "threads",
                       "lr_schedule", "peak_tflops"})
    known(opt, "optimizer", {"name", "lr", "weight_decay", "betas", "eps", "fused"})
    if opt.get("name", "adamw") != "adamw" or t.get("lr_schedule", "constant") != "constant":
        raise PeerError("the peer runs AdamW at a constant learning rate")
    if e.get("strategy", {}).get("name") != "single":
        raise PeerError("the peer mirrors strategy single only")
    device = torch.device(t["device"])
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise PeerError("[train] device is %s but torch.cuda.is_available() is False (torch %s, CUDA %s)" % (
            device, torch.__version__, torch.version.cuda))
    if cuda:
        if device.index is None:  # "cuda": the current device, as Strata's single rank takes cuda:0
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    if t.get("threads", 0) > 0:
        torch.set_num_threads(t["threads"])
    param_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[precision.get("param_dtype", "float32")]
    mixed = param_dtype != torch.float32

    steps, gb, micros, seed = t["steps"], t["global_batch_size"], t.get("micro_batches", 1), t.get("seed", 0)
    if gb % micros:
        raise PeerError("global_batch_size %d is not a multiple of micro_batches %d" % (gb, micros))
    micro = gb // micros

    # Data, as Strata's dataset holds it, and Strata's visiting order (one permutation per epoch,
    # computed ahead), then where --data puts them.
    inputs, targets, vocab = load_data(e)
    text = targets is None
    n = inputs.shape[0]
    if gb > n:
        raise PeerError("global batch %d exceeds the %d training examples" % (gb, n))
    steps_per_epoch = n // gb
    epochs = (steps - 1) // steps_per_epoch + 1 if steps else 0
    perms = [pytorch_peer.strata_permutation(n, seed, ep) for ep in range(epochs)]
    data_bytes = data_reserved = 0
    if args.data == "device" and device.type != "cpu":
        before = torch.cuda.memory_reserved(device) if cuda else 0
        inputs = inputs.to(device)
        targets = targets.to(device) if targets is not None else None
        perms = [p.to(device) for p in perms]
        data_bytes = sum(x.nbytes for x in [inputs, targets] + perms if x is not None)
        data_reserved = (torch.cuda.memory_reserved(device) - before) if cuda else 0

    # The model, initialized as Strata's (seeded generator, same draws in the same order).
    name = model_opts["name"]
    if name == "llama":
        seq_len = e["dataset"].get("seq_len", 128)
        cfg = llama_config(model_opts, vocab, seq_len)
        hf = llama_model(cfg, seed, device if cuda else torch.device("cpu"))
        model = LlamaLogits(hf)
        targets_per_sample = seq_len
    else:
        shape = e["dataset"].get("input_shape", [1, 28, 28])
        classes = e["dataset"].get("num_classes", 10)
        torch.manual_seed(seed)  # Strata seeds the global generator with [train] seed before the model
        if name == "mlp":
            known(model_opts, "model", {"name", "hidden"})
            units = pytorch_peer.mlp_units(math.prod(shape), model_opts.get("hidden", [256, 256]), classes)
        elif name == "cnn":
            known(model_opts, "model", {"name", "channels", "hidden", "groups"})
            units = pytorch_peer.cnn_units(shape, model_opts.get("channels", [32, 64]), model_opts.get("hidden", 128),
                                           model_opts.get("groups", 8), classes)
        elif name == "vit":
            units = [vit_model(model_opts, shape, classes)]
        else:
            raise PeerError("[model] name %r is not mirrored" % name)
        model = nn.Sequential(*units)
        targets_per_sample = 1
    parameters = sum(p.numel() for p in model.parameters())
    model.to(device)

    # Precision and optimizer.
    adamw = dict(lr=opt.get("lr", 1e-3), weight_decay=opt.get("weight_decay", 0.0),
                 betas=tuple(opt.get("betas", [0.9, 0.999])), eps=opt.get("eps", 1e-8))
    if opt.get("fused", False):
        adamw["fused"] = True
    else:
        adamw["foreach"] = True
    bf16_mode = args.bf16 if mixed else "none"
    params = [p for p in model.parameters() if p.requires_grad]
    if bf16_mode == "masters":
        masters = [p.detach().clone().float() for p in params]
        for m in masters:
            m.grad = torch.zeros_like(m)
        # Parameters only: buffers keep their dtype (transformers' rotary inv_freq stays float32, as
        # Strata computes its frequencies in float32).
        with torch.no_grad():
            for p in params:
                p.data = p.data.to(param_dtype)

        def accumulate(master):
            def hook(p):  # the bfloat16 gradient into the float32 one, then freed (Strata's FlatGroup::accumulate)
                master.grad.add_(p.grad)
                p.grad = None
            return hook

        for p, m in zip(params, masters):
            p.register_post_accumulate_grad_hook(accumulate(m))
        trained = masters
    else:
        trained = params
    optimizer = torch.optim.AdamW(trained, **adamw)
    forward = torch.compile(model) if args.compile else model

    scale = 1.0 / (gb * targets_per_sample)  # Strata: the loss is the mean over the global batch's targets
    clip = t.get("clip_grad_norm", 0.0)
    log_every = e.get("log", {}).get("every", 10)

    def fetch(step, m):
        start = (step % steps_per_epoch) * gb + m * micro
        index = perms[step // steps_per_epoch][start:start + micro]
        if text:
            w = inputs.index_select(0, index)
            x, y = w[:, :-1], w[:, 1:]
        else:
            x, y = inputs.index_select(0, index), targets.index_select(0, index)
        if x.device != device:  # --data host: the gathered micro-batch pinned, its copy does not block the host
            x = x.contiguous().pin_memory().to(device, non_blocking=True) if cuda else x.to(device)
            y = y.contiguous().pin_memory().to(device, non_blocking=True) if cuda else y.to(device)
        if mixed and bf16_mode == "masters" and x.is_floating_point():
            x = x.to(param_dtype)  # Strata's Precision::compute
        return x, y

    def forward_loss(x, y):
        if bf16_mode == "autocast":
            with torch.autocast(device.type, dtype=param_dtype):
                out = forward(x)
        else:
            out = forward(x)
        out = out.float()  # Strata's Precision::output
        return F.cross_entropy(out.reshape(-1, out.size(-1)), y.reshape(-1), reduction="sum") * scale

    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    setup_rss = rss_bytes()
    events, host_times, host_optimizer, pending, curve = [], [], [], [], []
    for step in range(steps):
        if cuda:
            start_ev, mid_ev, end_ev = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            start_ev.record()
        t0 = time.perf_counter()
        loss = None
        for m in range(micros):
            x, y = fetch(step, m)
            lm = forward_loss(x, y)
            lm.backward()
            loss = lm.detach() if loss is None else loss + lm.detach()
        if cuda:
            mid_ev.record()  # the rest of the step: clipping, the optimizer, the masters' copy (Strata's "optimizer")
        t1 = time.perf_counter()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(trained, clip, foreach=True)
        optimizer.step()
        if bf16_mode == "masters":
            torch._foreach_zero_([m.grad for m in masters])
            with torch.no_grad():
                torch._foreach_copy_(params, masters)
        else:
            optimizer.zero_grad(set_to_none=True)
        pending.append(loss)
        if cuda:
            end_ev.record()
            events.append((start_ev, mid_ev, end_ev))
        else:
            host_times.append(time.perf_counter() - t0)
            host_optimizer.append(time.perf_counter() - t1)
        step1 = step + 1
        if step1 == 1 or step1 % log_every == 0 or step1 == steps:  # Strata's log steps: the one host sync
            values = torch.stack(pending).tolist()
            curve.append([step1, values[-1]])
            pending = []
            if not math.isfinite(values[-1]):
                raise PeerError("the loss is %s at step %d" % (values[-1], step1))

    if cuda:
        torch.cuda.synchronize(device)
        times = [s.elapsed_time(e_) / 1e3 for s, _, e_ in events]
        optimizer_times = [m.elapsed_time(e_) / 1e3 for _, m, e_ in events]
        peak_tensor = torch.cuda.max_memory_allocated(device) - data_bytes
        peak = torch.cuda.max_memory_reserved(device) - data_reserved
    else:
        times, optimizer_times, peak_tensor, peak = host_times, host_optimizer, None, None
    after = times[args.warmup:] or times
    optimizer_after = optimizer_times[args.warmup:] or optimizer_times
    print(json.dumps({
        "step_time_s": statistics.median(times),
        "step_time_after_warmup_s": statistics.median(after),
        # After the warm-up steps, as Strata's steady breakdown: forward and backward of every
        # micro-batch, then clipping, the optimizer and the masters' copy.
        "time_breakdown_after_warmup_s": {"compute": statistics.median(a - o for a, o in zip(after, optimizer_after)),
                                          "optimizer": statistics.median(optimizer_after)},
        "warmup": args.warmup,
        "step_timing": "cuda events" if cuda else "host clock",
        "parameters": parameters,
        "peak_tensor_bytes": peak_tensor,
        "peak_bytes": peak,
        "peak_rss_bytes": rss_bytes(),
        "setup_rss_bytes": setup_rss,
        "data_bytes": data_bytes,
        "data_reserved_bytes": data_reserved,
        "data": args.data,
        "compile": args.compile,
        "bf16": bf16_mode,
        "optimizer": "fused" if adamw.get("fused") else "foreach",
        "loss_curve": curve,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }), flush=True)


if __name__ == "__main__":
    try:
        main()
    except PeerError as err:
        sys.exit("gpu_peer.py: " + str(err))
