// hal/collective.h, communicators: unique ids, init, destroy, abort, queries.
#include "api_common.hpp"
#include "collective_dispatch.hpp"
#include "layers/intercept.hpp"

#include "hal_util/env.hpp"
#include "hal_util/hmac.hpp"
#include "hal_util/secure_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

using namespace hal::loader;
using hal::collective::Deadline;
using hal::collective::Status;
using hal::collective::StoreAddress;

namespace {

// The layout of hal_comm_unique_id_t's bytes: a magic, the store's port and
// host, a random session so two communicators on one store never meet, and
// the store's secret (256 bits from getrandom) that every rank proves.
struct UniqueIdLayout {
  char magic[8];
  uint16_t port;
  uint16_t reserved[3];
  uint64_t session;
  char host[64];
  hal::collective::StoreSecret secret;
};
static_assert(sizeof(UniqueIdLayout) <= HAL_COMM_UNIQUE_ID_BYTES);
constexpr char kIdMagic[8] = "HALCID2";

// The fixed-session TCP store's secret: HAL_COMM_STORE_SECRET, else the
// contents of the file HAL_COMM_STORE_SECRET_FILE (a regular file of the
// caller's own, not a link, with no group or other access, opened without
// blocking: a FIFO or a device is refused, never waited on); strong enough
// by hal::collective::secret_strength_bits, hashed to the key.
constexpr size_t kMaxSecretFileBytes = 4096;

hal_result_t fixed_store_secret(const char* function, hal::collective::StoreSecret& out) {
  std::vector<unsigned char> text;
  const char* source = "HAL_COMM_STORE_SECRET";
  if (const char* value = hal::util::env_nonempty("HAL_COMM_STORE_SECRET")) {
    text.assign(value, value + std::strlen(value));
  } else if (const char* path = hal::util::env_nonempty("HAL_COMM_STORE_SECRET_FILE")) {
    source = "HAL_COMM_STORE_SECRET_FILE";
    hal::util::ReadRule rule;
    rule.no_follow = true;
    rule.must_be_private = true;
    rule.owner_only = true;
    rule.max_bytes = kMaxSecretFileBytes;
    int error = 0;
    std::string why;
    if (!hal::util::read_regular_file(AT_FDCWD, path, rule, text, error, why)) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                  "HAL_COMM_STORE_SECRET_FILE '%s' cannot be used: %s (it must be a regular file "
                  "of at most %zu bytes, not a symbolic link, owned by this user, with no group or "
                  "other access: chmod 600)",
                  path, why.c_str(), kMaxSecretFileBytes);
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  } else {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "HAL_COMM_BOOTSTRAP_TCP_STORE needs the job's shared secret: set "
                "HAL_COMM_STORE_SECRET or HAL_COMM_STORE_SECRET_FILE in every rank");
  }
  const double bits = hal::collective::secret_strength_bits(text);
  if (bits < hal::collective::kMinSecretBits) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "the TCP store secret of %s is too weak to resist offline guessing (%.0f bits by "
                "HAL's estimate, at least %.0f required): use random bytes, e.g. the 64 hex "
                "digits of 'openssl rand -hex 32'",
                source, bits, hal::collective::kMinSecretBits);
  }
  out = hal::util::sha256(text);
  return HAL_SUCCESS;
}

struct ResolvedConfig {
  uint32_t timeout_ms = HAL_COMM_DEFAULT_TIMEOUT_MS;
  hal_comm_bootstrap_t bootstrap = HAL_COMM_BOOTSTRAP_UNIQUE_ID;
  const char* store_address = nullptr;
};

hal_result_t resolve_config(const hal_comm_config_t* config, const char* function,
                            ResolvedConfig& out) {
  if (config == nullptr) return HAL_SUCCESS;
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(config, function, "config", "hal_comm_config_t", result)) return result;
  if (config->timeout_ms != 0) out.timeout_ms = config->timeout_ms;
  out.bootstrap = config->bootstrap;
  out.store_address = config->store_address;
  if (static_cast<uint32_t>(out.bootstrap) > HAL_COMM_BOOTSTRAP_MPI) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function, "config->bootstrap %d is unknown",
                static_cast<int>(out.bootstrap));
  }
  return HAL_SUCCESS;
}

