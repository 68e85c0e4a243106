#!/usr/bin/env python3
"""Horovod / torch.distributed anchor for hvd's examples/allreduce_bench (CPU, float32, op sum).

The same three cases as hvd's allreduce_bench, timed with the real Horovod (PyTorch frontend, MPI
controller, MPI CPU operations) and with torch.distributed:

  64MiB      one tensor of 16 Mi floats            2 warm-up +   10 timed iterations
  1000x4KiB  1000 tensors of 1024 floats each      5 warm-up +   50 timed iterations
  4B         one tensor of 1 float (latency)      50 warm-up + 2000 timed iterations

Usage
  /usr/bin/python3 scripts/horovod/bench_horovod.py     # runs every impl below under mpirun -np 2
  /usr/bin/python3 scripts/horovod/bench_horovod.py -np 3 --impl horovod
  mpirun --oversubscribe --bind-to none -np 2 /usr/bin/python3 scripts/horovod/bench_horovod.py \
      --impl horovod
  mpirun ... /usr/bin/python3 scripts/horovod/bench_horovod.py --impl torch-gloo   (or torch-mpi)

Under mpirun (OMPI_COMM_WORLD_SIZE set) the script runs ONE implementation, named by --impl: MPI can
be initialised only once per process, and Horovod's MPI and torch's MPI backend each want to do it.
Without mpirun it re-launches itself under mpirun once per implementation, one after the other.

Output: one line per (impl, case), printed by rank 0:
  impl=<impl> case=<case> per_iter_ms=<median> min_ms=<min> wrong=<count> mean_ms=<mean> ...
Times are per iteration (an iteration = all of the case's tensors submitted and completed); median,
min and mean are taken per rank over the timed iterations, then averaged over ranks (hvd's
allreduce_bench reports the mean over iterations, averaged over ranks, so compare hvd's time(us)
with mean_ms). wrong = values that differ from the expected result, summed over ranks and tensors.

Implementations (impl=):
  horovod          out of place into preallocated outputs, as hvd's bench does (in -> out, inputs
                   never change, outputs poisoned with NaN first). Uses
                   horovod.torch.mpi_ops._allreduce_async(in, out, ...), the function the public
                   hvd.allreduce_async() calls after allocating `out` (tensor.new()); calling it
                   directly skips that per-call allocation, which hvd does not do either.
  horovod-inplace  the public in-place API, hvd.allreduce_async_(t, name=..., op=hvd.Sum), what
                   horovod.torch.DistributedOptimizer uses for gradients.
  horovod-grouped  (1000x4KiB only) one hvd.grouped_allreduce for the 1000 tensors, out of place
                   (mpi_ops._grouped_allreduce_async), Horovod's explicit grouping.
  horovod-alloc    (only with --horovod-variants ...,alloc) the public out-of-place
                   hvd.allreduce_async(t), which allocates a new output per call.
  torch-gloo       torch.distributed, backend gloo: dist.all_reduce in place; for 1000x4KiB, 1000
                   all_reduce(async_op=True) calls then a wait on each.
  torch-gloo-flat  (1000x4KiB only) the bucketing approach: torch.cat of the 1000 inputs into one
                   flat buffer, one all_reduce, one copy out into a flat output whose 1000 views
                   are the outputs (the same data movement as hvd's fusion buffer and as hvd's
                   "hand-fused MPI_Allreduce" baseline).
  torch-mpi[-flat] the same with backend mpi, if this torch build has it (Debian's 1.13 does not).

Values (all cases): hvd's pattern for op sum: element j (j counts across the tensors of a case)
of rank r is j%5+1, plus 1 on rank j%n, minus 1 on rank (j+1)%n; the exact result is n*(j%5+1).
Out-of-place impls check exactly that. In-place impls reduce the same tensor again every
iteration, so after c calls the value is n^c*(j%5+1) (computed in float32 by repeated
multiplication; exact for n=2; may overflow to inf in the 4B case, which is then the expected
value); no refill is done inside the timed loop.

Horovod settings: unless already set in the environment, the script sets hvd's defaults,
HOROVOD_CYCLE_TIME=1 (ms) and HOROVOD_FUSION_THRESHOLD=67108864 (64 MiB), plus
HOROVOD_CONTROLLER=mpi and HOROVOD_CPU_OPERATIONS=mpi, and prints what is in force next to
Horovod 0.28.1's own defaults (horovod/common/operations.cc, global_state.h).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

# name: (floats per tensor, tensors, warm-up iterations, timed iterations)
CASES = {
    "64MiB": (16 * 1024 * 1024, 1, 2, 10),
    "1000x4KiB": (1024, 1000, 5, 50),
    "4B": (1, 1, 50, 2000),
}

# Horovod 0.28.1 defaults when the variable is unset (hvd.init() via mpirun, not horovodrun).
HOROVOD_DEFAULTS = {
    "HOROVOD_FUSION_THRESHOLD": "134217728 (128 MiB; operations.cc)",
    "HOROVOD_CYCLE_TIME": "1 (ms; operations.cc)",
    "HOROVOD_CACHE_CAPACITY": "1024 (global_state.h)",
    "HOROVOD_AUTOTUNE": "off",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "off",
    "HOROVOD_TIMELINE": "off",
    "HOROVOD_STALL_CHECK_DISABLE": "0 (stall check on: warning after 60 s)",
    "HOROVOD_CONTROLLER": "MPI under mpirun (gloo when launched by horovodrun --gloo)",
    "HOROVOD_CPU_OPERATIONS": "compiled default (HOROVOD_CPU_OPERATIONS at build time: MPI here)",
    "HOROVOD_THREAD_AFFINITY": "unset (background thread not pinned)",
    "HOROVOD_ENABLE_ASYNC_COMPLETION": "0",
    "HOROVOD_DISABLE_GROUP_FUSION": "0",
}
HVD_SETTINGS = {  # hvd's defaults (common/config.cc), set here unless the environment has them
    "HOROVOD_CYCLE_TIME": "1",
    "HOROVOD_FUSION_THRESHOLD": str(64 * 1024 * 1024),
    "HOROVOD_CONTROLLER": "mpi",
    "HOROVOD_CPU_OPERATIONS": "mpi",
}

ALL_IMPLS = ["horovod", "torch-gloo", "torch-mpi"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", default=",".join(ALL_IMPLS),
                   help="comma list of horovod, torch-gloo, torch-mpi (under mpirun: exactly one)")
    p.add_argument("--cases", default=",".join(CASES), help="comma list of " + ", ".join(CASES))
    p.add_argument("--horovod-variants", default="oop,inplace,grouped",
                   help="comma list of oop, inplace, grouped, alloc")
    p.add_argument("--no-flat", action="store_true", help="skip the torch-*-flat rows")
    p.add_argument("--iters-scale", type=float, default=1.0,
                   help="multiply every case's warm-up and timed iteration counts (quick runs)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads per rank (default 1: 2 ranks share 2 cores)")
    p.add_argument("-np", type=int, default=2, help="ranks, launcher mode only")
    p.add_argument("--mpirun", default="mpirun", help="launcher mode: the mpirun to use")
    p.add_argument("--mpirun-args", default="--oversubscribe --bind-to none "
                   "--mca btl self,vader --mca oob_tcp_if_include lo",
                   help="launcher mode: extra mpirun arguments")
    p.add_argument("--master-port", type=int, default=int(os.environ.get("MASTER_PORT", "29533")),
                   help="torch.distributed rendezvous port on 127.0.0.1")
    return p.parse_args()


def case_list(args):
    names = [c for c in args.cases.split(",") if c]
    for c in names:
        if c not in CASES:
            sys.exit(f"unknown case {c!r}; known: {', '.join(CASES)}")
    out = []
    for c in names:
        count, k, w, n = CASES[c]
        out.append((c, count, k, max(1, round(w * args.iters_scale)), max(1, round(n * args.iters_scale))))
    return out


# ---------------------------------------------------------------------------------------------
# launcher mode


def launch(args):
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    rc = 0
    passthrough = ["--cases", args.cases, "--horovod-variants", args.horovod_variants,
                   "--iters-scale", str(args.iters_scale), "--threads", str(args.threads),
                   "--master-port", str(args.master_port)] + (["--no-flat"] if args.no_flat else [])
    for impl in [i for i in args.impl.split(",") if i]:
        cmd = [args.mpirun] + args.mpirun_args.split() + ["-np", str(args.np), sys.executable,
                                                           os.path.abspath(__file__), "--impl", impl] + passthrough
        print("# launching: " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            print(f"# impl={impl}: mpirun exit status {r.returncode}", flush=True)
            rc = rc or r.returncode
    return rc


# ---------------------------------------------------------------------------------------------
# shared helpers (under mpirun)


def make_inputs(torch, count, k, rank, n):
    """hvd's allreduce_bench pattern for op sum; k separately allocated tensors."""
    total = count * k
    j = torch.arange(total, dtype=torch.int64)
    v = j % 5 + 1
    if n > 1:
        v = v + (j % n == rank).to(torch.int64) - ((j + 1) % n == rank).to(torch.int64)
    flat = v.to(torch.float32)
    del j, v
    return [flat[i * count:(i + 1) * count].clone() for i in range(k)]


