#!/usr/bin/env python3
"""PyTorch twin of `train_cnn --device cuda --benchmark`: the same network, initialisation scheme,
batch, optimizer, input path and sync points, timed the same way, so the two images/s compare.

What it matches (examples/train_cnn/MODEL.md, trainer.cc, gpu/cudnn_model.h):
  network    conv 5x5 32 same -> ReLU -> max-pool 2 -> conv 5x5 64 same -> ReLU -> max-pool 2 ->
             fc 3136->512 -> ReLU -> fc 512->10, softmax cross-entropy (mean over the batch);
             1,663,370 parameters; He-normal conv/fc1 weights, Glorot-uniform fc2, zero biases
  optimizer  SGD, momentum 0.9, weight decay 5e-4 (PyTorch's rule, which train_cnn's follows),
             lr 0.05 (one replica's rate; irrelevant to the speed)
  data       60000 training images 1x28x28 (Fashion-MNIST when --data-dir has it, else random,
             as train_cnn --synthetic); each epoch a new permutation; each step the batch is
             gathered on the host into pinned memory and copied to the GPU
  step       zero_grad, forward, the loss AND the correct count read back right after the forward
             pass (train_cnn's forward() waits for both), backward, optimizer step
  math       FP32: TF32 off for cuDNN and cuBLAS (train_cnn's default); --tf32 turns it on;
             cudnn.benchmark off (train_cnn picks algorithms by cuDNN's heuristics)
  timing     --max-steps steps in all, the first --benchmark-warmup left out; images/s = measured
             steps x batch / the sum of their wall times (train_cnn --benchmark's definition)

Prints one "benchmark: ... images/s ..." line like train_cnn's. Run on a GPU machine:
  python3 examples/train_cnn/tools/torch_baseline.py --batch-size 64 --max-steps 550 --benchmark-warmup 50
(`--device cpu` runs the same code on the CPU, as a smoke test where no GPU is at hand.)
"""
import argparse
import gzip
import os
import struct
import sys
import time

import torch
import torch.nn as nn


def make_model(hidden: int) -> nn.Module:
    model = nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    # train_cnn's scheme (model/init.h): He normal N(0, 2/fan_in) for the layers before a ReLU,
    # Glorot uniform for the logits layer, zero biases.
    with torch.no_grad():
        for m in (model[0], model[3], model[7]):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        nn.init.xavier_uniform_(model[9].weight)
        nn.init.zeros_(model[9].bias)
    return model


def read_idx(path: str) -> torch.Tensor:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_train(data_dir: str):
    def find(name):
        for candidate in (name + ".gz", name):
            p = os.path.join(data_dir, candidate)
            if os.path.exists(p):
                return p
        return None
    images, labels = find("train-images-idx3-ubyte"), find("train-labels-idx1-ubyte")
    if images is None or labels is None:
        return None
    x = read_idx(images).float().div_(255.0).unsqueeze(1)  # [N, 1, 28, 28] in [0, 1]
    y = read_idx(labels).long()
    return x, y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-size", type=int, default=64, help="images per step (train_cnn: per replica)")
    ap.add_argument("--max-steps", type=int, default=100, help="steps in all, warm-up included (train_cnn --benchmark: 100)")
    ap.add_argument("--benchmark-warmup", type=int, default=5, help="first steps left out of the timing (train_cnn: 5)")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--synthetic-size", type=int, default=60000, help="random training images when the data set is missing")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="Fashion-MNIST IDX files; random images when missing")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in cuDNN and cuBLAS")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark (autotuning; train_cnn uses heuristics)")
    ap.add_argument("--read-loss", choices=("after-forward", "after-step"), default="after-forward",
                    help="when the loss and correct count come back to the host each step "
                         "(train_cnn: after-forward; usual PyTorch loops: after-step)")
    ap.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for a smoke test")
    args = ap.parse_args()
    if args.batch_size < 1 or args.max_steps < 1 or args.benchmark_warmup < 0:
        ap.error("--batch-size and --max-steps must be >= 1, --benchmark-warmup >= 0")

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("SKIPPED: torch_baseline: no CUDA device visible to PyTorch", flush=True)
        return 77
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
    torch.manual_seed(args.seed)

    data = load_train(args.data_dir)
    source = "Fashion-MNIST from " + args.data_dir
    if data is None:
        n = args.synthetic_size
        data = (torch.rand(n, 1, 28, 28), torch.randint(0, 10, (n,)))
        source = "random data"
    images, labels = data
    n = images.shape[0]
    b = args.batch_size
    steps_per_epoch = n // b
    if steps_per_epoch == 0:
        ap.error("--batch-size is larger than the training set")

    model = make_model(args.hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    nparams = sum(p.numel() for p in model.parameters())
    # The host batch: gathered into pinned memory (train_cnn: gather, then a copy into its pinned
    # staging buffer), copied to the device asynchronously.
    x_host = torch.empty((b,) + tuple(images.shape[1:]), dtype=images.dtype, pin_memory=cuda)
    y_host = torch.empty((b,), dtype=labels.dtype, pin_memory=cuda)
    order = None
    gen = torch.Generator().manual_seed(args.seed)

    def step(i: int):
        nonlocal order
        e, s = divmod(i, steps_per_epoch)
        if s == 0:
            order = torch.randperm(n, generator=gen)
        idx = order[s * b:(s + 1) * b]
        torch.index_select(images, 0, idx, out=x_host)
        torch.index_select(labels, 0, idx, out=y_host)
        x = x_host.to(device, non_blocking=True)
        y = y_host.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=False)
        logits = model(x)
        loss = loss_fn(logits, y)
        stats = torch.stack((loss.detach(), (logits.detach().argmax(1) == y).sum().to(loss.dtype)))
        host = stats.cpu() if args.read_loss == "after-forward" else None
        loss.backward()
        opt.step()
        if host is None:
            host = stats.cpu()
        # Either read waited for the batch's copies to land, so the pinned buffers can be refilled.
        return float(host[0])

    measured_seconds, measured, last = 0.0, 0, float("nan")
    for i in range(args.max_steps):
        t0 = time.perf_counter()
        last = step(i)
        dt = time.perf_counter() - t0
        if i >= args.benchmark_warmup:
            measured_seconds += dt
            measured += 1
    if cuda:
        torch.cuda.synchronize(device)
    if measured == 0:
        measured, measured_seconds = args.max_steps, 0.0  # no steps after the warm-up: none measured
    ips = measured * b / measured_seconds if measured_seconds > 0 else 0.0
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    warm = f" after {args.benchmark_warmup} warm-up steps" if args.max_steps > args.benchmark_warmup else ""
    print(f"benchmark: PyTorch {torch.__version__} (no hvd), {args.device} {name}, 1 device x batch {b} "
          f"({b} images per step), {measured} steps measured{warm}: {ips:.1f} images/s, "
          f"{1000.0 * b / ips if ips > 0 else 0:.2f} ms per step; {nparams} parameters; {source}; "
          f"tf32 {'on' if args.tf32 else 'off'}; cudnn.benchmark {args.cudnn_benchmark}; "
          f"cuDNN {torch.backends.cudnn.version() if cuda else '-'}; loss read {args.read_loss}; "
          f"last loss {last:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
