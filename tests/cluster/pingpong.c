/* pingpong: latency and bandwidth between rank 0 and rank 1 as MPI sees them (a benchmark for the
 * simulated cluster, cluster/sim/hvd-sim; docs/cluster.md has the figures).
 *
 *   mpirun -np 2 -H node1:1,node2:1 ... pingpong [--iters N] [--max-bytes B]
 *
 * Latency: half the round trip of a blocking MPI_Send/MPI_Recv ping-pong, median over N round
 * trips (after N/10 warm-up), for 0 B, 8 B, 64 B, 1 KiB, 4 KiB.
 * Bandwidth: rank 0 streams a window of 16 MPI_Isend of one size to rank 1, which answers with an
 * empty message after the window; bytes / time, for sizes from 64 KiB up to --max-bytes
 * (default 16 MiB). GB/s are 10^9 bytes per second; Gbit/s = 8 * GB/s.
 * Every received payload is checked (first and last byte); a wrong byte makes the exit status 1.
 * Ranks other than 0 and 1 wait at the final barrier. Exit status: 0 ok, 1 wrong data, 2 usage. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kWindow = 16 };

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int parse_long(const char* flag, const char* text, long min, long* out) {
  char* end = NULL;
  const long v = text ? strtol(text, &end, 10) : 0;
  if (!text || *text == '\0' || *end != '\0' || v < min) {
    fprintf(stderr, "pingpong: %s needs a whole number >= %ld, got '%s'\n", flag, min,
            text ? text : "");
    return 0;
  }
  *out = v;
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long iters = 1000, max_bytes = 16L << 20;
  for (int i = 1; i < argc; ++i) {
    int ok = 0;
    if (strcmp(argv[i], "--iters") == 0)
      ok = parse_long("--iters", i + 1 < argc ? argv[++i] : NULL, 1, &iters);
    else if (strcmp(argv[i], "--max-bytes") == 0)
      ok = parse_long("--max-bytes", i + 1 < argc ? argv[++i] : NULL, 65536, &max_bytes);
    else if (rank == 0)
      fprintf(stderr, "pingpong: unknown argument '%s' (--iters N, --max-bytes B)\n", argv[i]);
    if (!ok) {
      MPI_Finalize();
      return 2;
    }
  }
  if (size < 2) {
    if (rank == 0) fprintf(stderr, "pingpong: needs at least 2 ranks, got %d\n", size);
    MPI_Finalize();
    return 2;
  }
  char host[MPI_MAX_PROCESSOR_NAME], peer[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  if (rank == 1) MPI_Send(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 9, MPI_COMM_WORLD);
  if (rank == 0) {
    MPI_Recv(peer, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("# pingpong: rank 0 on %s, rank 1 on %s\n", host, peer);
  }

  char* buf = malloc((size_t)max_bytes * kWindow);
  double* samples = malloc(sizeof(double) * (size_t)iters);
  long wrong = 0;
  if (!buf || !samples) {
    fprintf(stderr, "pingpong: rank %d: out of memory for %ld bytes\n", rank, max_bytes * kWindow);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  const long lat_sizes[] = {0, 8, 64, 1024, 4096};
  if (rank == 0)
    printf("# latency: half round trip, median of %ld\n#  bytes   latency(us)\n", iters);
  for (size_t s = 0; s < sizeof lat_sizes / sizeof lat_sizes[0]; ++s) {
    const int n = (int)lat_sizes[s];
    const long warm = iters / 10 + 1;
    for (long it = -warm; it < iters && rank < 2; ++it) {
      if (rank == 0) {
        if (n) buf[0] = buf[n - 1] = (char)(it & 0x7f);
        const double t0 = MPI_Wtime();
        MPI_Send(buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, n, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const double t = MPI_Wtime() - t0;
        if (n && (buf[0] != (char)((it + 1) & 0x7f) || buf[n - 1] != (char)((it + 1) & 0x7f)))
          ++wrong;
        if (it >= 0) samples[it] = t / 2;
      } else {
        MPI_Recv(buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (n && (buf[0] != (char)(it & 0x7f) || buf[n - 1] != (char)(it & 0x7f))) ++wrong;
        if (n) buf[0] = buf[n - 1] = (char)((it + 1) & 0x7f);
        MPI_Send(buf, n, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
      }
    }
    if (rank == 0) {
      qsort(samples, (size_t)iters, sizeof(double), cmp_double);
      printf("%8d %13.2f\n", n, samples[iters / 2] * 1e6);
    }
  }
  if (rank == 0)
    printf("# bandwidth: window of %d messages, best of 5\n#    bytes     GB/s   Gbit/s\n",
           kWindow);
  for (long n = 65536; n <= max_bytes; n *= 4) {
    double best = 1e30;
    for (int rep = -1; rep < 5 && rank < 2; ++rep) {
      MPI_Request req[kWindow];
      const double t0 = MPI_Wtime();
      for (int w = 0; w < kWindow; ++w) {
        char* p = buf + (size_t)w * (size_t)n;
        if (rank == 0) {
          p[0] = p[n - 1] = (char)(w + 1);
          MPI_Isend(p, (int)n, MPI_CHAR, 1, 3, MPI_COMM_WORLD, &req[w]);
        } else {
          MPI_Irecv(p, (int)n, MPI_CHAR, 0, 3, MPI_COMM_WORLD, &req[w]);
        }
      }
      MPI_Waitall(kWindow, req, MPI_STATUSES_IGNORE);
      if (rank == 0) {
        MPI_Recv(NULL, 0, MPI_CHAR, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        for (int w = 0; w < kWindow; ++w) {
          const char* p = buf + (size_t)w * (size_t)n;
          if (p[0] != (char)(w + 1) || p[n - 1] != (char)(w + 1)) ++wrong;
          buf[(size_t)w * (size_t)n] = 0;
        }
        MPI_Send(NULL, 0, MPI_CHAR, 0, 4, MPI_COMM_WORLD);
      }
      const double t = MPI_Wtime() - t0;
      if (rep >= 0 && t < best) best = t;
    }
    if (rank == 0) {
      const double gbs = (double)n * kWindow / best / 1e9;
      printf("%10ld %8.3f %8.3f\n", n, gbs, gbs * 8);
    }
  }
  long total_wrong = 0;
  MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("# wrong bytes: %ld: %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  free(buf);
  free(samples);
  MPI_Finalize();
  return total_wrong ? 1 : 0;
}