def expected(torch, count, k, n, calls):
    """Expected values after `calls` in-place sum allreduces (calls=1: out of place)."""
    j = torch.arange(count * k, dtype=torch.int64)
    e = ((j % 5 + 1) * n).to(torch.float32)
    del j
    if calls > 1:
        # In place: every further call sums n equal values: x*n in float32 (exact for n=2).
        # Fold the repeated multiply over the 5 distinct base values only, then expand.
        base = torch.tensor([float((b + 1) * n) for b in range(5)], dtype=torch.float32)
        nn = torch.tensor(float(n), dtype=torch.float32)
        for _ in range(calls - 1):
            base = base * nn
        idx = torch.arange(count * k, dtype=torch.int64) % 5
        e = base[idx]
    return e


def count_wrong(torch, outs, exp, n):
    got = torch.cat([o.reshape(-1) for o in outs]) if len(outs) > 1 else outs[0].reshape(-1)
    if n & (n - 1) == 0:  # power of two ranks: every partial sum is exact
        return int((got != exp).sum().item())
    return int((~torch.isclose(got, exp, rtol=1e-5, atol=0.0)).sum().item())


def time_loop(once, warmup, iters, barrier):
    for _ in range(warmup):
        once()
    barrier()
    ts = []
    pc = time.perf_counter
    for _ in range(iters):
        t0 = pc()
        once()
        ts.append(pc() - t0)
    return ts