hal_comm_config_t plugin_config(const ResolvedConfig& resolved) {
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = resolved.timeout_ms;
  config.bootstrap = resolved.bootstrap;
  config.store_address = resolved.store_address;
  return config;
}

// HAL_COLL_PATH (collective/path.hpp), as far as making a communicator goes:
// a value that names no path is refused here, and host-staged makes the
// loader serve the communicator instead of the plugin.
hal_result_t read_path_policy(const char* function, bool& out_staged) {
  const auto& policy = hal::collective::PathPolicy::from_environment();
  if (!policy.invalid.ok()) {
    return fail(policy.invalid.result, function, "%s", policy.invalid.message.c_str());
  }
  out_staged = policy.forced && policy.path == hal::collective::Path::kHostStaged;
  return HAL_SUCCESS;
}

hal_result_t fail_status(const Status& status, const char* function) {
  return fail(status.result, function, "%s", status.message.c_str());
}

// The bootstrap a plugin borrows in comm_init_rank_exchange: broadcasts of
// the plugin's bytes as one host-staged call over the rank's store
// connection. The first failure is kept, with the store's detail.
class StoreExchange {
 public:
  StoreExchange(hal::loader::HostComm& comm, const Deadline& deadline)
      : comm_(comm), deadline_(deadline) {
    view_.struct_size = sizeof(view_);
    view_.context = this;
    view_.broadcast = &StoreExchange::broadcast;
  }
  const hal_comm_exchange_t* view() const { return &view_; }
  const Status& status() const { return status_; }

 private:
  static hal_result_t broadcast(void* context, uint32_t root, void* data, size_t size) {
    auto& self = *static_cast<StoreExchange*>(context);
    try {
      hal_collective_call_t call{};
      call.kind = HAL_COLLECTIVE_BROADCAST;
      call.dtype = HAL_DTYPE_U8;
      call.peer = root;
      call.send = data;
      call.recv = data;
      call.count = size;
      std::lock_guard lock(self.comm_.run_mutex);
      const Status status = self.comm_.run(std::span(&call, 1), self.deadline_);
      if (!status.ok() && self.status_.ok()) self.status_ = status;
      return status.result;
    } catch (...) {  // nothing leaves through the plugin's frames
      self.status_ = Status::failure(HAL_ERROR_OUT_OF_MEMORY, "the bootstrap exchange failed");
      return HAL_ERROR_OUT_OF_MEMORY;
    }
  }

  hal::loader::HostComm& comm_;
  Deadline deadline_;
  Status status_;
  hal_comm_exchange_t view_{};
};

}  // namespace

static hal_result_t comm_get_unique_id_body(hal_comm_unique_id_t* out_id) {
  constexpr const char* kFunction = "hal_comm_get_unique_id";
  return guarded(kFunction, [&]() -> hal_result_t {
    Registry* registry = nullptr;
    if (hal_result_t r = check_preconditions_in(registry, kFunction, Required{out_id, "out_id"});
        r != HAL_SUCCESS) {
      return r;
    }
    // Loopback unless the user names another address.
    const char* host = hal::util::env_nonempty("HAL_COMM_STORE_HOST");
    StoreAddress address{host != nullptr ? host : "127.0.0.1", 0};
    if (address.host.size() >= sizeof(UniqueIdLayout::host)) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "HAL_COMM_STORE_HOST is too long");
    }
    UniqueIdLayout layout{};
    if (!hal::util::random_bytes(layout.secret) ||
        !hal::util::random_bytes(
            std::span(reinterpret_cast<uint8_t*>(&layout.session), sizeof(layout.session)))) {
      return fail(HAL_ERROR_INTERNAL, kFunction, "getrandom failed: %s", std::strerror(errno));
    }
    Status status;
    auto server = hal::collective::StoreServer::start(address, layout.secret, {}, status);
    if (!server) return fail_status(status, kFunction);
    std::memcpy(layout.magic, kIdMagic, sizeof(kIdMagic));
    layout.port = server->port();
    std::snprintf(layout.host, sizeof(layout.host), "%s", address.host.c_str());
    registry->stores.add(server, layout.session, /*hold=*/true);
    hal_comm_unique_id_t id{};
    std::memcpy(id.bytes, &layout, sizeof(layout));
    *out_id = id;
    hal::util::Sha256Digest wipe{};
    std::memcpy(layout.secret.data(), wipe.data(), wipe.size());
    return HAL_SUCCESS;
  });
}

