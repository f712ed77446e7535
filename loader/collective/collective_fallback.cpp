// The loader's host-staged collectives: what every plugin without collective
// entries gets. Blocking (the call returns when the collective is done) and
// simple rather than fast: the plugin's stream is synchronised, inputs are
// copied to host memory, the host engine runs, outputs are copied back.
#include "collective_comm.hpp"

#include "error.hpp"
#include "hal_collective/alltoallv.hpp"

#include <cstring>
#include <map>

namespace hal::loader {

using collective::Channel;
using collective::Deadline;
using collective::Status;

namespace {

class LocalHostComm final : public HostComm {
 public:
  LocalHostComm(std::shared_ptr<collective::LocalGroup> group, uint32_t rank, uint32_t ranks)
      : group_(std::move(group)), rank_(rank) {
    chooser_.means = {ranks, /*local=*/true, false, false, /*host_staged=*/true};
    chooser_.log = &log_;
    chooser_.rank = rank;
  }
  Status run(std::span<const hal_collective_call_t> calls, const Deadline& deadline) override {
    // Every rank is a thread of this process, under the same HAL_COLL_PATH:
    // all refuse alike.
    if (Status refused = chooser_.check(calls); !refused.ok()) return refused;
    return group_->run(rank_, calls, deadline);
  }
  void leave_abruptly() override {
    group_->fail(rank_, Status::failure(HAL_ERROR_INVALID_STATE, "the rank was aborted"));
  }

 private:
  std::shared_ptr<collective::LocalGroup> group_;
  uint32_t rank_;
  collective::PathLog log_;
  collective::Chooser chooser_;
};

// Messages through the store: a send is a set under a key naming channel,
// sender, receiver and sequence number, with the call's tag in front; a recv
// takes that key. The store buffers, so sends complete at once.
class StoreTransport final : public collective::Transport {
 public:
  StoreTransport(collective::StoreClient& client, uint32_t rank, uint32_t ranks)
      : client_(client), rank_(rank), ranks_(ranks) {}
  // The deadline of the call in progress: sends need one too.
  void begin(const Deadline& deadline) { deadline_ = deadline; }
  uint32_t rank() const override { return rank_; }
  uint32_t ranks() const override { return ranks_; }

  Status post_send(uint32_t peer, const void* data, size_t bytes, uint32_t tag,
                   Channel channel) override {
    message_.resize(sizeof(tag) + bytes);
    std::memcpy(message_.data(), &tag, sizeof(tag));
    if (bytes != 0) std::memcpy(message_.data() + sizeof(tag), data, bytes);
    return client_.set(key(channel, rank_, peer), message_.data(), message_.size(), deadline_);
  }
  Status post_recv(uint32_t peer, void* data, size_t bytes, uint32_t tag,
                   Channel channel) override {
    pending_.push_back({key(channel, peer, rank_), data, bytes, tag});
    return {};
  }
  Status wait_all(const Deadline& deadline) override {
    Status status;
    for (const Pending& recv : pending_) {
      if (!status.ok()) break;
      status = client_.take(recv.key, message_, sizeof(uint32_t) + recv.bytes, deadline);
      if (!status.ok()) break;
      uint32_t tag = 0;
      if (message_.size() >= sizeof(tag)) std::memcpy(&tag, message_.data(), sizeof(tag));
      if (message_.size() != sizeof(tag) + recv.bytes || tag != recv.tag) {
        status = Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                                 "a peer called a different collective, count, dtype, op or root");
        break;
      }
      if (recv.bytes != 0) std::memcpy(recv.data, message_.data() + sizeof(tag), recv.bytes);
    }
    pending_.clear();
    return status;
  }

 private:
  struct Pending {
    std::string key;
    void* data;
    size_t bytes;
    uint32_t tag;
  };
  std::string key(Channel channel, uint32_t from, uint32_t to) {
    const uint64_t seq = sequence_[{static_cast<uint32_t>(channel), from, to}]++;
    return std::to_string(static_cast<uint32_t>(channel)) + "/" + std::to_string(from) + ">" +
           std::to_string(to) + "#" + std::to_string(seq);
  }

  collective::StoreClient& client_;
  uint32_t rank_;
  uint32_t ranks_;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint64_t> sequence_;
  std::vector<Pending> pending_;
  std::vector<uint8_t> message_;
  Deadline deadline_{};
};

class StoreHostComm final : public HostComm {
 public:
  StoreHostComm(std::shared_ptr<collective::StoreServer> server,
                std::unique_ptr<collective::StoreClient> client, uint32_t rank, uint32_t ranks,
                uint32_t timeout_ms)
      : server_(std::move(server)),
        client_(std::move(client)),
        transport_(*client_, rank, ranks),
        timeout_ms_(timeout_ms) {
    chooser_.means = {ranks, false, false, /*transport=*/true, /*host_staged=*/true};
    chooser_.log = &log_;
    chooser_.rank = rank;
  }
  // The rank that serves the store gives the peers what it left in it (its
  // last messages, not yet taken) before the store may stop with it, within
  // the communicator's timeout; an aborted rank leaves at once.
  ~StoreHostComm() override {
    if (server_ && !aborted.load()) {
      static_cast<void>(server_->linger(Deadline::after_ms(timeout_ms_, nullptr)));
    }
  }
  StoreHostComm(const StoreHostComm&) = delete;
  StoreHostComm& operator=(const StoreHostComm&) = delete;
  Status run(std::span<const hal_collective_call_t> calls, const Deadline& deadline) override {
    transport_.begin(deadline);
    return collective::run_p2p(transport_, calls, deadline, scratch_, chooser_);
  }
  // Only a thread that owns run_mutex may touch the connection, so an abort
  // during a call interrupts the call's socket wait and leaves the rest to it.
  void leave_abruptly() override {
    client_->interrupt();
    std::unique_lock lock(run_mutex, std::try_to_lock);
    if (lock.owns_lock()) client_->sever();
  }

