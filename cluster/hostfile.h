#pragma once

// Hosts and their slots, as a user writes them for hvdrun: a hostfile or a -H host spec.
//
// Hostfile format (Open MPI's, as horovodrun accepts it), one host per line:
//     # comment                      whole-line comment
//     node01 slots=4                 4 slots
//     node02                         1 slot
//     node03 slots=2 max_slots=8     max_slots is accepted (and must be >= slots) but unused
//     node04 slots=2   # trailing comment
// Blank lines are ignored. A duplicate host, an unknown key, a slot count that is not a positive
// integer or a stray word is an error naming the file and the 1-based line number.
//
// Host spec (-H): "a:2,b:4,c" -> a with 2 slots, b with 4, c with 1. Duplicates are errors; an
// IPv6 address keeps its brackets ("[fe80::1]:2").
//
// Every host must be a host name (cluster/host_name.h): a line or an entry with "node1;id" is
// refused, naming the host and the character (and the file and line, or the -H spec).
//
// Order is kept as written: rank blocks are assigned host by host in this order.
// Pure functions; thread-safe. Errors are hvd::InvalidArgumentError.

#include <string>
#include <vector>

namespace hvd::cluster {

struct HostSlots {
  std::string host;
  int slots = 1;

  bool operator==(const HostSlots&) const = default;
};

// Parses hostfile text. `source` names the file in error messages ("hosts.txt").
std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source);

// Reads and parses a hostfile; a file that cannot be read is an error naming the path.
std::vector<HostSlots> read_hostfile(const std::string& path);

// Parses a -H spec: "a:2,b:4".
std::vector<HostSlots> parse_host_spec(const std::string& spec);

// Sum of slots.
int total_slots(const std::vector<HostSlots>& hosts);

// "a:2,b:4" (the form mpirun -H accepts).
std::string format_host_spec(const std::vector<HostSlots>& hosts);

}  // namespace hvd::cluster
