#pragma once

// What a host name may be, wherever hvd reads one (hvdrun -H, --hostfile, the SLURM node lists):
// one rule, so that a name that mpirun (or srun, or another MPI) would refuse with an obscure
// message, or that would reach a shell, is refused at once with the host, the character and, from
// the caller, where the name came from.
//
// Accepted:
//  - a name of dot-separated labels (RFC 1123), each label made of letters, digits, '-' and '_'
//    ('_' is not in the RFC, but /etc/hosts files and cloud providers use it), not starting or
//    ending with '-': "node01", "gpu-3.cluster.example.org", "login_1", "17";
//  - an IPv4 address, four numbers from 0 to 255: "10.0.0.1" (a name of digits and dots only must
//    be one);
//  - an IPv6 address in brackets: "[fe80::1]", "[::ffff:10.0.0.1]" (no zone index).
// Refused: anything else, e.g. "node1;id", "node1`id`", "a b", "-n1", "a..b", "node1.",
// "10.0.0.256", "fe80::1" (an IPv6 address needs its brackets).
// Lengths (RFC 1123's 63 per label, 253 in all) are not checked: hvd resolves no names, and SLURM
// and Open MPI do not limit them either.
//
// Pure function; thread-safe.

#include <string>
#include <string_view>

namespace hvd::cluster {

// "" when `name` is a host name (above), otherwise one clause without a final period that names
// the host and what is wrong: "host name 'node1;id' has ';' at character 6, which no host name
// has (letters, digits, '-', '_' and '.'; an IPv4 address; an IPv6 address in brackets such as
// [fe80::1])". Callers put where the name came from in front of it.
std::string host_name_problem(std::string_view name);

}  // namespace hvd::cluster