 private:
  // The store this process serves for the communicator, if any: it lives as
  // long as the communicators that use it.
  std::shared_ptr<collective::StoreServer> server_;
  std::unique_ptr<collective::StoreClient> client_;
  StoreTransport transport_;
  std::vector<uint8_t> scratch_;
  uint32_t timeout_ms_;
  collective::PathLog log_;
  collective::Chooser chooser_;
};

}  // namespace

std::shared_ptr<HostComm> make_local_host_comm(std::shared_ptr<collective::LocalGroup> group,
                                               uint32_t rank, uint32_t ranks) {
  return std::make_shared<LocalHostComm>(std::move(group), rank, ranks);
}

std::shared_ptr<HostComm> make_store_host_comm(const collective::StoreAddress& address,
                                               const collective::StoreSecret& secret,
                                               std::shared_ptr<collective::StoreServer> server,
                                               const std::string& session, uint32_t rank,
                                               uint32_t ranks, uint32_t timeout_ms,
                                               const Deadline& deadline, Status& out_status) {
  auto client = collective::StoreClient::connect(address, secret, deadline, out_status);
  if (!client) return nullptr;
  out_status = client->join(session, rank, ranks, deadline);
  if (!out_status.ok()) return nullptr;
  return std::make_shared<StoreHostComm>(std::move(server), std::move(client), rank, ranks,
                                         timeout_ms);
}

Status run_host_staged(hal_stream_s* stream, HostComm& comm,
                       std::span<const hal_collective_call_t> calls, uint32_t rank, uint32_t ranks,
                       const Deadline& deadline) {
  const hal_plugin_table_v1_t& table = stream->header.plugin->table;
  auto plugin_failure = [&](hal_result_t result, const char* what) {
    return Status::failure(
        result, std::string(what) + " failed in plugin '" + stream->header.plugin->name + "'");
  };
  auto copy = [&](void* dst, const void* src, size_t bytes) -> hal_result_t {
    return bytes == 0 ? HAL_SUCCESS : table.memcpy_async(stream->impl, dst, src, bytes);
  };
  // Host copies of the inputs and room for the outputs. Every call, in place
  // on the device or not, runs out of place on the host. The engines write
  // each output byte of the other calls, so their output stages need no
  // initial contents; an alltoallv's blocks may leave gaps, so only its
  // blocks are copied back.
  std::vector<std::vector<uint8_t>> stages;
  collective::OwnedCalls staged(calls);
  stages.reserve(calls.size() * 2);
  for (size_t i = 0; i < calls.size(); ++i) {
    hal_collective_call_t& call = staged.calls()[i];
    const collective::CallExtent extent = collective::call_extent(call, rank, ranks);
    const bool uneven = call.kind == HAL_COLLECTIVE_ALLTOALLV;
    const void* send = uneven ? collective::layout_of(call).sendbuf : call.send;
    void* recv = uneven ? collective::layout_of(call).recvbuf : call.recv;
    void* send_stage = nullptr;
    void* recv_stage = nullptr;
    if (send != nullptr && extent.send_bytes != 0) {
      auto& stage = stages.emplace_back(extent.send_bytes);
      if (hal_result_t r = copy(stage.data(), send, extent.send_bytes); r != HAL_SUCCESS) {
        return plugin_failure(r, "staging an input");
      }
      send_stage = stage.data();
    }
    if (recv != nullptr && extent.recv_bytes != 0) {
      recv_stage = stages.emplace_back(extent.recv_bytes).data();
    }
    if (uneven) {
      staged.layout(i).rebase(send_stage, recv_stage);
    } else {
      if (send_stage != nullptr) call.send = send_stage;
      if (recv_stage != nullptr) call.recv = recv_stage;
    }
  }
  if (hal_result_t r = table.stream_synchronize(stream->impl); r != HAL_SUCCESS) {
    return plugin_failure(r, "waiting for the stream");
  }
  Status status = comm.run(staged.calls(), deadline);
  if (!status.ok()) return status;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].kind == HAL_COLLECTIVE_ALLTOALLV) {
      const hal_alltoallv_layout_t& target = collective::layout_of(calls[i]);
      const hal_alltoallv_layout_t& source = collective::layout_of(staged.calls()[i]);
      const size_t elem = HAL_DTYPE_SIZE(calls[i].dtype);
      for (uint32_t r = 0; r < ranks; ++r) {
        const size_t offset = target.recv_displs[r] * elem;
        if (hal_result_t result = copy(static_cast<uint8_t*>(target.recvbuf) + offset,
                                       static_cast<const uint8_t*>(source.recvbuf) + offset,
                                       target.recv_counts[r] * elem);
            result != HAL_SUCCESS) {
          return plugin_failure(result, "copying an output back");
        }
      }
      continue;
    }
    const collective::CallExtent extent = collective::call_extent(calls[i], rank, ranks);
    if (calls[i].recv == nullptr || extent.recv_bytes == 0) continue;
    if (hal_result_t r = copy(calls[i].recv, staged.calls()[i].recv, extent.recv_bytes);
        r != HAL_SUCCESS) {
      return plugin_failure(r, "copying an output back");
    }
  }
  if (hal_result_t r = table.stream_synchronize(stream->impl); r != HAL_SUCCESS) {
    return plugin_failure(r, "waiting for the stream");
  }
  return {};
}

}  // namespace hal::loader
