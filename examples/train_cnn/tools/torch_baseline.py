#!/usr/bin/env python3
"""PyTorch baseline for `train_cnn --device cuda --benchmark`: the same network, batch, optimizer
and input path, timed the same way, so the two images/s figures compare directly.

Network (examples/train_cnn/MODEL.md): conv 5x5 32 same -> ReLU -> max-pool 2 -> conv 5x5 64 same
-> ReLU -> max-pool 2 -> fc 3136->512 -> ReLU -> fc 512->10, softmax cross-entropy, SGD with
momentum 0.9 and weight decay 5e-4. Like train_cnn, each step copies a host batch to the GPU
(from pinned memory), runs forward/backward/step and reads the loss back (`loss.item()`, as
train_cnn's progress line does every step); `--sync-every N` reads it every N steps instead.

Math: FP32 by default (TF32 off for cuDNN and cuBLAS), as train_cnn's default; `--tf32` turns TF32
on for both here, to be compared with a train_cnn built/run with GpuOptions::allow_tf32.

Prints one line: images/s over the timed steps (after --warmup steps), and the settings.
Run on a GPU machine:  python3 examples/train_cnn/tools/torch_baseline.py --batch-size 64
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
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, hidden), nn.ReLU(), nn.Linear(hidden, 10))


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
    ap.add_argument("--steps", type=int, default=500, help="timed steps")
    ap.add_argument("--warmup", type=int, default=50, help="steps left out of the timing")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="Fashion-MNIST IDX files; random images when missing")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in cuDNN and cuBLAS")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark (autotuning; train_cnn uses heuristics)")
    ap.add_argument("--sync-every", type=int, default=1, help="read the loss every N steps")
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("torch_baseline: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    torch.manual_seed(42)

    data = load_train(args.data_dir)
    source = "fashion-mnist"
    if data is None:
        n = 60000
        data = (torch.rand(n, 1, 28, 28), torch.randint(0, 10, (n,)))
        source = "random"
    images, labels = data
    images, labels = images.pin_memory(), labels.pin_memory()
    n = images.shape[0]

    model = make_model(args.hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    b = args.batch_size
    steps_per_epoch = n // b

    def step(i: int, read_loss: bool):
        s = (i % steps_per_epoch) * b
        x = images[s:s + b].to(device, non_blocking=True)
        y = labels[s:s + b].to(device, non_blocking=True)
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item() if read_loss else None

    for i in range(args.warmup):
        step(i, True)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    last = None
    for i in range(args.steps):
        value = step(args.warmup + i, (i + 1) % args.sync_every == 0)
        last = value if value is not None else last
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    print(f"torch_baseline: {args.steps * b / seconds:.0f} images/s "
          f"({args.steps} steps of batch {b} in {seconds:.3f} s; data {source}; "
          f"tf32 {'on' if args.tf32 else 'off'}; cudnn.benchmark {args.cudnn_benchmark}; "
          f"loss read every {args.sync_every} step(s), last {last}; "
          f"torch {torch.__version__}, {torch.cuda.get_device_name(device)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
