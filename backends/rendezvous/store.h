// ferry::Store: a small key-value store for a trainer's own bootstrap data (a run id, a
// checkpoint path, a counter, "rank 3 is ready"), in the spirit of torch.distributed's TCPStore.
//
// Rank 0 serves it on a thread of its own; every rank (rank 0 too) is a client over TCP. It uses
// what the TCP rendezvous uses: rank 0's address (FERRY_RENDEZVOUS, else torchrun's / SLURM's
// MASTER_ADDR:MASTER_PORT), the job's secret (FERRY_SECRET, checked on every connection) and the
// address rank 0 binds (FERRY_RENDEZVOUS_BIND, default 127.0.0.1). The rendezvous is over once
// ferry::init() returns, so a Store created after init() takes over its port; created before
// init() on a job that uses the TCP rendezvous, the two would want the same port (give the store
// another address in StoreOptions). Under mpiexec there is no rendezvous address: give one.
//
// Contract:
//   - Creating a Store is not collective: rank 0 starts listening, the others connect when they
//     first call (retrying until the deadline while rank 0 is not listening yet).
//   - Values are bytes (any content). Keys are 1 to 4096 bytes; values at most 16 MiB; wait()
//     and check() take at most 1024 keys. Anything else throws InvalidArgument naming the op.
//   - Every call has a deadline (StoreOptions::timeout, default FERRY_TIMEOUT). get() and wait()
//     block until their keys exist or the deadline passes, then throw TimeoutError naming the
//     op, the keys still missing, the rank and the wait.
//   - add() keeps the value as a decimal integer (get() returns "5"), so concurrent adds from
//     every rank sum exactly; add() on a key holding something else throws InvalidArgument.
//   - Calls from several threads are safe; each waiting call uses a connection of its own, so a
//     get() waiting in one thread does not hold up a set() in another.
//   - Rank 0's Store must outlive the other ranks' use of it: when it is destroyed the server
//     stops at once (no wait for anyone) and later calls elsewhere throw TransportError. End
//     with a barrier, or have rank 0 wait() for a key each rank sets when it is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

struct StoreOptions {
  std::string address;   // "host:port" of rank 0's server; "": FERRY_RENDEZVOUS, then the
                         // launcher's MASTER_ADDR:MASTER_PORT. Rank 0 may give port 0 (any
                         // free port; see Store::port()).
  int rank = -1;         // -1: the launcher's (FERRY_RANK, RANK, SLURM_PROCID, PMI_RANK); rank 0
                         // serves
  std::string secret;    // "": FERRY_SECRET (1 to 256 bytes, the same on every rank)
  std::string bind;      // what rank 0 binds; "": FERRY_RENDEZVOUS_BIND, then 127.0.0.1
  std::chrono::milliseconds timeout{0};  // every call's deadline; 0: FERRY_TIMEOUT
};

class Store {
 public:
  // Reads what `options` leaves unset from the environment; throws InvalidArgument naming a
  // missing or malformed setting, TransportError when rank 0 cannot listen.
  explicit Store(const StoreOptions& options = {});
  ~Store();
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;

  void set(const std::string& key, const std::string& value);
  // Waits until `key` exists (timeout: the store's deadline), then returns its value.
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds `delta` to the integer under `key` (a missing key counts as 0); returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Waits until every key exists; an empty list returns at once.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Whether every key exists now (no waiting).
  bool check(const std::vector<std::string>& keys);
  // Whether the key existed.
  bool delete_key(const std::string& key);
  int64_t num_keys();

  int rank() const;
  // The server's port (on rank 0 the one it bound, which port 0 chose).
  int port() const;
  // "127.0.0.1:29500".
  std::string address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