def stats_ms(ts):
    return [statistics.median(ts) * 1e3, min(ts) * 1e3, statistics.fmean(ts) * 1e3]


class Reporter:
    """Collects per-rank stats, averages times over ranks, sums wrong counts, prints on rank 0."""

    def __init__(self, torch, rank, n, allreduce_sum):
        self.torch, self.rank, self.n, self.allreduce_sum = torch, rank, n, allreduce_sum
        self.failed = False

    def row(self, impl, case, ts, wrong, warmup, iters, note=""):
        t = self.torch.tensor(stats_ms(ts) + [float(wrong)], dtype=self.torch.float64)
        t = self.allreduce_sum(t)
        med, mn, mean = (t[:3] / self.n).tolist()
        w = int(t[3].item())
        if w:
            self.failed = True
        if self.rank == 0:
            print(f"impl={impl} case={case} per_iter_ms={med:.4f} min_ms={mn:.4f} wrong={w} "
                  f"mean_ms={mean:.4f} warmup={warmup} iters={iters} ranks={self.n}"
                  + (f" note={note}" if note else ""), flush=True)


def header(rank, lines):
    if rank == 0:
        for line in lines:
            print("# " + line, flush=True)


# ---------------------------------------------------------------------------------------------
# Horovod


def run_horovod(args):
    for k, v in HVD_SETTINGS.items():
        os.environ.setdefault(k, v)
    import torch
    torch.set_num_threads(args.threads)
    import horovod
    import horovod.torch as hvd
    from horovod.torch import mpi_ops

    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    variants = [v for v in args.horovod_variants.split(",") if v]
    header(rank, [
        f"impl horovod: horovod {horovod.__version__} ({os.path.dirname(horovod.__file__)}), "
        f"torch {torch.__version__}, python {sys.version.split()[0]}, torch threads {torch.get_num_threads()}",
        f"horovod: size {n} local_size {hvd.local_size()} mpi_built {hvd.mpi_built()} "
        f"mpi_enabled {hvd.mpi_enabled()} gloo_built {hvd.gloo_built()} gloo_enabled {hvd.gloo_enabled()} "
        f"mpi_threads_supported {hvd.mpi_threads_supported()} nccl_built {bool(hvd.nccl_built())}",
        "horovod settings in force (env; Horovod 0.28.1 default when unset):",
    ] + [f"  {k}={os.environ.get(k, '<unset>')}  (default {d})" for k, d in HOROVOD_DEFAULTS.items()]
      + [f"horovod variants: {','.join(variants)}"])

    def hsum(t):
        return hvd.allreduce(t, name="bench.stats", op=hvd.Sum)

    rep = Reporter(torch, rank, n, hsum)
    barrier = hvd.barrier
    ps = hvd.global_process_set

    for case, count, k, warmup, iters in case_list(args):
        ins = make_inputs(torch, count, k, rank, n)
        exp_oop = expected(torch, count, k, n, 1)

        if "oop" in variants:
            outs = [torch.full_like(t, float("nan")) for t in ins]
            names = [f"bench.oop.{case}.{i}" for i in range(k)]

            def once():
                hs = [mpi_ops._allreduce_async(ins[i], outs[i], names[i], hvd.Sum, 1.0, 1.0, ps)
                      for i in range(k)]
                for h in hs:
                    hvd.synchronize(h)

            ts = time_loop(once, warmup, iters, barrier)
            rep.row("horovod", case, ts, count_wrong(torch, outs, exp_oop, n), warmup, iters,
                    "out-of-place,preallocated")
            del outs

        if "grouped" in variants and k > 1:
            outs = [torch.full_like(t, float("nan")) for t in ins]

            def once():
                h = mpi_ops._grouped_allreduce_async(ins, outs, f"bench.grouped.{case}", hvd.Sum,
                                                     1.0, 1.0, ps)
                hvd.synchronize(h)

            ts = time_loop(once, warmup, iters, barrier)
            rep.row("horovod-grouped", case, ts, count_wrong(torch, outs, exp_oop, n), warmup, iters,
                    "one-grouped_allreduce,out-of-place")
            del outs

        if "alloc" in variants:
            names = [f"bench.alloc.{case}.{i}" for i in range(k)]
            last = [None] * k

            def once():
                hs = [hvd.allreduce_async(ins[i], name=names[i], op=hvd.Sum) for i in range(k)]
                for i, h in enumerate(hs):
                    last[i] = hvd.synchronize(h)

            ts = time_loop(once, warmup, iters, barrier)
            rep.row("horovod-alloc", case, ts, count_wrong(torch, last, exp_oop, n), warmup, iters,
                    "public-allreduce_async,new-output-per-call")
            del last

        if "inplace" in variants:
            bufs = [t.clone() for t in ins]
            names = [f"bench.inplace.{case}.{i}" for i in range(k)]

            def once():
                hs = [hvd.allreduce_async_(bufs[i], name=names[i], op=hvd.Sum) for i in range(k)]
                for h in hs:
                    hvd.synchronize(h)

            ts = time_loop(once, warmup, iters, barrier)
            rep.row("horovod-inplace", case, ts,
                    count_wrong(torch, bufs, expected(torch, count, k, n, warmup + iters), n),
                    warmup, iters, "public-allreduce_async_")
            del bufs
        del ins, exp_oop

    hvd.shutdown()
    return 1 if rep.failed else 0