static hal_result_t comm_init_all_body(uint32_t count, const hal_device_t* devices,
                                       const hal_comm_config_t* config, hal_comm_t* out_comms) {
  constexpr const char* kFunction = "hal_comm_init_all";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r = check_preconditions(kFunction, Required{devices, "devices"},
                                             Required{out_comms, "out_comms"});
        r != HAL_SUCCESS) {
      return r;
    }
    if (count == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "count is 0");
    ResolvedConfig resolved;
    if (hal_result_t r = resolve_config(config, kFunction, resolved); r != HAL_SUCCESS) return r;
    std::vector<hal_impl_device_t*> impls(count);
    for (uint32_t i = 0; i < count; ++i) {
      if (!is_live(devices[i], HandleKind::kDevice)) {
        return reject_handle(devices[i], HandleKind::kDevice, kFunction, "devices[i]");
      }
      if (devices[i]->plugin != devices[0]->plugin) {
        return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction,
                    "devices[%u] is of plugin '%s', devices[0] of plugin '%s'", i,
                    devices[i]->plugin->name.c_str(), devices[0]->plugin->name.c_str());
      }
      for (uint32_t j = 0; j < i; ++j) {
        if (devices[j] == devices[i]) {
          return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "devices[%u] repeats devices[%u]", i,
                      j);
        }
      }
      impls[i] = devices[i]->impl;
    }
    std::vector<HandleOwner<hal_comm_s>> comms;
    for (uint32_t i = 0; i < count; ++i) {
      comms.push_back(make_handle<hal_comm_s>(devices[i], i, count, resolved.timeout_ms));
    }
    const PluginRecord& plugin = *devices[0]->plugin;
    bool staged = false;
    if (hal_result_t r = read_path_policy(kFunction, staged); r != HAL_SUCCESS) return r;
    if (plugin.collectives && !staged) {
      const hal_comm_config_t plugin_view = plugin_config(resolved);
      std::vector<hal_impl_comm_t*> made(count, nullptr);
      const hal_result_t r =
          plugin.table.comm_init_local(count, impls.data(), &plugin_view, made.data());
      if (r != HAL_SUCCESS) return fail_from_plugin(r, kFunction, plugin.name);
      for (uint32_t i = 0; i < count; ++i) comms[i]->impl = made[i];
    } else {
      auto group = std::make_shared<hal::collective::LocalGroup>(count);
      for (uint32_t i = 0; i < count; ++i) comms[i]->host = make_local_host_comm(group, i, count);
    }
    for (uint32_t i = 0; i < count; ++i) {
      out_comms[i] = active_registry()->comms.add(std::move(comms[i]));
    }
    return HAL_SUCCESS;
  });
}

