// The TCP store: a tiny key-value server that ranks started without mpirun
// use to find each other (join) and, in the loader's host-staged fallback,
// to pass messages (set / take). One server thread multiplexes every
// connection with poll(). A rank whose connection drops without a goodbye
// fails its session: every pending and later request of that session is
// answered HAL_ERROR_REMOTE, so a dead rank is an error in every survivor.
#pragma once

#include "hal_collective/status.hpp"

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace hal::collective {

struct StoreAddress {
  std::string host;  // dotted IPv4 or "localhost"
  uint16_t port = 0;
  static bool parse(const std::string& text, StoreAddress& out);
  std::string text() const { return host + ":" + std::to_string(port); }
};

class StoreServer {
 public:
  // Listens on |address| (port 0: any free port, see port()).
  static std::unique_ptr<StoreServer> start(const StoreAddress& address, Status& out_status);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  uint16_t port() const { return port_; }

 private:
  StoreServer(int listen_fd, int wake_fd_read, int wake_fd_write, uint16_t port);
  void serve();

  int listen_fd_;
  int wake_read_;
  int wake_write_;
  uint16_t port_;
  std::thread thread_;
};

class StoreClient {
 public:
  // Connects, retrying until the deadline (rank 0's server may start later).
  static std::unique_ptr<StoreClient> connect(const StoreAddress& address, const Deadline& deadline,
                                              Status& out_status);
  ~StoreClient();  // says goodbye: a clean leave never fails the session
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Enters |session| as |rank| of |ranks| and returns when all have joined.
  Status join(const std::string& session, uint32_t rank, uint32_t ranks, const Deadline& deadline);
  Status set(const std::string& key, const void* data, size_t bytes);
  // Waits for |key|, removes it from the store, returns its value.
  Status take(const std::string& key, std::vector<uint8_t>& out_value, const Deadline& deadline);
  // Drops the connection without a goodbye: what a crash looks like to peers.
  void sever();

 private:
  explicit StoreClient(int fd) : fd_(fd) {}
  Status request(uint32_t op, const std::string& key, const void* data, size_t bytes,
                 uint64_t argument);
  Status reply(std::vector<uint8_t>* out_value, const Deadline& deadline);

  int fd_;
};

}  // namespace hal::collective