# ---------------------------------------------------------------------------------------------
# torch.distributed


def run_torch(args, backend):
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    n = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.master_port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    impl = f"torch-{backend}"
    avail = {"gloo": dist.is_gloo_available(), "mpi": dist.is_mpi_available()}[backend]
    if not avail:
        if rank == 0:
            print(f"impl={impl} skipped: torch {torch.__version__} was built without the {backend} "
                  f"backend (torch.distributed.is_{backend}_available() is False)", flush=True)
        return 0
    if backend == "mpi":
        dist.init_process_group("mpi")
    else:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=n)
    rank, n = dist.get_rank(), dist.get_world_size()
    header(rank, [f"impl {impl}: torch {torch.__version__} ({os.path.dirname(torch.__file__)}), "
                  f"python {sys.version.split()[0]}, world {n}, torch threads {torch.get_num_threads()}, "
                  f"MASTER_ADDR={os.environ['MASTER_ADDR']} MASTER_PORT={os.environ['MASTER_PORT']} "
                  f"GLOO_SOCKET_IFNAME={os.environ.get('GLOO_SOCKET_IFNAME')}"])

    def tsum(t):
        dist.all_reduce(t)
        return t

    rep = Reporter(torch, rank, n, tsum)
    barrier = dist.barrier

    for case, count, k, warmup, iters in case_list(args):
        ins = make_inputs(torch, count, k, rank, n)

        # per-tensor all_reduce, in place
        bufs = [t.clone() for t in ins]
        if k == 1:
            def once():
                dist.all_reduce(bufs[0])
            note = "all_reduce,in-place"
        else:
            def once():
                ws = [dist.all_reduce(b, async_op=True) for b in bufs]
                for w in ws:
                    w.wait()
            note = f"{k}-separate-all_reduce(async_op),in-place"
        ts = time_loop(once, warmup, iters, barrier)
        rep.row(impl, case, ts, count_wrong(torch, bufs, expected(torch, count, k, n, warmup + iters), n),
                warmup, iters, note)
        del bufs

        # flattened: cat into one bucket, one all_reduce, one copy out (outputs are views)
        if k > 1 and not args.no_flat:
            flat = torch.empty(count * k, dtype=torch.float32)
            outflat = torch.full((count * k,), float("nan"), dtype=torch.float32)
            outs = list(outflat.split(count))

            def once():
                torch.cat(ins, out=flat)
                dist.all_reduce(flat)
                outflat.copy_(flat)

            ts = time_loop(once, warmup, iters, barrier)
            rep.row(impl + "-flat", case, ts, count_wrong(torch, outs, expected(torch, count, k, n, 1), n),
                    warmup, iters, "cat+1-all_reduce+copy-out")
            del flat, outflat, outs
        del ins

    dist.barrier()
    dist.destroy_process_group()
    return 1 if rep.failed else 0


def main():
    args = parse_args()
    if "OMPI_COMM_WORLD_SIZE" not in os.environ:
        return launch(args)
    impls = [i for i in args.impl.split(",") if i]
    if len(impls) != 1:
        sys.exit("under mpirun, --impl names exactly one of: " + ", ".join(ALL_IMPLS))
    impl = impls[0]
    if impl == "horovod":
        return run_horovod(args)
    if impl in ("torch-gloo", "torch-mpi"):
        return run_torch(args, impl.split("-")[1])
    sys.exit(f"unknown impl {impl!r}; known: {', '.join(ALL_IMPLS)}")


if __name__ == "__main__":
    sys.exit(main())