static hal_result_t comm_init_rank_body(hal_device_t device, uint32_t nranks,
                                        const hal_comm_unique_id_t* id, uint32_t rank,
                                        const hal_comm_config_t* config, hal_comm_t* out_comm) {
  constexpr const char* kFunction = "hal_comm_init_rank";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r =
            check_preconditions(kFunction, Live{device, "device"}, Required{out_comm, "out_comm"});
        r != HAL_SUCCESS) {
      return r;
    }
    ResolvedConfig resolved;
    if (hal_result_t r = resolve_config(config, kFunction, resolved); r != HAL_SUCCESS) return r;
    if (nranks == 0 || rank >= nranks) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "rank %u is not below nranks %u", rank,
                  nranks);
    }
    StoreAddress address;
    std::string session;
    hal::collective::StoreSecret secret{};
    std::shared_ptr<hal::collective::StoreServer> server;  // this process's, if it serves
    if (resolved.bootstrap == HAL_COMM_BOOTSTRAP_UNIQUE_ID) {
      if (id == nullptr) return null_argument(kFunction, "id");
      UniqueIdLayout layout;
      std::memcpy(&layout, id->bytes, sizeof(layout));
      layout.host[sizeof(layout.host) - 1] = '\0';
      if (std::memcmp(layout.magic, kIdMagic, sizeof(kIdMagic)) != 0) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                    "id was not made by hal_comm_get_unique_id");
      }
      address = {layout.host, layout.port};
      session = "id:" + std::to_string(layout.session);
      secret = layout.secret;
      server = active_registry()->stores.find(layout.port, layout.session);
    } else if (resolved.bootstrap == HAL_COMM_BOOTSTRAP_TCP_STORE) {
      if (resolved.store_address == nullptr ||
          !StoreAddress::parse(resolved.store_address, address)) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                    "config->store_address '%s' is not host:port",
                    resolved.store_address ? resolved.store_address : "(null)");
      }
      if (hal_result_t r = fixed_store_secret(kFunction, secret); r != HAL_SUCCESS) return r;
      session = "store";
    }
    auto comm = make_handle<hal_comm_s>(device, rank, nranks, resolved.timeout_ms);
    const PluginRecord& plugin = *device->plugin;
    const hal_comm_config_t plugin_view = plugin_config(resolved);
    const Deadline deadline = Deadline::after_ms(resolved.timeout_ms, nullptr);
    Status status;
    // Meets the other ranks at the store: rank 0 of a TCP store serves it, on
    // the address the user named (port 0 takes a free one).
    auto join_store = [&]() -> hal_result_t {
      if (resolved.bootstrap == HAL_COMM_BOOTSTRAP_TCP_STORE && rank == 0) {
        server = hal::collective::StoreServer::start(address, secret, {}, status);
        if (!server) return fail_status(status, kFunction);
        address.port = server->port();
        active_registry()->stores.add(server, 0, /*hold=*/false);
      }
      comm->host = make_store_host_comm(address, secret, server, session, rank, nranks,
                                        resolved.timeout_ms, deadline, status);
      return comm->host ? HAL_SUCCESS : fail_status(status, kFunction);
    };
    auto publish = [&]() -> hal_result_t {
      // From now on the communicators of this process keep their store alive.
      if (server) active_registry()->stores.adopted(server.get());
      *out_comm = active_registry()->comms.add(std::move(comm));
      return HAL_SUCCESS;
    };
    bool staged = false;
    if (hal_result_t r = read_path_policy(kFunction, staged); r != HAL_SUCCESS) return r;
    if (staged && resolved.bootstrap == HAL_COMM_BOOTSTRAP_MPI) {
      return fail(HAL_ERROR_UNSUPPORTED, kFunction,
                  "HAL_COLL_PATH=host-staged: the loader's host-staged collectives run over a "
                  "TCP store only, not an MPI bootstrap");
    }
    if (plugin.collectives && !staged && plugin.table.comm_init_rank_exchange != nullptr &&
        resolved.bootstrap != HAL_COMM_BOOTSTRAP_MPI) {
      if (hal_result_t r = join_store(); r != HAL_SUCCESS) return r;
      StoreExchange exchange(*comm->host, deadline);
      hal_impl_comm_t* made = nullptr;
      const hal_result_t r = plugin.table.comm_init_rank_exchange(
          device->impl, nranks, rank, &plugin_view, exchange.view(), &made);
      if (r == HAL_SUCCESS) {
        comm->impl = made;
        comm->bootstrap = std::move(comm->host);  // keeps the store for the peers
        return publish();
      }
      if (!exchange.status().ok()) {
        take_plugin_message();  // the loader's own detail is the precise one
        return fail_status(exchange.status(), kFunction);
      }
      if (r != HAL_ERROR_UNSUPPORTED) return fail_from_plugin(r, kFunction, plugin.name);
      take_plugin_message();  // host-staged over the store already joined
      return publish();
    }
    if (plugin.collectives && !staged && plugin.table.comm_init_rank != nullptr) {
      hal_impl_comm_t* made = nullptr;
      const hal_result_t r =
          plugin.table.comm_init_rank(device->impl, nranks, rank, &plugin_view, &made);
      if (r == HAL_SUCCESS) {
        comm->impl = made;
        *out_comm = active_registry()->comms.add(std::move(comm));
        return HAL_SUCCESS;
      }
      if (r != HAL_ERROR_UNSUPPORTED) return fail_from_plugin(r, kFunction, plugin.name);
      take_plugin_message();  // the loader's own path answers instead
    }
    if (resolved.bootstrap == HAL_COMM_BOOTSTRAP_MPI) {
      return fail(HAL_ERROR_UNSUPPORTED, kFunction,
                  "plugin '%s' has no MPI support and the loader's host-staged collectives run "
                  "over a TCP store only",
                  plugin.name.c_str());
    }
    if (hal_result_t r = join_store(); r != HAL_SUCCESS) return r;
    return publish();
  });
}

namespace {

// Makes the calls in flight on |comm| return: the plugin's rank aborts, the
// loader's leaves its peers and wakes its blocked wait (the deadline watches
// |aborted|; a store rank's client is woken through its eventfd).
void signal_abort(hal_comm_s* comm) {
  if (comm->impl != nullptr) {
    comm->device->plugin->table.comm_abort(comm->impl);
  } else if (comm->host) {
    comm->host->aborted.store(true);
    comm->host->leave_abruptly();
  }
  // The store a plugin's rank met through: an aborted rank does not wait
  // for peers to take what is left in it.
  if (comm->bootstrap) comm->bootstrap->aborted.store(true);
}

// Ends a communicator its caller marked destroyed (mark_destroyed). An abort
// signals the calls in flight before waiting for them, so a collective
// blocked on a peer that never comes returns instead of holding the abort up
// to its deadline; a destroy waits for them to finish. Then no call uses the
// handle: its rank and its slot are freed.
void end_comm(HandleOwner<hal_comm_s> owned, bool abort) {
  hal_comm_s* comm = owned.get();
  if (abort) signal_abort(comm);
  wait_until_unused(comm->header);
  if (comm->impl != nullptr) comm->device->plugin->table.comm_destroy(comm->impl);
  comm->impl = nullptr;
}  // |owned| gives the slot back; a store rank says goodbye with its last reference

hal_result_t release_comm(hal_comm_t comm, bool abort, const char* function) {
  // NULL is a no-op for hal_comm_destroy only.
  Registry* registry = nullptr;
  if (hal_result_t r = abort ? check_preconditions_in(registry, function, Live{comm, "comm"})
                             : check_preconditions_in(registry, function, Nullable{comm, "comm"});
      r != HAL_SUCCESS) {
    return r;
  }
  if (comm == nullptr) return HAL_SUCCESS;
  // One destroy or abort wins the mark; later calls, and the loser, see a
  // destroyed handle.
  if (!mark_destroyed(comm->header)) {
    return reject_destroying(comm, HandleKind::kComm, function, "comm");
  }
  HandleOwner<hal_comm_s> owned = registry->comms.take(comm);
  if (!owned) return reject_handle(comm, HandleKind::kComm, function, "comm");  // raced a shutdown
  end_comm(std::move(owned), abort);
  return HAL_SUCCESS;
}

}  // namespace

namespace hal::loader {

void release_live_comms(Registry& registry) noexcept {
  for (auto& comm : registry.comms.take_all()) {
    try {
      // Marked here, unless a destroy marked it already and lost it to this
      // take (that destroy then reads only the header, which stays in the slab).
      static_cast<void>(mark_destroyed(comm->header));
      end_comm(std::move(comm), /*abort=*/true);
    } catch (...) {  // a shutdown frees what it can
    }
  }
}

}  // namespace hal::loader

static hal_result_t comm_destroy_body(hal_comm_t comm) {
  constexpr const char* kFunction = "hal_comm_destroy";
  return guarded(kFunction, [&] { return release_comm(comm, false, kFunction); });
}

static hal_result_t comm_abort_body(hal_comm_t comm) {
  constexpr const char* kFunction = "hal_comm_abort";
  return guarded(kFunction, [&] { return release_comm(comm, true, kFunction); });
}

static hal_result_t comm_get_async_error_body(hal_comm_t comm, hal_result_t* out_error) {
  constexpr const char* kFunction = "hal_comm_get_async_error";
  return guarded(kFunction, [&]() -> hal_result_t {
    HandleUse<hal_comm_s> use;
    if (hal_result_t r = check_preconditions(kFunction, Held{comm, "comm", use},
                                             Required{out_error, "out_error"});
        r != HAL_SUCCESS) {
      return r;
    }
    *out_error = comm_async_error(comm);
    return HAL_SUCCESS;
  });
}

static hal_result_t comm_count_body(hal_comm_t comm, uint32_t* out_count) {
  HandleUse<hal_comm_s> use;
  if (hal_result_t r = check_preconditions("hal_comm_count", Held{comm, "comm", use},
                                           Required{out_count, "out_count"});
      r != HAL_SUCCESS) {
    return r;
  }
  *out_count = comm->ranks;
  return HAL_SUCCESS;
}

static hal_result_t comm_rank_body(hal_comm_t comm, uint32_t* out_rank) {
  HandleUse<hal_comm_s> use;
  if (hal_result_t r = check_preconditions("hal_comm_rank", Held{comm, "comm", use},
                                           Required{out_rank, "out_rank"});
      r != HAL_SUCCESS) {
    return r;
  }
  *out_rank = comm->rank;
  return HAL_SUCCESS;
}

static hal_result_t comm_get_device_body(hal_comm_t comm, hal_device_t* out_device) {
  HandleUse<hal_comm_s> use;
  if (hal_result_t r = check_preconditions("hal_comm_get_device", Held{comm, "comm", use},
                                           Required{out_device, "out_device"});
      r != HAL_SUCCESS) {
    return r;
  }
  *out_device = comm->device;
  return HAL_SUCCESS;
}

// The public entry points, through the layers (layers/intercept.hpp).
hal_result_t hal_comm_get_unique_id(hal_comm_unique_id_t* out_id) {
  return layers::call<layers::CommGetUniqueId, comm_get_unique_id_body>(HAL_CALLER, out_id);
}

hal_result_t hal_comm_init_all(uint32_t count, const hal_device_t* devices,
                               const hal_comm_config_t* config, hal_comm_t* out_comms) {
  return layers::call<layers::CommInitAll, comm_init_all_body>(HAL_CALLER, count, devices, config,
                                                               out_comms);
}

hal_result_t hal_comm_init_rank(hal_device_t device, uint32_t nranks,
                                const hal_comm_unique_id_t* id, uint32_t rank,
                                const hal_comm_config_t* config, hal_comm_t* out_comm) {
  return layers::call<layers::CommInitRank, comm_init_rank_body>(HAL_CALLER, device, nranks, id,
                                                                 rank, config, out_comm);
}

hal_result_t hal_comm_destroy(hal_comm_t comm) {
  return layers::call<layers::CommDestroy, comm_destroy_body>(HAL_CALLER, comm);
}

hal_result_t hal_comm_abort(hal_comm_t comm) {
  return layers::call<layers::CommAbort, comm_abort_body>(HAL_CALLER, comm);
}

hal_result_t hal_comm_get_async_error(hal_comm_t comm, hal_result_t* out_error) {
  return layers::call<layers::CommGetAsyncError, comm_get_async_error_body>(HAL_CALLER, comm,
                                                                            out_error);
}

hal_result_t hal_comm_count(hal_comm_t comm, uint32_t* out_count) {
  return layers::call<layers::CommCount, comm_count_body>(HAL_CALLER, comm, out_count);
}

hal_result_t hal_comm_rank(hal_comm_t comm, uint32_t* out_rank) {
  return layers::call<layers::CommRank, comm_rank_body>(HAL_CALLER, comm, out_rank);
}

hal_result_t hal_comm_get_device(hal_comm_t comm, hal_device_t* out_device) {
  return layers::call<layers::CommGetDevice, comm_get_device_body>(HAL_CALLER, comm, out_device);
}
